// `zeroplan run` with the optimizer offloaded to the CPU (ZeRO-Offload, exec/zero/zero_engine.h) or swapped to NVMe
// (ZeRO-Infinity's offload_optimizer nvme), and at stage 3 the parameters too (offload_param cpu), on the CPU
// backend's MPI ranks: the run gives the
// losses of the same run without offload bit for bit (the CPU AdamW is the CPU backend's AdamW), its checkpoints
// are those of the run without offload byte for byte and resume bit for bit, and what the executor does not
// offload is refused in one line naming the flag or field.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"

using namespace zeroplan_test;
namespace fs = std::filesystem;

namespace {

const std::string& kTiny = kTinyGpt2;

std::string run_args(int ranks, int stage, bool offload) {
  return "run --model " + kTiny + " --backend cpu --gpus " + std::to_string(ranks) + " --stage " +
         std::to_string(stage) + " --micro-batch 2 --seq 32 --grad-accum 2 --precision fp32 --warmup-steps 0 --lr 3e-3" +
         (offload ? " --offload-optimizer cpu" : "");
}

// Both ranks' step-6 checkpoint files: the uninterrupted offloaded run's equal the resumed run's and the run
// without (that) offload's, byte for byte.
void expect_step6_rank_files_equal(const fs::path& whole, const fs::path& parts, const fs::path& plain,
                                   const std::string& against) {
  for (int r = 0; r < 2; ++r) {
    const std::string name = rank_file(r);
    const std::string offloaded = bytes_of(whole / "step-00000006" / name);
    EXPECT_FALSE(offloaded.empty()) << name;
    EXPECT_EQ(offloaded, bytes_of(parts / "step-00000006" / name)) << name << ": resumed";
    EXPECT_EQ(offloaded, bytes_of(plain / "step-00000006" / name)) << name << ": " << against;
  }
}

nlohmann::json measured(const fs::path& report) {
  return nlohmann::json::parse(read_file(report)).at("measured");
}

}  // namespace

