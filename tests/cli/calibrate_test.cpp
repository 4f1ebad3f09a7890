// `zeroplan calibrate` end to end on the CPU backend (two MPI ranks, the quick sweep): the file it writes is a
// cluster description that round-trips through the loader and that plan and simulate read; its figures agree
// with facts of this machine that the calibration does not compute (sysconf's memory and cores, the sizes the
// sweep asked for), and are physically possible. Bad input: exit 2 and one line naming the flag, nothing a user
// made overwritten.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"
#include "core/cluster_description.h"

namespace {

using zeroplan_test::expect_one_line_error;
using zeroplan_test::read_file;
using zeroplan_test::run;
using zeroplan_test::temp_dir;

constexpr std::int64_t kMiB = 1 << 20;

// One calibration shared by the tests that read it (two MPI ranks take a few seconds).
class CalibratedCpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::filesystem::path(temp_dir() / "calibrated_cpu.json");
    std::filesystem::remove(*path_);
    result_ = new zeroplan_test::CommandResult(
        run("calibrate --backend cpu --gpus 2 --quick --name ci-cpu --out " + path_->string()));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete path_;
  }
  static nlohmann::json document() { return nlohmann::json::parse(read_file(*path_)); }
  static std::filesystem::path* path_;
  static zeroplan_test::CommandResult* result_;
};
std::filesystem::path* CalibratedCpu::path_ = nullptr;
zeroplan_test::CommandResult* CalibratedCpu::result_ = nullptr;

TEST_F(CalibratedCpu, WritesTheFileAndPrintsATableWithUnits) {
  ASSERT_EQ(result_->status, 0) << result_->output << result_->errors;
  ASSERT_TRUE(std::filesystem::exists(*path_));
  for (const char* unit : {"GB/s", "TFLOP/s", "Gparam/s", "busbw", "all_reduce", "reduce_scatter", "all_gather"})
    EXPECT_NE(result_->output.find(unit), std::string::npos) << unit << " missing in:\n" << result_->output;
  EXPECT_NE(result_->output.find("not measured (no --nvme-path)"), std::string::npos) << result_->output;
}

TEST_F(CalibratedCpu, HostFiguresAreThisMachines) {
  ASSERT_EQ(result_->status, 0) << result_->errors;
  const nlohmann::json doc = document();
  EXPECT_EQ(doc["name"], "ci-cpu");
  EXPECT_EQ(doc["topology"]["gpus_per_node"], 2);
  EXPECT_EQ(doc["topology"]["nodes"], 1);
  // The host memory a run can use: MemAvailable when calibrate ran (it moves with the machine's load, so it is
  // bounded here: above zero, below the physical size that the provenance names).
  const auto physical = static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  const auto memory = doc["host"]["memory_bytes"].get<std::int64_t>();
  EXPECT_GT(memory, 0);
  EXPECT_LT(memory, physical);
  EXPECT_NE(doc["provenance"].get<std::string>().find(std::to_string(physical) + " bytes physical"), std::string::npos);
  EXPECT_EQ(doc["host"]["cores"].get<long>(), ::sysconf(_SC_NPROCESSORS_ONLN));
  // Each rank's "device" memory is its share of the host's.
  EXPECT_EQ(doc["gpu"]["memory_bytes"].get<std::int64_t>(), memory / 2);

  // CPU AdamW: one thread is no faster than the node; and no CPU updates 1e11 parameters a second (each update
  // moves at least 28 bytes: p, g, m, v read, p, m, v written, as fp32, beyond any host's memory bandwidth).
  const double node = doc["host"]["cpu_optimizer_params_per_second"].get<double>();
  const double thread = doc["host"]["cpu_adam_params_per_second_per_thread"].get<double>();
  EXPECT_GT(thread, 0.0);
  EXPECT_LE(thread, node);
  EXPECT_LT(node * 28.0, 2e12);
  // A call's fixed cost (its threads woken and joined): positive, and below what a 1,024-parameter update at the
  // one-thread rate plus a millisecond of scheduling could take (a 2-core CI machine: about 15 us).
  const double call = doc["host"]["cpu_optimizer_call_seconds"].get<double>();
  EXPECT_GT(call, 0.0);
  EXPECT_LT(call, 1024.0 / thread + 1e-3);
  EXPECT_NE(doc["provenance"].get<std::string>().find("host.cpu_optimizer_call_seconds"), std::string::npos);
  const double copy = doc["gpu"]["streaming_bandwidth"].get<double>();
  EXPECT_GT(copy, 1e8);   // any host copies faster than 100 MB/s
  EXPECT_LT(copy, 5e12);  // and slower than an HBM3e GPU
  EXPECT_EQ(doc["nvme"]["capacity_bytes"], 0) << "no --nvme-path: no disk described";
  EXPECT_NE(doc["provenance"].get<std::string>().find("nvme: not measured"), std::string::npos);
}

