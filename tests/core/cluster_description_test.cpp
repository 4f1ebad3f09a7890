// core/cluster_description: the bundled clusters load with the figures their provenance names (the H200 machine's
// measured NCCL table exactly), defaults are recorded, --gpus resizing follows the node rules, bad files fail.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/cluster_description.h"
#include "core/data_paths.h"
#include "core/input_error.h"
#include "core/json_input.h"
#include "tests/core/input_error_expectations.h"

namespace zeroplan {
namespace {

const std::string kData = ZEROPLAN_TEST_DATA_DIR;

TEST(BundledClusters, AllLoad) {
  const auto names = bundled_cluster_names();
  EXPECT_EQ(names, (std::vector<std::string>{"a100x8-multinode", "h100x1", "h100x2", "h100x8", "h200x1", "h200x2",
                                            "h200x2-calibrated", "h200x4", "rtx4090"}));
  for (const auto& name : names) {
    const ClusterDescription cluster = load_cluster(name);
    EXPECT_EQ(cluster.name, name);
    EXPECT_FALSE(cluster.provenance.empty());
    EXPECT_GT(cluster.gpu_memory_bytes, 0);
    EXPECT_FALSE(cluster.gemm_efficiency.empty());
  }
  EXPECT_NO_THROW(load_cluster(kDefaultClusterName));
}

// The bundled h200x4 is what `zeroplan calibrate` measured on the 4-GPU machine on 2026-11-28
// (bench/exec/results/2026-11-28-four-gpu-h200/call1/calibrate.log, the figures below as it printed them) with the
// 2-rank NCCL points of nccl-tests on the same machine kind (device-and-peers.md), which it keeps.
TEST(BundledClusters, H200MachineFiguresFromDeviceAndPeers) {
  const ClusterDescription cluster = load_cluster("h200x4");
  // cudaMemGetInfo's total on the machine (what an allocator can reach), 613.5 MiB under nvidia-smi's 143771 MiB.
  EXPECT_EQ(cluster.gpu_memory_bytes, 150'109'880'320LL);
  EXPECT_LT(cluster.gpu_memory_bytes, 143771LL * kMiB);
  EXPECT_EQ(cluster.total_gpus(), 4);
  EXPECT_DOUBLE_EQ(cluster.peak_flops("bf16"), 989e12);
  EXPECT_NEAR(cluster.measured_gemm_flops_bf16, 781.6e12, 0.05e12);  // bf16 GEMM 8192^3
  EXPECT_DOUBLE_EQ(cluster.hbm_bandwidth, 4.8e12);
  EXPECT_NEAR(cluster.pcie_bandwidth, 55.33e9, 0.005e9);  // pinned device to host (55.41 the other way)
  EXPECT_NEAR(cluster.cpu_optimizer_params_per_second, 4.945e9, 0.0005e9);  // CPU AdamW, 64 threads
  EXPECT_EQ(cluster.host_cores, 64);
  EXPECT_NEAR(static_cast<double>(cluster.host_memory_bytes), 502.4 * static_cast<double>(kGiB), 0.05 * kGiB);
  EXPECT_EQ(cluster.runtime.cublas_workspace_bytes, 32 * kMiB);
  EXPECT_EQ(cluster.runtime.cuda_context_bytes, 554'500'096);
  EXPECT_EQ(cluster.nvme_capacity_bytes, 252'228'886'528);
  EXPECT_NEAR(cluster.nvme_read_bandwidth, 1.79e9, 0.005e9);  // O_DIRECT through io_uring, 1 GiB
  // NCCL busbw (GB/s): ranks, op, at 1 MiB, 64 MiB, 1 GiB.
  struct Row {
    int ranks;
    CollectiveKind kind;
    double busbw[3];
  };
  const Row table[] = {{4, CollectiveKind::all_reduce, {17.89, 315.13, 355.18}},
                       {4, CollectiveKind::reduce_scatter, {7.88, 270.50, 326.69}},
                       {4, CollectiveKind::all_gather, {8.43, 273.14, 335.08}},
                       {2, CollectiveKind::all_reduce, {74, 270, 332}},
                       {2, CollectiveKind::reduce_scatter, {48, 206, 269}},
                       {2, CollectiveKind::all_gather, {47, 221, 278}}};
  const Bytes sizes[] = {kMiB, 64 * kMiB, kGiB};
  // The 4-rank sweep: 11 sizes from 1 MiB to 1 GiB per collective; the 2-rank table: 3.
  ASSERT_EQ(cluster.intra_node.measured.size(), 3u * 11u + 3u * 3u);
  for (const Row& row : table) {
    for (int i = 0; i < 3; ++i) {
      int found = 0;
      for (const auto& point : cluster.intra_node.measured) {
        if (point.ranks == row.ranks && point.kind == row.kind && point.message_bytes == sizes[i]) {
          EXPECT_NEAR(point.bus_bandwidth, row.busbw[i] * 1e9, 0.005e9);
          ++found;
        }
      }
      EXPECT_EQ(found, 1) << to_string(row.kind) << " " << row.ranks << " GPUs, " << sizes[i] << " bytes";
    }
  }
}

TEST(BundledClusters, DefaultGemmCurveFollowsTheMeasuredH200) {
  // h100x8 gives no points: its default curve must reproduce what the H200 (same GH100 die, same 989 TFLOP/s
  // peak) measured at training shapes, within 0.05 of each measured efficiency, rising with the GEMM's size.
  const ClusterDescription h100 = load_cluster("h100x8");
  const ClusterDescription h200 = load_cluster("h200x4");
  const auto& curve = h100.gemm_efficiency;
  for (std::size_t i = 1; i < curve.size(); ++i) {
    EXPECT_GT(curve[i].flops, curve[i - 1].flops);
    EXPECT_GT(curve[i].efficiency, curve[i - 1].efficiency);
  }
  const auto at = [&](double flops) {  // log-linear between the curve's points, as the simulator reads it
    for (std::size_t i = 1; i < curve.size(); ++i) {
      if (flops <= curve[i].flops) {
        const double w = std::log(flops / curve[i - 1].flops) / std::log(curve[i].flops / curve[i - 1].flops);
        return curve[i - 1].efficiency + w * (curve[i].efficiency - curve[i - 1].efficiency);
      }
    }
    return curve.back().efficiency;
  };
  ASSERT_GE(h200.gemm_efficiency.size(), 8u);
  for (const GemmEfficiencyPoint& measured : h200.gemm_efficiency)
    EXPECT_NEAR(at(measured.flops), measured.efficiency, 0.05) << measured.flops << " FLOPs";
  EXPECT_NE(h100.provenance.find("gemm_efficiency: default curve"), std::string::npos);
  // Fused attention without a measured rate runs at the H200's measured fraction of peak, not at the GEMM curve.
  EXPECT_NEAR(h100.attention_forward_flops, h200.attention_forward_flops, 1e12);
  EXPECT_NEAR(h100.attention_backward_flops, h200.attention_backward_flops, 1e12);
}

TEST(BundledClusters, H200CarriesMeasuredComputeRates) {
  // Measured at GPT-2 training shapes (bench/sim/measure_compute_rates.py): thin GEMMs stay below the 8192^3
  // rate, and the non-GEMM rates are below the datasheet figures they are measured against.
  const ClusterDescription cluster = load_cluster("h200x4");
  ASSERT_GE(cluster.gemm_efficiency.size(), 4u);
  for (const auto& point : cluster.gemm_efficiency) EXPECT_LT(point.efficiency, 796.0 / 989.0);
  EXPECT_EQ(cluster.provenance.find("gemm_efficiency: default curve"), std::string::npos);
  EXPECT_GT(cluster.streaming_bandwidth, 4.0e12);
  EXPECT_LT(cluster.streaming_bandwidth, cluster.hbm_bandwidth);
  EXPECT_LT(cluster.reduction_bandwidth, cluster.streaming_bandwidth);
  EXPECT_GT(cluster.attention_forward_flops, cluster.attention_backward_flops);
  EXPECT_LT(cluster.attention_forward_flops, cluster.measured_gemm_flops_bf16);
  EXPECT_GT(cluster.kernel_overhead_seconds, 0.0);
}

// One H200 runs two GEMM libraries' worth of plans: DeepSpeed's (PyTorch's GEMMs, measured through torch) and
// zeroplan's executor's (its cuBLASLt GEMMs, measured by zeroplan calibrate), which reach more of the peak at
// GPT-2 1.5B's thin training shapes (docs/planner-vs-deepspeed.md); both curves load and survive a round trip.
TEST(BundledClusters, OneH200CarriesPyTorchsAndTheExecutorsGemmCurves) {
  const ClusterDescription cluster = load_cluster("h200x1");
  ASSERT_FALSE(cluster.gemm_efficiency.empty());
  ASSERT_FALSE(cluster.executor_gemm_efficiency.empty());
  const auto at = [](const std::vector<GemmEfficiencyPoint>& curve, double flops) {
    for (const GemmEfficiencyPoint& point : curve)
      if (point.flops >= flops) return point.efficiency;
    return curve.back().efficiency;
  };
  // GPT-2 1.5B's qkv projection at 8192 tokens: 2 * 8192 * 1600 * 4800 FLOPs.
  const double qkv = 2.0 * 8192 * 1600 * 4800;
  EXPECT_GT(at(cluster.executor_gemm_efficiency, qkv), at(cluster.gemm_efficiency, qkv));
  const ClusterDescription again = cluster_from_json(cluster_to_json(cluster), "roundtrip.json");
  EXPECT_EQ(again.executor_gemm_efficiency.size(), cluster.executor_gemm_efficiency.size());
  EXPECT_EQ(again.gemm_efficiency.size(), cluster.gemm_efficiency.size());
  // A description that measured only one curve writes only that one.
  EXPECT_FALSE(cluster_to_json(load_cluster("h200x2"))["gpu"].contains("executor_gemm_efficiency"));
}

TEST(ClusterJson, AnExecutorGemmPointAbovePeakNamesItsField) {
  nlohmann::json document = cluster_to_json(load_cluster("h200x1"));
  document["gpu"]["executor_gemm_efficiency"][1]["efficiency"] = 1.5;
  try {
    (void)cluster_from_json(document, "mine.json");
    FAIL() << "an efficiency above 1 was accepted";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("mine.json"), std::string::npos) << message;
    EXPECT_NE(message.find("executor_gemm_efficiency[1]"), std::string::npos) << message;
  }
}

TEST(BundledClusters, MultiNodeA100HasANetwork) {
  const ClusterDescription cluster = load_cluster("a100x8-multinode");
  EXPECT_EQ(cluster.gpus_per_node, 8);
  EXPECT_EQ(cluster.nodes, 4);
  EXPECT_EQ(cluster.total_gpus(), 32);
  EXPECT_GT(cluster.inter_node.bus_bandwidth, 0.0);
  EXPECT_LT(cluster.inter_node.bus_bandwidth, cluster.intra_node.bus_bandwidth);
}

TEST(ClusterJson, RoundTrip) {
  const ClusterDescription cluster = load_cluster("h100x8");
  const ClusterDescription again = cluster_from_json(cluster_to_json(cluster), "roundtrip.json");
  EXPECT_EQ(again.gpu_memory_bytes, cluster.gpu_memory_bytes);
  EXPECT_EQ(again.nvme_capacity_bytes, cluster.nvme_capacity_bytes);
  EXPECT_DOUBLE_EQ(again.inter_node.bus_bandwidth, cluster.inter_node.bus_bandwidth);
  EXPECT_EQ(again.runtime.nccl_buffer_bytes, cluster.runtime.nccl_buffer_bytes);
  EXPECT_EQ(again.gemm_efficiency.size(), cluster.gemm_efficiency.size());
}

TEST(ClusterJson, CollectiveRateBesideComputeRoundTripsAndIsChecked) {
  // Measured on h200x2 (its provenance); a link without it runs at the isolated rate.
  const ClusterDescription h200x2 = load_cluster("h200x2");
  EXPECT_DOUBLE_EQ(h200x2.intra_node.bandwidth_fraction_beside_compute, 0.76);
  EXPECT_DOUBLE_EQ(cluster_from_json(cluster_to_json(h200x2), "roundtrip.json").intra_node.bandwidth_fraction_beside_compute,
                   0.76);
  EXPECT_DOUBLE_EQ(load_cluster("h100x8").intra_node.bandwidth_fraction_beside_compute, 1.0);
  for (double bad : {0.0, 1.5, -0.2}) {
    nlohmann::json document = read_json_file(bundled_clusters_directory() / "h200x2.json", true);
    document["intra_node"]["bandwidth_fraction_beside_compute"] = bad;
    expect_input_error([&] { cluster_from_json(document, "bad_fraction.json"); },
                       {"bad_fraction.json", "intra_node.bandwidth_fraction_beside_compute"});
  }
}

TEST(ClusterJson, GroupedCallCostRoundTripsAndIsChecked) {
  // Absent: a call inside a group is timed as a call alone.
  nlohmann::json document = read_json_file(bundled_clusters_directory() / "h100x8.json", true);
  document["intra_node"].erase("grouped_call_seconds");
  const ClusterDescription alone = cluster_from_json(document, "alone.json");
  EXPECT_FALSE(alone.intra_node.grouped_call_seconds.has_value());
  EXPECT_DOUBLE_EQ(alone.intra_node.grouped_call(), alone.intra_node.latency_seconds);
  document["intra_node"]["grouped_call_seconds"] = 2.5e-6;
  const ClusterDescription grouped = cluster_from_json(document, "grouped.json");
  EXPECT_DOUBLE_EQ(grouped.intra_node.grouped_call(), 2.5e-6);
  EXPECT_DOUBLE_EQ(cluster_from_json(cluster_to_json(grouped), "roundtrip.json").intra_node.grouped_call(), 2.5e-6);
  for (const nlohmann::json& bad : {nlohmann::json(-1e-6), nlohmann::json("fast")}) {
    document["intra_node"]["grouped_call_seconds"] = bad;
    expect_input_error([&] { cluster_from_json(document, "bad_grouped.json"); },
                       {"bad_grouped.json", "intra_node.grouped_call_seconds"});
  }
}

TEST(ClusterJson, RuntimeDefaultsAreRecordedInProvenance) {
  nlohmann::json document = read_json_file(bundled_clusters_directory() / "h200x4.json", true);
  document.erase("runtime");
  const ClusterDescription cluster = cluster_from_json(document, "no_runtime.json");
  EXPECT_EQ(cluster.runtime.cuda_context_bytes, 512 * kMiB);
  EXPECT_EQ(cluster.runtime.cublas_workspace_bytes, 32 * kMiB);
  EXPECT_NE(cluster.provenance.find("runtime.cuda_context"), std::string::npos);
  EXPECT_NE(cluster.provenance.find("runtime.allocator_fragmentation_of_activations"), std::string::npos);
}

TEST(WithGpuCount, FewerThanANodeIsOnePartialNode) {
  const ClusterDescription cluster = with_gpu_count(load_cluster("h100x8"), 2);
  EXPECT_EQ(cluster.gpus_per_node, 2);
  EXPECT_EQ(cluster.nodes, 1);
}

TEST(WithGpuCount, MoreThanANodeIsWholeNodes) {
  const ClusterDescription cluster = with_gpu_count(load_cluster("h100x8"), 24);
  EXPECT_EQ(cluster.gpus_per_node, 8);
  EXPECT_EQ(cluster.nodes, 3);
}

TEST(WithGpuCount, ZeroGpusIsAnError) {
  expect_input_error([] { with_gpu_count(load_cluster("h200x4"), 0); }, {"--gpus", "at least 1"});
}

TEST(WithGpuCount, PartialNodesBeyondOneNodeAreAnError) {
  expect_input_error([] { with_gpu_count(load_cluster("h100x8"), 12); }, {"--gpus", "12", "multiple", "8"});
}

TEST(WithGpuCount, NoNetworkNoSecondNode) {
  expect_input_error([] { with_gpu_count(load_cluster("h200x4"), 8); }, {"--gpus", "inter-node", "at most 4"});
}

TEST(LoadCluster, UnknownNameListsBundledClusters) {
  expect_input_error([] { load_cluster("tpu-v5"); }, {"--cluster", "tpu-v5", "h200x4", "rtx4090"});
}

TEST(BadCluster, ZeroGpusPerNode) {
  expect_input_error([] { load_cluster(kData + "/cluster_zero_gpus.json"); },
                     {"cluster_zero_gpus.json", "topology.gpus_per_node", "got 0"});
}

TEST(BadCluster, SeveralNodesWithoutANetwork) {
  expect_input_error([] { load_cluster(kData + "/cluster_missing_inter_node.json"); },
                     {"cluster_missing_inter_node.json", "inter_node", "2 nodes"});
}

TEST(BadCluster, UnknownPrecision) {
  expect_input_error([] { load_cluster("h200x4").peak_flops("fp8"); }, {"precision", "fp8", "bf16, fp16, fp32"});
}

TEST(BadCluster, SizeGivenTwice) {
  nlohmann::json document = read_json_file(bundled_clusters_directory() / "rtx4090.json", true);
  document["gpu"]["memory_bytes"] = 25'000'000'000LL;
  expect_input_error([&] { cluster_from_json(document, "twice.json"); },
                     {"twice.json", "gpu.memory_mib", "gpu.memory_bytes", "once"});
}

TEST(BadCluster, MeasuredRateAbovePeak) {
  nlohmann::json document = read_json_file(bundled_clusters_directory() / "h200x4.json", true);
  document["gpu"]["measured_gemm_flops_bf16"] = 1.2e15;
  expect_input_error([&] { cluster_from_json(document, "fast.json"); },
                     {"fast.json", "gpu.measured_gemm_flops_bf16", "peak"});
}

TEST(BadCluster, AbsurdMemoryOverflows) {
  nlohmann::json document = read_json_file(bundled_clusters_directory() / "h200x4.json", true);
  document["gpu"].erase("memory_bytes");
  document["gpu"]["memory_mib"] = 9'000'000'000'000'000LL;
  expect_input_error([&] { cluster_from_json(document, "huge.json"); }, {"huge.json", "gpu.memory_mib", "overflows"});
}

}  // namespace
}  // namespace zeroplan
