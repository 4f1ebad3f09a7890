// Running a Python script the test carries as text under Debian's /usr/bin/python3 (the interpreter scripts/setup.sh
// installs numpy and safetensors for), for tests that check our files against the `safetensors` package.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace zeroplan::test {

struct PythonResult {
  int status = -1;     // the script's exit status, -1 when it did not exit normally
  std::string output;  // stdout and stderr together
};

// Writes `source` to dir/name and runs it with `args`.
inline PythonResult run_python_script(const std::filesystem::path& dir, const std::string& name, const char* source,
                                      const std::string& args) {
  const std::filesystem::path script = dir / name;
  std::ofstream(script) << source;
  const std::string command = "/usr/bin/python3 " + script.string() + " " + args + " 2>&1";
  PythonResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

// Empty when /usr/bin/python3 imports `modules` (e.g. "numpy, safetensors.numpy"), else why not (a GTEST_SKIP reason).
inline std::string python_modules_missing(const std::string& modules) {
  if (!std::filesystem::exists("/usr/bin/python3")) return "/usr/bin/python3 does not exist";
  const int raw = std::system(("/usr/bin/python3 -c 'import " + modules + "' >/dev/null 2>&1").c_str());
  if (!WIFEXITED(raw) || WEXITSTATUS(raw) != 0) return modules + " cannot be imported by /usr/bin/python3";
  return "";
}

}  // namespace zeroplan::test