TEST_F(CalibratedCpu, CollectivePointsAreTheSweepsSizesWithPossibleBandwidths) {
  ASSERT_EQ(result_->status, 0) << result_->errors;
  const nlohmann::json link = document()["intra_node"];
  ASSERT_TRUE(link.is_object());
  const std::set<std::int64_t> asked = {1 * kMiB, 4 * kMiB, 16 * kMiB};  // --quick's sizes, divisible by 2 x 4 bytes
  std::set<std::string> kinds;
  int points = 0;
  for (const auto& point : link["measured"]) {
    ++points;
    kinds.insert(point["collective"].get<std::string>());
    EXPECT_EQ(point["ranks"], 2);
    EXPECT_EQ(asked.count(point["message_bytes"].get<std::int64_t>()), 1u) << point.dump();
    const double busbw = point["bus_bandwidth"].get<double>();
    EXPECT_TRUE(std::isfinite(busbw) && busbw > 0.0) << point.dump();
    EXPECT_LT(busbw, 1e12) << "two ranks on one host cannot exchange 1 TB/s: " << point.dump();
  }
  EXPECT_EQ(points, 9);
  EXPECT_EQ(kinds, (std::set<std::string>{"all_reduce", "reduce_scatter", "all_gather"}));
  EXPECT_GT(link["bus_bandwidth"].get<double>(), 0.0);
  EXPECT_GE(link["latency_seconds"].get<double>(), 0.0);
}

TEST_F(CalibratedCpu, RoundTripsThroughTheLoader) {
  ASSERT_EQ(result_->status, 0) << result_->errors;
  const zeroplan::ClusterDescription once = zeroplan::cluster_from_json(document(), path_->string());
  const nlohmann::json written = zeroplan::cluster_to_json(once);
  const zeroplan::ClusterDescription twice = zeroplan::cluster_from_json(written, "again");
  nlohmann::json a = written, b = zeroplan::cluster_to_json(twice);
  a.erase("source");
  b.erase("source");
  EXPECT_EQ(a, b);
  EXPECT_EQ(once.total_gpus(), 2);
  EXPECT_EQ(once.intra_node.measured.size(), 9u);
  // The GEMMs calibrate times are the executor's: its curve, standing in for PyTorch's as well.
  EXPECT_FALSE(once.executor_gemm_efficiency.empty());
  EXPECT_EQ(document()["gpu"]["executor_gemm_efficiency"], document()["gpu"]["gemm_efficiency"]);
}

TEST_F(CalibratedCpu, PlanAndSimulateReadIt) {
  ASSERT_EQ(result_->status, 0) << result_->errors;
  const auto plan = run("plan --model gpt2-124m --cluster " + path_->string() + " --format json");
  ASSERT_TRUE(plan.status == 0 || plan.status == 1) << plan.output << plan.errors;
  EXPECT_NE(plan.output.find("ci-cpu"), std::string::npos) << plan.output;
  // CPU offload times the optimizer with the calibrated AdamW rate.
  const auto simulate = run("simulate --model gpt2-124m --cluster " + path_->string() +
                            " --stage 2 --offload-optimizer cpu --micro-batch 1 --seq 128");
  EXPECT_TRUE(simulate.status == 0 || simulate.status == 1) << simulate.output << simulate.errors;
}

