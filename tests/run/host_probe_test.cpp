// run/host_probe: bench/deepspeed/host_probe.py run as a child of the interpreter $ZEROPLAN_PYTHON names. Stand-in
// interpreters (shell scripts written here) print what the probe prints, or fail as a machine without torch, a
// hung import or a wrong tool would; each case must give the figures or one line that says why there are none.
#include "run/host_probe.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <variant>

namespace zeroplan {
namespace {

class HostProbeTest : public ::testing::Test {
 protected:
  std::filesystem::path dir_;

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("zeroplan_host_probe_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    ::unsetenv("ZEROPLAN_PYTHON");
    ::unsetenv("ZEROPLAN_DATA_DIR");
    std::filesystem::remove_all(dir_);
  }
  // An executable stand-in for the interpreter: `body` is its shell script (the probe's path is its $1).
  void use_interpreter(const std::string& body) {
    const std::filesystem::path path = dir_ / "python";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    ::setenv("ZEROPLAN_PYTHON", path.c_str(), 1);
  }
  static std::string why(const std::variant<HostProbe, std::string>& result) {
    return std::holds_alternative<std::string>(result) ? std::get<std::string>(result) : std::string();
  }
};

TEST_F(HostProbeTest, ReadsTheProbesFiguresAndSaysWhatRan) {
  // The script it is handed is the repository's probe (the stand-in checks, as python3 would need it).
  use_interpreter("case \"$1\" in */bench/deepspeed/host_probe.py) ;; *) echo \"wrong script $1\"; exit 3;; esac\n"
                  "echo 'warming up'\n"
                  "echo '{\"eager_op_seconds\": 8.25e-06, \"python_call_seconds\": 9.1e-08}'");
  const auto result = run_host_probe();
  ASSERT_TRUE(std::holds_alternative<HostProbe>(result)) << why(result);
  const HostProbe& probe = std::get<HostProbe>(result);
  EXPECT_DOUBLE_EQ(probe.eager_op_seconds, 8.25e-6);
  EXPECT_DOUBLE_EQ(probe.python_call_seconds, 9.1e-8);
  EXPECT_NE(probe.command.find("bench/deepspeed/host_probe.py"), std::string::npos) << probe.command;
}

TEST_F(HostProbeTest, EachFailureIsOneLineSayingWhy) {
  // No torch on this interpreter: Python's own last line.
  use_interpreter("echo 'Traceback (most recent call last):'; echo \"ModuleNotFoundError: No module named 'torch'\"; "
                  "exit 1");
  std::string reason = why(run_host_probe());
  EXPECT_NE(reason.find("exited with status 1: ModuleNotFoundError: No module named 'torch'"), std::string::npos)
      << reason;
  // A machine without a GPU: the probe's own message.
  use_interpreter("echo 'host_probe.py: no CUDA device: the probe times CUDA launches'; exit 1");
  reason = why(run_host_probe());
  EXPECT_NE(reason.find("no CUDA device"), std::string::npos) << reason;
  // Output that is not the probe's, and a figure in the wrong unit.
  use_interpreter("echo 'Python 3.11.2'");
  reason = why(run_host_probe());
  EXPECT_NE(reason.find("printed no probe figures (last line: 'Python 3.11.2')"), std::string::npos) << reason;
  use_interpreter("echo '{\"eager_op_seconds\": 8.25, \"python_call_seconds\": 9.1e-08}'");
  reason = why(run_host_probe());
  EXPECT_NE(reason.find("outside 1e-7..1e-3 s"), std::string::npos) << reason;
  // A probe that hangs is ended at the limit.
  use_interpreter("sleep 30");
  reason = why(run_host_probe(1.0));
  EXPECT_NE(reason.find("ran longer than 1 s"), std::string::npos) << reason;
  // No such interpreter.
  ::setenv("ZEROPLAN_PYTHON", (dir_ / "no-such-python").c_str(), 1);
  reason = why(run_host_probe());
  EXPECT_NE(reason.find("not found (set ZEROPLAN_PYTHON"), std::string::npos) << reason;
  // No probe script where the data is.
  use_interpreter("echo '{\"eager_op_seconds\": 8.25e-06, \"python_call_seconds\": 9.1e-08}'");
  ::setenv("ZEROPLAN_DATA_DIR", dir_.c_str(), 1);
  reason = why(run_host_probe());
  EXPECT_NE(reason.find("no probe script at"), std::string::npos) << reason;
}

}  // namespace
}  // namespace zeroplan