TEST(OffloadRun, Stage3OnTwoRanksEqualsTheRunWithoutOffload) {
  const fs::path with = temp_dir() / "offload.json", without = temp_dir() / "no-offload.json";
  CommandResult a = run(run_args(2, 3, true) + " --steps 5 --report " + with.string());
  ASSERT_EQ(a.status, 0) << a.output << a.errors;
  EXPECT_NE(a.output.find("stage 3 + opt:cpu"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("CPU AdamW"), std::string::npos) << a.output;
  CommandResult b = run(run_args(2, 3, false) + " --steps 5 --report " + without.string());
  ASSERT_EQ(b.status, 0) << b.output << b.errors;
  const nlohmann::json ma = measured(with), mb = measured(without);
  EXPECT_EQ(ma.at("loss").get<std::vector<double>>(), mb.at("loss").get<std::vector<double>>());
  // The offloaded states are in host memory: fp32 master, two moments and the fp32 gradient partition.
  const nlohmann::json& host = ma.at("host_bytes");
  EXPECT_GT(host.at("offload_master_params").get<std::int64_t>(), 0);
  EXPECT_EQ(host.at("offload_optimizer_states").get<std::int64_t>(),
            2 * host.at("offload_master_params").get<std::int64_t>());
  EXPECT_EQ(ma.at("gpu_bytes").value("optimizer_states", std::int64_t{0}), 0);
  EXPECT_GT(mb.at("gpu_bytes").at("optimizer_states").get<std::int64_t>(), 0);
  EXPECT_TRUE(ma.at("offload_seconds").contains("cpu_adamw"));
  fs::remove(with);
  fs::remove(without);
}

TEST(OffloadRun, CheckpointsEqualTheRunWithoutOffloadAndResumeBitForBit) {
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const fs::path plain = fresh("plain"), whole = fresh("whole"), parts = fresh("parts");
    const fs::path r_whole = temp_dir() / "whole.json", r_parts = temp_dir() / "parts.json";
    CommandResult p = run(run_args(2, stage, false) + " --steps 6 --save-dir " + plain.string());
    ASSERT_EQ(p.status, 0) << p.output << p.errors;
    CommandResult a = run(run_args(2, stage, true) + " --steps 6 --save-dir " + whole.string() + " --report " +
                          r_whole.string());
    ASSERT_EQ(a.status, 0) << a.output << a.errors;
    CommandResult b = run(run_args(2, stage, true) + " --steps 3 --save-dir " + parts.string());
    ASSERT_EQ(b.status, 0) << b.output << b.errors;
    CommandResult c = run(run_args(2, stage, true) + " --steps 6 --resume " + parts.string() + " --save-dir " +
                          parts.string() + " --report " + r_parts.string());
    ASSERT_EQ(c.status, 0) << c.output << c.errors;
    const auto la = measured(r_whole).at("loss").get<std::vector<double>>();
    const auto lc = measured(r_parts).at("loss").get<std::vector<double>>();
    ASSERT_EQ(la.size(), 6u);
    ASSERT_EQ(lc.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(la[3 + i], lc[i]) << "loss of step " << 4 + i;
    expect_step6_rank_files_equal(whole, parts, plain, "against no offload");
    for (const fs::path& d : {plain, whole, parts}) fs::remove_all(d);
    fs::remove(r_whole);
    fs::remove(r_parts);
  }
}

TEST(OffloadRun, ParametersAndOptimizerOnTheCpuEqualTheRunWithoutAndResumeBitForBit) {
  // Stage 3 on two ranks, the optimizer offloaded in both runs: with --offload-param cpu the losses and the
  // checkpoints (byte for byte) are those of the run that keeps the parameter partition on the device, and a
  // run resumed from step 3 continues it bit for bit.
  const std::string param = " --offload-param cpu";
  const fs::path plain = fresh("param-plain"), whole = fresh("param-whole"), parts = fresh("param-parts");
  const fs::path r_plain = temp_dir() / "param-plain.json", r_whole = temp_dir() / "param-whole.json",
                 r_parts = temp_dir() / "param-parts.json";
  CommandResult p = run(run_args(2, 3, true) + " --steps 6 --save-dir " + plain.string() + " --report " +
                        r_plain.string());
  ASSERT_EQ(p.status, 0) << p.output << p.errors;
  CommandResult a = run(run_args(2, 3, true) + param + " --steps 6 --save-dir " + whole.string() + " --report " +
                        r_whole.string());
  ASSERT_EQ(a.status, 0) << a.output << a.errors;
  EXPECT_NE(a.output.find("param:cpu"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("parameter offload"), std::string::npos) << a.output;
  CommandResult b = run(run_args(2, 3, true) + param + " --steps 3 --save-dir " + parts.string());
  ASSERT_EQ(b.status, 0) << b.output << b.errors;
  CommandResult c = run(run_args(2, 3, true) + param + " --steps 6 --resume " + parts.string() + " --save-dir " +
                        parts.string() + " --report " + r_parts.string());
  ASSERT_EQ(c.status, 0) << c.output << c.errors;
  const nlohmann::json mp = measured(r_plain), ma = measured(r_whole);
  EXPECT_EQ(ma.at("loss").get<std::vector<double>>(), mp.at("loss").get<std::vector<double>>());
  const auto la = ma.at("loss").get<std::vector<double>>();
  const auto lc = measured(r_parts).at("loss").get<std::vector<double>>();
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lc.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(la[3 + i], lc[i]) << "loss of step " << 4 + i;
  // No parameter partition on the "device", staging buffers instead; the host master is the fp32 partition.
  EXPECT_EQ(ma.at("gpu_bytes").value("params", std::int64_t{0}), 0);
  EXPECT_GT(mp.at("gpu_bytes").at("params").get<std::int64_t>(), 0);
  EXPECT_GT(ma.at("gpu_bytes").at("offload_buffers").get<std::int64_t>(), 0);
  EXPECT_GT(ma.at("offload_seconds").at("param_to_device").get<double>(), 0.0);
  expect_step6_rank_files_equal(whole, parts, plain, "against no parameter offload");
  for (const fs::path& d : {plain, whole, parts}) fs::remove_all(d);
  for (const fs::path& f : {r_plain, r_whole, r_parts}) fs::remove(f);
}

TEST(OffloadRun, ParametersOnTheCpuWithTheDeviceOptimizerEqualTheRunWithout) {
  const fs::path with = temp_dir() / "param-only.json", without = temp_dir() / "param-none.json";
  CommandResult a = run(run_args(1, 3, false) + " --offload-param cpu --steps 4 --report " + with.string());
  ASSERT_EQ(a.status, 0) << a.output << a.errors;
  CommandResult b = run(run_args(1, 3, false) + " --steps 4 --report " + without.string());
  ASSERT_EQ(b.status, 0) << b.output << b.errors;
  const nlohmann::json ma = measured(with), mb = measured(without);
  EXPECT_EQ(ma.at("loss").get<std::vector<double>>(), mb.at("loss").get<std::vector<double>>());
  EXPECT_EQ(ma.at("host_bytes").at("offload_params").get<std::int64_t>(),
            mb.at("gpu_bytes").at("params").get<std::int64_t>());
  EXPECT_GT(ma.at("offload_seconds").at("param_to_host").get<double>(), 0.0);
  fs::remove(with);
  fs::remove(without);
}

TEST(OffloadRun, WhatTheExecutorDoesNotOffloadIsRefusedByFlag) {
  expect_one_line_error(run(run_args(1, 2, false) + " --steps 2 --offload-param cpu"), {"--offload-param", "stage"});
  expect_one_line_error(run(run_args(1, 3, false) + " --steps 2 --offload-param nvme"), {"--nvme-path", "missing"});
  const fs::path no_path = write_temp(
      "run_param_nvme_no_path.json",
      R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})");
  expect_one_line_error(run(run_args(1, 3, false) + " --steps 2 --ds-config " + no_path.string()),
                        {"zero_optimization.offload_param.nvme_path"});
  const fs::path small = write_temp(
      "run_param_small_buffers.json",
      R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "buffer_size": 10}}})");
  expect_one_line_error(run(run_args(1, 3, false) + " --steps 2 --ds-config " + small.string()),
                        {"zero_optimization.offload_param.buffer_size", "largest partition chunk"});
  expect_one_line_error(run(run_args(1, 0, true) + " --steps 2"), {"--offload-optimizer", "stage"});
}