// On the CPU backend over a GPU machine's description: the base's DeepSpeed host costs and the host they were
// measured on stay (the probe times CUDA launches, so it does not run here and says so), and the base's attention
// rates, which describe its GPU and exceed a CPU rank's peak, are left out instead of failing the written file.
TEST(CalibrateBase, CpuBackendOverAGpuBase) {
  const auto out = temp_dir() / "calibrated_cpu_over_h200x2.json";
  std::filesystem::remove(out);
  const auto result = run("calibrate --backend cpu --quick --base h200x2 --out " + out.string());
  ASSERT_EQ(result.status, 0) << result.output << result.errors;
  const auto doc = nlohmann::json::parse(read_file(out));
  const zeroplan::ClusterDescription base = zeroplan::load_cluster("h200x2");
  EXPECT_EQ(doc["host"]["eager_op_seconds"].get<double>(), base.eager_op_seconds);
  EXPECT_EQ(doc["host"]["deepspeed_module_hook_seconds"].get<double>(), base.deepspeed_module_hook_seconds);
  EXPECT_EQ(doc["host"]["probed_eager_op_seconds"].get<double>(), 0.0);
  const std::string provenance = doc["provenance"].get<std::string>();
  EXPECT_NE(provenance.find("host.probed_eager_op_seconds: not measured: the CPU backend"), std::string::npos);
  EXPECT_NE(provenance.find("gpu.attention_flops: not measured on the CPU backend"), std::string::npos);
  // Attention is then timed at the rank's own rates (the loader's default, within its peak), not the H200's.
  EXPECT_LE(doc["gpu"]["attention_forward_flops"].get<double>(), doc["gpu"]["peak_flops_bf16"].get<double>());
  EXPECT_LT(doc["gpu"]["attention_forward_flops"].get<double>(), base.attention_forward_flops);
}

TEST(CalibrateInput, RefusesToOverwriteWithoutForce) {
  const auto path = zeroplan_test::write_temp("keep_me.json", "{\"mine\": true}\n");
  expect_one_line_error(run("calibrate --backend cpu --quick --out " + path.string()), {"--out", "--force"});
  EXPECT_EQ(read_file(path), "{\"mine\": true}\n");
}

TEST(CalibrateInput, BadFlagsExitTwoNamingTheFlag) {
  const std::string out = (temp_dir() / "never_written.json").string();
  expect_one_line_error(run("calibrate --backend tpu --out " + out), {"--backend", "cuda or cpu"});
  expect_one_line_error(run("calibrate --backend cpu --gpus 0 --out " + out), {"--gpus"});
  expect_one_line_error(run("calibrate --backend cpu --nvme-path /no/such/dir --out " + out), {"--nvme-path"});
  expect_one_line_error(run("calibrate --backend cpu --base no-such-cluster --out " + out), {"--base"});
  expect_one_line_error(run("calibrate --backend cpu --model no-such-model --out " + out), {"--model"});
  expect_one_line_error(run("calibrate --backend cpu --name '' --out " + out), {"--name"});
  expect_one_line_error(run("calibrate --backend cpu --out /no/such/dir/f.json"), {"--out"});
  expect_one_line_error(run("calibrate --backend cpu --rank-results x --out " + out), {"--rank-results"});
  const auto missing = run("calibrate --backend cpu");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.errors.find("--out"), std::string::npos) << missing.errors;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// The disk through NvmeStore, one rank: a directory on a file system with direct I/O (tmpfs has none: skipped).
TEST(CalibrateDisk, MeasuresTheDiskUnderNvmePath) {
  const auto dir = temp_dir() / "nvme";
  std::filesystem::create_directories(dir);
  const auto out = temp_dir() / "calibrated_disk.json";
  std::filesystem::remove(out);
  const auto result = run("calibrate --backend cpu --quick --nvme-path " + dir.string() + " --out " + out.string());
  if (result.status == 2 && result.errors.find("direct I/O") != std::string::npos)
    GTEST_SKIP() << "no direct I/O under " << dir << ": " << result.errors;
  ASSERT_EQ(result.status, 0) << result.output << result.errors;
  const auto doc = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(doc["topology"]["gpus_per_node"], 1);
  EXPECT_FALSE(doc.contains("intra_node"));
  const double read = doc["nvme"]["read_bandwidth"].get<double>(), write = doc["nvme"]["write_bandwidth"].get<double>();
  EXPECT_GT(read, 0.0);
  EXPECT_GT(write, 0.0);
  EXPECT_LT(read, 1e12);  // no single disk reads 1 TB/s
  EXPECT_LE(doc["nvme"]["capacity_bytes"].get<std::int64_t>(),
            static_cast<std::int64_t>(std::filesystem::space(dir).capacity));
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the test file is removed";
  // --force replaces a description.
  const auto again = run("calibrate --backend cpu --quick --force --out " + out.string());
  EXPECT_EQ(again.status, 0) << again.errors;
  EXPECT_EQ(nlohmann::json::parse(read_file(out))["nvme"]["capacity_bytes"], 0);
}

