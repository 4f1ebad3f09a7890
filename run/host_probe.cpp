#include "run/host_probe.h"

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/data_paths.h"
#include "core/plan_inputs.h"

namespace zeroplan {

namespace {

// One shell word: the text in single quotes, each ' written as '\''.
std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The last non-empty line of `text` (the probe's JSON, or a Python error's last line).
std::string last_line(const std::string& text) {
  std::istringstream lines(text);
  std::string line, last;
  while (std::getline(lines, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

}  // namespace

std::variant<HostProbe, std::string> run_host_probe(double timeout_seconds) {
  const std::filesystem::path script = data_directory() / "bench" / "deepspeed" / "host_probe.py";
  std::error_code error;
  if (!std::filesystem::is_regular_file(script, error))
    return "no probe script at " + script.string() + " (ZEROPLAN_DATA_DIR points at a zeroplan source tree)";
  const char* python_override = std::getenv("ZEROPLAN_PYTHON");
  const std::string python = python_override && *python_override ? python_override : "python3";
  HostProbe probe;
  probe.command = python + " " + script.string();
  // coreutils timeout ends a probe that hangs (a wedged driver, an import that blocks); 2>&1 keeps Python's error.
  char limit[32];
  std::snprintf(limit, sizeof limit, "%.0f", std::ceil(timeout_seconds));
  const std::string command =
      "timeout " + std::string(limit) + " " + shell_quoted(python) + " " + shell_quoted(script.string()) + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return "could not start " + python + " (popen failed)";
  std::string output;
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  const int code = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const std::string last = last_line(output);
  if (code == 124) return probe.command + " ran longer than " + std::string(limit) + " s";
  if (code == 127) return python + " not found (set ZEROPLAN_PYTHON to the training environment's interpreter)";
  if (code != 0)
    return probe.command + " exited with status " + std::to_string(code) + (last.empty() ? "" : ": " + last);
  try {
    const nlohmann::json figures = nlohmann::json::parse(last);
    probe.eager_op_seconds = figures.at("eager_op_seconds").get<double>();
    probe.python_call_seconds = figures.at("python_call_seconds").get<double>();
  } catch (const nlohmann::json::exception&) {
    return probe.command + " printed no probe figures (last line: '" + last + "')";
  }
  if (!(probe.eager_op_seconds >= kMinHostOpSeconds && probe.eager_op_seconds <= kMaxHostOpSeconds))
    return probe.command + " printed eager_op_seconds " + std::to_string(probe.eager_op_seconds) +
           ", outside 1e-7..1e-3 s";
  return probe;
}

}  // namespace zeroplan