namespace {

// A directory for NVMe offload's swap files on the build directory's disk (/tmp may be a tmpfs without direct
// I/O), or "" when that disk takes no direct I/O either (the tests then skip, saying why).
std::string nvme_dir(const std::string& name) {
  const fs::path dir = fs::path(ZEROPLAN_TEST_SCRATCH_DIR) / ("nvme_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string probe = (dir / "probe").string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0600);
  if (fd < 0) return "";
  void* block = nullptr;
  bool ok = ::posix_memalign(&block, 4096, 4096) == 0;
  if (ok) ok = ::write(fd, block, 4096) == 4096;
  std::free(block);
  ::close(fd);
  fs::remove(probe);
  return ok ? dir.string() : "";
}

std::string with_nvme(const std::string& dir) { return " --offload-optimizer nvme --nvme-path " + dir; }

}  // namespace

TEST(NvmeOffloadRun, OneRankEqualsCpuOffloadAndReportsTheSwapFiles) {
  // Stage 3 (DeepSpeed's ZeRO-Infinity; stages 1-2 swap nothing there and are refused, below).
  const std::string dir = nvme_dir("one_rank");
  if (dir.empty()) GTEST_SKIP() << "no direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  const fs::path cpu = temp_dir() / "nvme-cpu.json", nvme = temp_dir() / "nvme-nvme.json";
  CommandResult a = run(run_args(1, 3, true) + " --steps 4 --report " + cpu.string());
  ASSERT_EQ(a.status, 0) << a.output << a.errors;
  CommandResult b = run(run_args(1, 3, false) + with_nvme(dir) + " --steps 4 --report " + nvme.string());
  ASSERT_EQ(b.status, 0) << b.output << b.errors;
  EXPECT_NE(b.output.find("stage 3 + opt:nvme"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("NVMe (swap files under nvme_path)"), std::string::npos) << b.output;
  const nlohmann::json ma = measured(cpu), mb = measured(nvme);
  EXPECT_EQ(mb.at("loss").get<std::vector<double>>(), ma.at("loss").get<std::vector<double>>());
  // The states in files, swapped in and out whole every step; the host keeps swap buffers instead of them.
  const std::int64_t files = mb.at("nvme_bytes").get<std::int64_t>();
  EXPECT_GE(files, ma.at("host_bytes").at("offload_master_params").get<std::int64_t>() +
                       ma.at("host_bytes").at("offload_optimizer_states").get<std::int64_t>());
  EXPECT_EQ(mb.at("offload_seconds").at("nvme_read_bytes").get<double>(), static_cast<double>(files));
  EXPECT_EQ(mb.at("offload_seconds").at("nvme_write_bytes").get<double>(), static_cast<double>(files));
  EXPECT_FALSE(mb.at("host_bytes").contains("offload_master_params"));
  EXPECT_GT(mb.at("host_bytes").at("offload_swap_buffers").get<std::int64_t>(), 0);
  // The store removes its files and the rank's directory at the end of the run.
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
  fs::remove_all(dir);
  fs::remove(cpu);
  fs::remove(nvme);
}

TEST(NvmeOffloadRun, TwoRanksCheckpointsEqualCpuOffloadAndResumeBitForBit) {
  const std::string dir = nvme_dir("two_ranks");
  if (dir.empty()) GTEST_SKIP() << "no direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  const fs::path plain = fresh("nvme-cpu"), whole = fresh("nvme-whole"), parts = fresh("nvme-parts");
  const fs::path r_plain = temp_dir() / "nvme-cpu.json", r_whole = temp_dir() / "nvme-whole.json",
                 r_parts = temp_dir() / "nvme-parts.json";
  CommandResult p = run(run_args(2, 3, true) + " --steps 6 --save-dir " + plain.string() + " --report " +
                        r_plain.string());
  ASSERT_EQ(p.status, 0) << p.output << p.errors;
  CommandResult a = run(run_args(2, 3, false) + with_nvme(dir) + " --steps 6 --save-dir " + whole.string() +
                        " --report " + r_whole.string());
  ASSERT_EQ(a.status, 0) << a.output << a.errors;
  CommandResult b = run(run_args(2, 3, false) + with_nvme(dir) + " --steps 3 --save-dir " + parts.string());
  ASSERT_EQ(b.status, 0) << b.output << b.errors;
  CommandResult c = run(run_args(2, 3, false) + with_nvme(dir) + " --steps 6 --resume " + parts.string() +
                        " --save-dir " + parts.string() + " --report " + r_parts.string());
  ASSERT_EQ(c.status, 0) << c.output << c.errors;
  const auto la = measured(r_whole).at("loss").get<std::vector<double>>();
  const auto lc = measured(r_parts).at("loss").get<std::vector<double>>();
  EXPECT_EQ(la, measured(r_plain).at("loss").get<std::vector<double>>());
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lc.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(la[3 + i], lc[i]) << "loss of step " << 4 + i;
  expect_step6_rank_files_equal(whole, parts, plain, "against cpu offload");
  for (const fs::path& d : {plain, whole, parts}) fs::remove_all(d);
  for (const fs::path& f : {r_plain, r_whole, r_parts}) fs::remove(f);
  fs::remove_all(dir);
}

TEST(NvmeOffloadRun, AMissingOrUnusablePathIsRefusedNamingTheFlagOrField) {
  const std::string args = run_args(1, 3, false) + " --steps 2";
  expect_one_line_error(run(args + " --offload-optimizer nvme"), {"--nvme-path", "missing"});
  const fs::path missing = temp_dir() / "no_such_nvme_dir";
  expect_one_line_error(run(args + with_nvme(missing.string())), {"--nvme-path", "does not exist"});
  const fs::path file = write_temp("nvme_path_is_a_file", "x");
  expect_one_line_error(run(args + with_nvme(file.string())), {"--nvme-path", "not a directory"});
  if (geteuid() != 0) {  // root writes to read-only directories
    const fs::path read_only = fresh("nvme_read_only");
    fs::create_directories(read_only);
    fs::permissions(read_only, fs::perms::owner_read | fs::perms::owner_exec);
    expect_one_line_error(run(args + with_nvme(read_only.string())), {"--nvme-path", "not writable"});
    fs::permissions(read_only, fs::perms::owner_all);
  }
  const fs::path ds = write_temp(
      "run_optimizer_nvme_missing_dir.json",
      R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
          missing.string() + R"("}}})");
  expect_one_line_error(run(run_args(1, 3, false) + " --steps 2 --ds-config " + ds.string()),
                        {"zero_optimization.offload_optimizer.nvme_path", "does not exist"});
  expect_one_line_error(run(run_args(1, 3, true) + " --steps 2 --nvme-path " + temp_dir().string()),
                        {"--nvme-path", "--offload-optimizer nvme"});
  // DeepSpeed's ZeRO-Infinity is stage 3: below it the optimizer offloads to cpu (core/plan_inputs.cpp).
  expect_one_line_error(run(run_args(1, 2, false) + " --steps 2" + with_nvme(temp_dir().string())),
                        {"--offload-optimizer", "stage 3"});
  expect_one_line_error(run(run_args(1, 0, false) + " --steps 2" + with_nvme(temp_dir().string())),
                        {"--offload-optimizer", "stage"});
}