// The CUDA backend on this machine's first GPU (quick sweep); skipped where there is no GPU or no CUDA executor.
// Checked against facts the calibration does not compute: a device copy cannot beat the datasheet HBM bandwidth
// the file names, pinned copies cannot beat PCIe 5.0 x16 (63 GB/s per direction, PCI-SIG), a GEMM cannot beat
// the peak, and the context is part of the device's memory.
TEST(CalibrateGpu, OneGpuQuick) {
  const auto out = temp_dir() / "calibrated_gpu.json";
  std::filesystem::remove(out);
  const auto result = run("calibrate --backend cuda --gpus 1 --quick --model gpt2-124m --out " + out.string());
  if (result.status == 2 && (result.errors.find("--backend") != std::string::npos))
    GTEST_SKIP() << "no CUDA device or executor: " << result.errors;
  ASSERT_EQ(result.status, 0) << result.output << result.errors;
  const auto doc = nlohmann::json::parse(read_file(out));
  const auto& gpu = doc["gpu"];
  EXPECT_EQ(doc["topology"]["gpus_per_node"], 1);
  EXPECT_LT(gpu["streaming_bandwidth"].get<double>(), gpu["hbm_bandwidth"].get<double>());
  EXPECT_GT(gpu["measured_gemm_flops_bf16"].get<double>(), 0.0);
  EXPECT_LE(gpu["measured_gemm_flops_bf16"].get<double>(), gpu["peak_flops_bf16"].get<double>());
  for (const auto& point : gpu["gemm_efficiency"]) {
    EXPECT_GT(point["efficiency"].get<double>(), 0.0);
    EXPECT_LE(point["efficiency"].get<double>(), 1.0);
  }
  // The trainer's attention at gpt2-124m's shape (1 x 1024, head size 64: offered to cuDNN; our tensor-core kernels
  // where cuDNN refuses it): a real rate, below peak, and the provenance names the kernels timed.
  for (const char* field : {"executor_attention_forward_flops", "executor_attention_backward_flops"}) {
    EXPECT_GT(gpu[field].get<double>(), 1e12) << field;
    EXPECT_LT(gpu[field].get<double>(), gpu["peak_flops_bf16"].get<double>()) << field;
  }
  const std::string attention_provenance = doc["provenance"].get<std::string>();
  EXPECT_TRUE(
      attention_provenance.find("gpu.executor_attention_flops: cuDNN fused attention (engines ") != std::string::npos ||
      attention_provenance.find("gpu.executor_attention_flops: the executor's kernels (exec/cuda/attention.cu) at "
                                "bf16 attention 1x1024, 12 heads of 64 (gpt2-124m), the attention the CUDA trainer "
                                "runs at this shape (cuDNN refused: ") != std::string::npos)
      << attention_provenance;
  EXPECT_GT(doc["host"]["pcie_bandwidth"].get<double>(), 1e9);
  EXPECT_LT(doc["host"]["pcie_bandwidth"].get<double>(), 63e9);
  // DeepSpeed's host speed on this machine: the probe's figure where PyTorch with CUDA runs here, else why not.
  const double probed = doc["host"]["probed_eager_op_seconds"].get<double>();
  if (probed > 0.0) {
    EXPECT_GT(probed, 1e-7);
    EXPECT_LT(probed, 1e-3);
    EXPECT_NE(doc["provenance"].get<std::string>().find("bench/deepspeed/host_probe.py on GPU 0"), std::string::npos);
  } else {
    EXPECT_NE(doc["provenance"].get<std::string>().find("host.probed_eager_op_seconds: not measured: "),
              std::string::npos);
  }
  EXPECT_GT(doc["runtime"]["cuda_context_bytes"].get<std::int64_t>(), 0);
  EXPECT_LT(doc["runtime"]["cuda_context_bytes"].get<std::int64_t>(), gpu["memory_bytes"].get<std::int64_t>());
  const auto plan = run("plan --model gpt2-124m --cluster " + out.string());
  EXPECT_TRUE(plan.status == 0 || plan.status == 1) << plan.output << plan.errors;
}

}  // namespace
