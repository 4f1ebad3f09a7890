// What the end-to-end tests of the zeroplan binary share: run it, capture stdout, stderr and the exit status,
// scratch files, and the one-line error expectation.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

namespace zeroplan_test {

// The tiny GPT-2 description the CPU-backend runs train (tests/cli/data).
inline const std::string kTinyGpt2 = std::string(ZEROPLAN_SOURCE_DIR) + "/tests/cli/data/tiny-gpt2.json";

// A file's whole contents ("" when it cannot be read).
inline std::string bytes_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A rank's checkpoint file name, as run/checkpoint.cpp writes it.
inline std::string rank_file(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.bin", rank);
  return name;
}

struct CommandResult {
  int status = -1;
  std::string output;  // stdout (stderr separately)
  std::string errors;
};

// This test process's scratch directory (one per process: ctest runs every test as a process of its own).
inline std::filesystem::path temp_dir_path() {
  return std::filesystem::temp_directory_path() / ("zeroplan_cli_test_" + std::to_string(::getpid()));
}

inline std::filesystem::path temp_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::create_directories(temp_dir_path());
    return temp_dir_path();
  }();
  return dir;
}

// The scratch directory goes when the process ends with every test passed; after a failure it stays, for the files
// the failure names. The checkpoint tests write up to 2.9 GB there: before, every ctest run left its directories in
// /tmp (2,041 of them, 76 GB on the development machine) until a checkpoint write found the disk full.
class RemoveScratchWhenPassed : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Passed()) return;
    std::error_code ignored;  // nothing to remove, or a file gone already: either way nothing is left to do
    std::filesystem::remove_all(temp_dir_path(), ignored);
  }
};
inline ::testing::Environment* const kRemoveScratchWhenPassed =
    ::testing::AddGlobalTestEnvironment(new RemoveScratchWhenPassed);

// A path under temp_dir() with nothing at it yet.
inline std::filesystem::path fresh(const std::string& name) {
  const std::filesystem::path p = temp_dir() / name;
  std::filesystem::remove_all(p);
  return p;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Any command line through the shell: its stdout, stderr and exit status.
inline CommandResult run_command(const std::string& command_line) {
  const std::filesystem::path err = temp_dir() / "stderr.txt";
  const std::string command = command_line + " 2>" + err.string();
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  result.errors = read_file(err);
  return result;
}

// The zeroplan binary under test with `arguments`.
inline CommandResult run(const std::string& arguments) {
  return run_command(std::string(ZEROPLAN_BINARY) + " " + arguments);
}

inline std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const std::filesystem::path path = temp_dir() / name;
  std::ofstream(path) << text;
  return path;
}

// One line, naming what it must name.
inline void expect_one_line_error(const CommandResult& result, const std::vector<std::string>& mentions) {
  EXPECT_EQ(result.status, 2) << result.output << result.errors;
  ASSERT_FALSE(result.errors.empty());
  EXPECT_EQ(result.errors.find('\n'), result.errors.size() - 1) << "error should be one line: " << result.errors;
  for (const std::string& mention : mentions) {
    EXPECT_NE(result.errors.find(mention), std::string::npos) << "missing '" << mention << "' in: " << result.errors;
  }
}

}  // namespace zeroplan_test
