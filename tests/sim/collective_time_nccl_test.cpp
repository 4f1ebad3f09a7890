// Collective time against nccl-tests' definitions and against the busbw measured on our 4x H200 machine
// (../shared/reference/device-and-peers.md, "Measured there"). The measured figures are written out here from
// that table, independently of configs/clusters/h200x4.json, so a wrong cluster file fails this test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/cluster_description.h"
#include "core/input_error.h"
#include "core/units.h"
#include "sim/collective_time.h"

namespace zeroplan {
namespace {

ClusterDescription one_link_cluster(int gpus_per_node, int nodes, double intra_busbw, double intra_alpha,
                                    double inter_busbw = 0.0, double inter_alpha = 0.0) {
  ClusterDescription cluster;
  cluster.source = "test cluster";
  cluster.gpus_per_node = gpus_per_node;
  cluster.nodes = nodes;
  cluster.intra_node.bus_bandwidth = intra_busbw;
  cluster.intra_node.latency_seconds = intra_alpha;
  cluster.inter_node.bus_bandwidth = inter_busbw;
  cluster.inter_node.latency_seconds = inter_alpha;
  return cluster;
}

TEST(CollectiveTime, AsymptoticFormulaByHand) {
  // 4 GPUs, 100 GB/s busbw, alpha 10 us: all-reduce of 1e9 bytes = 10 us + 1e9 * 2*3/4 / 1e11 = 0.01501 s.
  const ClusterDescription cluster = one_link_cluster(4, 1, 100e9, 10e-6);
  const CollectiveTimer timer(cluster, 4);
  EXPECT_DOUBLE_EQ(timer.seconds(CollectiveKind::all_reduce, 1'000'000'000), 10e-6 + 1e9 * 1.5 / 100e9);
  EXPECT_DOUBLE_EQ(timer.seconds(CollectiveKind::all_gather, 1'000'000'000), 10e-6 + 1e9 * 0.75 / 100e9);
  EXPECT_DOUBLE_EQ(timer.seconds(CollectiveKind::reduce_scatter, 1'000'000'000), 10e-6 + 1e9 * 0.75 / 100e9);
  EXPECT_DOUBLE_EQ(timer.seconds(CollectiveKind::all_reduce, 0), 0.0);
  EXPECT_DOUBLE_EQ(CollectiveTimer(cluster, 1).seconds(CollectiveKind::all_reduce, 1'000'000), 0.0);
}

TEST(CollectiveTime, BusbwDefinitionsOfNcclTests) {
  // algbw = S/t; busbw = algbw * 2(n-1)/n (all-reduce) or (n-1)/n (all-gather, reduce-scatter).
  EXPECT_DOUBLE_EQ(algorithm_bandwidth(1000, 2.0), 500.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth(CollectiveKind::all_reduce, 8, 1000, 2.0), 500.0 * 14.0 / 8.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth(CollectiveKind::all_gather, 8, 1000, 2.0), 500.0 * 7.0 / 8.0);
}

TEST(CollectiveTime, InfinitelyFastLinksTakeOnlyLatency) {
  const double inf = std::numeric_limits<double>::infinity();
  const CollectiveTimer timer(one_link_cluster(8, 4, inf, 0.0, inf, 0.0), 32);
  EXPECT_DOUBLE_EQ(timer.seconds(CollectiveKind::all_reduce, kGiB), 0.0);
}

TEST(CollectiveTime, HierarchicalAcrossNodes) {
  // 2 nodes x 4 GPUs: all-reduce = intra RS (S, 4) + inter AR (S/4, 2) + intra AG (S, 4). The node's network
  // (25 GB/s busbw in all) is shared by its 4 GPUs: each GPU's S/4 slice moves at 25/4 GB/s.
  const double s = 1e9;
  const ClusterDescription cluster = one_link_cluster(4, 2, 200e9, 5e-6, 25e9, 20e-6);
  const CollectiveTimer timer(cluster, 8);
  EXPECT_TRUE(timer.spans_nodes());
  const double intra_rs = 5e-6 + s * 0.75 / 200e9;
  const double inter_ar = 20e-6 + (s / 4) * 1.0 / (25e9 / 4);
  EXPECT_NEAR(timer.seconds(CollectiveKind::all_reduce, 1'000'000'000), intra_rs + inter_ar + intra_rs, 1e-12);
  const double inter_ag = 20e-6 + (s / 4) * 0.5 / (25e9 / 4);
  EXPECT_NEAR(timer.seconds(CollectiveKind::all_gather, 1'000'000'000), inter_ag + intra_rs, 1e-12);
}

// The whole buffer crosses each node's network once: more GPUs per node behind the same network do not make the
// inter-node stage faster (issue 13: it used to give every GPU the node's whole bandwidth).
TEST(CollectiveTime, GpusOfANodeShareItsNetwork) {
  const double s = 8e9;
  const auto inter_stage = [&](int gpus_per_node) {
    const CollectiveTimer both(one_link_cluster(gpus_per_node, 2, 400e9, 0.0, 50e9, 0.0), 2 * gpus_per_node);
    const CollectiveTimer inside(one_link_cluster(gpus_per_node, 1, 400e9, 0.0), gpus_per_node);
    return both.seconds(CollectiveKind::all_gather, static_cast<Bytes>(s)) -
           inside.seconds(CollectiveKind::all_gather, static_cast<Bytes>(s));
  };
  // All-gather over 2 nodes, factor (m-1)/m = 1/2 of the buffer over a node's 50 GB/s.
  for (int g : {1, 2, 4, 8}) EXPECT_NEAR(inter_stage(g), s * 0.5 / 50e9, 1e-9) << g << " GPUs per node";
}

TEST(CollectiveTime, MeasuredPointsAreReproducedAndInterpolatedInLogSize) {
  ClusterDescription cluster = one_link_cluster(4, 1, 400e9, 8e-6);
  cluster.intra_node.measured = {{CollectiveKind::all_reduce, 4, kMiB, 50e9},
                                 {CollectiveKind::all_reduce, 4, 64 * kMiB, 300e9}};
  const CollectiveTimer timer(cluster, 4);
  EXPECT_NEAR(timer.seconds(CollectiveKind::all_reduce, kMiB), kMiB * 1.5 / 50e9, 1e-12);
  EXPECT_NEAR(timer.seconds(CollectiveKind::all_reduce, 64 * kMiB), 64.0 * kMiB * 1.5 / 300e9, 1e-12);
  // 8 MiB sits halfway in log(size) between 1 and 64 MiB: the bandwidth term's B_eff is the mean of the two.
  const double b1 = kMiB * 1.5 / (kMiB * 1.5 / 50e9 - 8e-6);
  const double b64 = 64.0 * kMiB * 1.5 / (64.0 * kMiB * 1.5 / 300e9 - 8e-6);
  EXPECT_NEAR(timer.seconds(CollectiveKind::all_reduce, 8 * kMiB), 8e-6 + 8.0 * kMiB * 1.5 / ((b1 + b64) / 2), 1e-12);
  // Other collectives have no points: the asymptote.
  EXPECT_DOUBLE_EQ(timer.seconds(CollectiveKind::all_gather, kMiB), 8e-6 + kMiB * 0.75 / 400e9);
}

TEST(CollectiveTime, LinkLatencyAboveAGroupsMeasuredCallsGivesWayToTheMeasurements) {
  // alpha 1 ms, but the group's calls take 30 us (1 MiB) and 0.5 ms (64 MiB): alpha for this group comes from
  // its points, t(1 MiB) - 1 MiB * factor / busbw(64 MiB), and the measured times are still reproduced.
  ClusterDescription cluster = one_link_cluster(4, 1, 400e9, 1e-3);
  cluster.intra_node.measured = {{CollectiveKind::all_reduce, 4, kMiB, kMiB * 1.5 / 30e-6},
                                 {CollectiveKind::all_reduce, 4, 64 * kMiB, 64 * kMiB * 1.5 / 0.5e-3}};
  const CollectiveTimer timer(cluster, 4);
  EXPECT_NEAR(timer.seconds(CollectiveKind::all_reduce, kMiB), 30e-6, 1e-15);
  EXPECT_NEAR(timer.seconds(CollectiveKind::all_reduce, 64 * kMiB), 0.5e-3, 1e-15);
  const double derived_alpha = 30e-6 - 0.5e-3 / 64;
  EXPECT_NEAR(timer.seconds(CollectiveKind::all_reduce, 1), derived_alpha, 1e-9);
}

TEST(CollectiveTime, NegativeLatencyIsBadInput) {
  EXPECT_THROW(CollectiveTimer(one_link_cluster(4, 1, 400e9, -1e-6), 4), InputError);
}

TEST(CollectiveTime, MissingInterNodeBandwidthIsBadInput) {
  EXPECT_THROW(CollectiveTimer(one_link_cluster(4, 2, 100e9, 0.0, 0.0, 0.0), 8), InputError);
}

// What the bundled h200x4 was made from. 4 ranks: `zeroplan calibrate --gpus 4` on nvidia-h200-x4, 2026-11-28, the
// executor's communicator across 4 processes (bench/exec/results/2026-11-28-four-gpu-h200/call1/calibrate.log; at 1
// MiB it reads 8-18 GB/s where nccl-tests in one process read 28-52: a launch and a synchronisation per collective
// are in its time, as they are in a training step's). 2 ranks: nccl-tests in one process on the same machine kind,
// 2026-11-21 (device-and-peers.md, "NCCL in one process, bf16, busbw per nccl-tests (GB/s)").
struct MeasuredBusbw {
  int gpus;
  CollectiveKind kind;
  double busbw_gb_s[3];  // at 1 MiB, 64 MiB, 1 GiB
};
constexpr MeasuredBusbw kH200Measured[] = {
    {4, CollectiveKind::all_reduce, {17.89, 315.13, 355.18}}, {4, CollectiveKind::reduce_scatter, {7.88, 270.50, 326.69}},
    {4, CollectiveKind::all_gather, {8.43, 273.14, 335.08}},  {2, CollectiveKind::all_reduce, {74, 270, 332}},
    {2, CollectiveKind::reduce_scatter, {48, 206, 269}},      {2, CollectiveKind::all_gather, {47, 221, 278}},
};

TEST(CollectiveTime, BundledH200ClusterWithinTenPercentOfMeasuredBusbw) {
  const ClusterDescription bundled = load_cluster("h200x4");
  const Bytes sizes[3] = {kMiB, 64 * kMiB, kGiB};
  for (const MeasuredBusbw& row : kH200Measured) {
    const CollectiveTimer timer(with_gpu_count(bundled, row.gpus), row.gpus);
    for (int i = 0; i < 3; ++i) {
      const double n = row.gpus;
      const double factor = row.kind == CollectiveKind::all_reduce ? 2.0 * (n - 1) / n : (n - 1) / n;
      const double measured_seconds = static_cast<double>(sizes[i]) * factor / (row.busbw_gb_s[i] * 1e9);
      const double predicted = timer.seconds(row.kind, sizes[i]);
      EXPECT_NEAR(predicted / measured_seconds, 1.0, 0.10)
          << to_string(row.kind) << " on " << row.gpus << " GPUs at " << sizes[i] << " bytes: predicted "
          << predicted << " s, measured " << measured_seconds << " s";
    }
  }
}

}  // namespace
}  // namespace zeroplan