namespace {

// The tiny model's tensors are all below DeepSpeed's default stage3_param_persistence_threshold (1e5): whole on
// every rank, nothing partitioned to put on NVMe. A lower threshold partitions them.
std::string with_param_nvme(const std::string& dir) {
  // max_in_cpu 0: every chunk on NVMe (DeepSpeed's default max_in_cpu would keep this small model in host memory).
  const fs::path config = write_temp(
      "run_param_nvme_" + std::to_string(std::hash<std::string>{}(dir)) + ".json",
      R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 100,
          "offload_param": {"device": "nvme", "nvme_path": ")" + dir + R"(", "max_in_cpu": 0}}})");
  return " --offload-param nvme --nvme-path " + dir + " --ds-config " + config.string();
}

}  // namespace

// ZeRO-Infinity's parameter offload to NVMe (offload_param nvme, exec/offload/param_swapper.h) against the
// parameters in host memory (offload_param cpu), deterministic, on 1 and 2 ranks: losses bit for bit; the NVMe
// bytes per step the run reports equal the planner's; a run saved at step 3 and resumed to 6 ends as the
// uninterrupted one; the swap files are gone at the end.
void expect_param_nvme_run_equals_param_cpu(int ranks, const std::string& optimizer) {
  // One directory per test: ctest -j runs the 2-rank tests side by side, and nvme_dir empties its directory.
  const std::string dir =
      nvme_dir("param_run_" + std::to_string(ranks) + "_" + (optimizer.empty() ? "device" : optimizer));
  if (dir.empty()) GTEST_SKIP() << "no direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  const std::string args = run_args(ranks, 3, false) + " --deterministic" +
                           (optimizer.empty() ? "" : " --offload-optimizer " + optimizer);
  const std::string opt_path = optimizer == "nvme" ? " --nvme-path " + dir : "";
  const fs::path cpu = temp_dir() / "param-cpu.json", nvme = temp_dir() / "param-nvme.json",
                 resumed = temp_dir() / "param-nvme-resumed.json";
  const fs::path parts = fresh("param-nvme-parts");
  const fs::path cpu_config = write_temp(
      "run_param_cpu_persistence.json",
      R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 100}})");
  CommandResult a = run(args + " --offload-param cpu" + opt_path + " --ds-config " + cpu_config.string() +
                        " --steps 6 --report " + cpu.string());
  ASSERT_EQ(a.status, 0) << a.output << a.errors;
  CommandResult b = run(args + with_param_nvme(dir) + " --steps 6 --report " + nvme.string());
  ASSERT_EQ(b.status, 0) << b.output << b.errors;
  EXPECT_NE(b.output.find("param:nvme"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("parameter NVMe swapping"), std::string::npos) << b.output;
  const nlohmann::json ma = measured(cpu), mb = measured(nvme);
  const auto losses = mb.at("loss").get<std::vector<double>>();
  EXPECT_EQ(losses, ma.at("loss").get<std::vector<double>>());
  const nlohmann::json& os = mb.at("offload_seconds");
  EXPECT_GT(os.at("param_nvme_read_bytes").get<double>(), 0);
  EXPECT_EQ(os.at("param_nvme_read_bytes").get<double>(), os.at("param_nvme_read_bytes_predicted").get<double>());
  EXPECT_EQ(os.at("param_nvme_write_bytes").get<double>(), os.at("param_nvme_write_bytes_predicted").get<double>());
  EXPECT_GT(mb.at("nvme_bytes").get<std::int64_t>(), 0);
  CommandResult c = run(args + with_param_nvme(dir) + " --steps 3 --save-dir " + parts.string());
  ASSERT_EQ(c.status, 0) << c.output << c.errors;
  CommandResult d = run(args + with_param_nvme(dir) + " --steps 6 --resume " + parts.string() + " --report " +
                        resumed.string());
  ASSERT_EQ(d.status, 0) << d.output << d.errors;
  const auto tail = measured(resumed).at("loss").get<std::vector<double>>();
  ASSERT_EQ(tail.size(), 3u);
  ASSERT_EQ(losses.size(), 6u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(losses[3 + i], tail[i]) << "loss of step " << 4 + i << " after resume";
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
  fs::remove_all(dir);
  fs::remove_all(parts);
  for (const fs::path& f : {cpu, nvme, resumed}) fs::remove(f);
}

TEST(ParamNvmeRun, OneRankEqualsParamCpuAndResumes) { expect_param_nvme_run_equals_param_cpu(1, ""); }
TEST(ParamNvmeRun, TwoRanksWithCpuAdamwEqualParamCpuAndResume) { expect_param_nvme_run_equals_param_cpu(2, "cpu"); }
TEST(ParamNvmeRun, TwoRanksWithOptimizerOnNvmeEqualParamCpuAndResume) {
  expect_param_nvme_run_equals_param_cpu(2, "nvme");
}

TEST(ParamNvmeRun, AnUnwritableOrMissingPathIsOneLineNamingIt) {
  const std::string args = run_args(1, 3, false) + " --steps 2";
  // Root writes to read-only directories: /sys refuses it a new directory (EPERM).
  std::string path = "/sys";
  if (geteuid() != 0) {
    const fs::path read_only = fresh("param_nvme_read_only");
    fs::create_directories(read_only);
    fs::permissions(read_only, fs::perms::owner_read | fs::perms::owner_exec);
    path = read_only.string();
  }
  expect_one_line_error(run(args + with_param_nvme(path)), {"--nvme-path", "'" + path + "'", "not writable"});
  if (geteuid() != 0) fs::permissions(path, fs::perms::owner_all);
  const fs::path missing = temp_dir() / "no_such_param_nvme_dir";
  expect_one_line_error(run(args + with_param_nvme(missing.string())), {"--nvme-path", "does not exist"});
  expect_one_line_error(run(run_args(1, 2, false) + " --steps 2" + with_param_nvme(temp_dir().string())),
                        {"--offload-param", "stage"});
}
