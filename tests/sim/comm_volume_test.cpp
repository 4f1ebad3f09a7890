// Communication volume per GPU per step: the ZeRO paper's 2P / 3P (arXiv 1910.02054 sec. 7), the ring
// factors of nccl-tests PERFORMANCE.md, gradient accumulation as DeepSpeed does it, and ZeRO-Offload's 4P
// bytes of PCIe traffic per step (arXiv 2101.06840).
#include <gtest/gtest.h>

#include "sim/comm_model.h"
#include "sim/memory_inputs.h"
#include "tests/sim/sim_test_fixtures.h"

namespace zeroplan {
namespace {

using testing::gpt2_xl;
using testing::params_only_model;
using testing::test_cluster;

const CollectiveVolume* find(const CommVolume& v, CollectiveKind kind) {
  for (const CollectiveVolume& c : v.collectives)
    if (c.kind == kind) return &c;
  return nullptr;
}

TEST(RingFactor, MatchesNcclTestsBusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(ring_factor(CollectiveKind::all_reduce, 4), 2.0 * 3 / 4);
  EXPECT_DOUBLE_EQ(ring_factor(CollectiveKind::all_gather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(ring_factor(CollectiveKind::reduce_scatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(ring_factor(CollectiveKind::all_reduce, 1), 0.0);
}

TEST(CommVolume, StagesZeroToTwoMoveTwoPAndStageThreeMovesThreeP) {
  const std::int64_t P = 1'000'000'000;
  const ModelDescription model = params_only_model(P);
  const ClusterDescription cluster = test_cluster(8, 1);
  TrainingConfig training;  // bf16
  training.engine = TrainingEngine::ideal;  // the paper's schedule; DeepSpeed's own in deepspeed_comm_test.cpp
  for (int stage : {0, 1, 2}) {
    const CommVolume v = estimate_comm(model, cluster, training, {stage, OffloadDevice::none, OffloadDevice::none});
    EXPECT_DOUBLE_EQ(v.multiple_of_params, 2.0) << stage;
  }
  const CommVolume v0 = estimate_comm(model, cluster, training, {0, OffloadDevice::none, OffloadDevice::none});
  ASSERT_NE(find(v0, CollectiveKind::all_reduce), nullptr);
  EXPECT_EQ(find(v0, CollectiveKind::all_reduce)->bytes, 2 * P);
  EXPECT_EQ(find(v0, CollectiveKind::all_reduce)->wire_bytes, static_cast<Bytes>(2.0 * P * 2.0 * 7 / 8));
  EXPECT_EQ(find(v0, CollectiveKind::all_reduce)->calls, 2);  // 1e9 / 5e8 elements per bucket

  const CommVolume v3 = estimate_comm(model, cluster, training, {3, OffloadDevice::none, OffloadDevice::none});
  EXPECT_DOUBLE_EQ(v3.multiple_of_params, 3.0);
  EXPECT_EQ(find(v3, CollectiveKind::all_gather)->elements, 2 * P);
  EXPECT_EQ(find(v3, CollectiveKind::reduce_scatter)->elements, P);
  EXPECT_EQ(v3.total_bytes, 3 * 2 * P);
}

TEST(CommVolume, GradientAccumulationFollowsDeepSpeed) {
  const std::int64_t P = 1'000'000'000;
  const ModelDescription model = params_only_model(P);
  const ClusterDescription cluster = test_cluster(8, 1);
  TrainingConfig training;
  training.engine = TrainingEngine::ideal;
  training.grad_accum = 4;
  auto bytes = [&](int stage) {
    return estimate_comm(model, cluster, training, {stage, OffloadDevice::none, OffloadDevice::none}).total_bytes;
  };
  EXPECT_EQ(bytes(0), 2 * P);                  // all-reduce at the boundary only
  EXPECT_EQ(bytes(1), 2 * P + 2 * P);          // reduce-scatter at the boundary + all-gather
  EXPECT_EQ(bytes(2), 4 * 2 * P + 2 * P);      // reduce-scatter every micro-step + all-gather
  EXPECT_EQ(bytes(3), 4 * 3 * 2 * P);          // everything every micro-step
  // The paper's multiple is per optimizer step without accumulation.
  EXPECT_DOUBLE_EQ(estimate_comm(model, cluster, training, {3, OffloadDevice::none, OffloadDevice::none})
                       .multiple_of_params, 3.0);
}

TEST(CommVolume, PersistentParametersAreNotGathered) {
  const ModelDescription model = gpt2_xl();
  TrainingConfig training;
  training.engine = TrainingEngine::ideal;
  const CommVolume v = estimate_comm(model, test_cluster(4, 1), training, {3, OffloadDevice::none, OffloadDevice::none});
  const std::int64_t h = 1600, P = model.params();
  const std::int64_t persistent = 48 * 13 * h + 2 * h;  // LayerNorms and biases under the 1e5 threshold
  EXPECT_EQ(P, 1'557'611'200);
  EXPECT_EQ(find(v, CollectiveKind::all_gather)->elements, 2 * (P - persistent));
  EXPECT_EQ(find(v, CollectiveKind::reduce_scatter)->elements, P);
  EXPECT_LT(v.multiple_of_params, 3.0);
}

TEST(CommVolume, OptimizerOffloadMovesFourBytesPerPartitionParameterOverPcie) {
  const std::int64_t P = 1'000'000'000;
  const ModelDescription model = params_only_model(P);
  const ClusterDescription cluster = test_cluster(4, 1);
  const CommVolume v = estimate_comm(model, cluster, TrainingConfig{}, {2, OffloadDevice::cpu, OffloadDevice::none});
  // 16-bit gradients down + 16-bit parameters up, on the rank's partition P/N.
  EXPECT_EQ(v.pcie_device_to_host_bytes + v.pcie_host_to_device_bytes, 4 * P / 4);
  EXPECT_EQ(v.nvme_read_bytes, 0);
  const CommVolume none = estimate_comm(model, cluster, TrainingConfig{}, {2, OffloadDevice::none, OffloadDevice::none});
  EXPECT_EQ(none.pcie_device_to_host_bytes + none.pcie_host_to_device_bytes, 0);
}

TEST(CommVolume, NvmeOffloadSwapsStatesAndParameterPartitions) {
  const std::int64_t P = 1'000'000'000;
  const ModelDescription model = params_only_model(P);
  const std::int64_t Pp = P / 4;
  // Every sub-group on NVMe (max_in_cpu 0): the partition is read for forward and backward, written once.
  TrainingConfig on_disk;
  on_disk.zero.param_max_in_cpu = 0;
  const CommVolume v = estimate_comm(model, test_cluster(4, 1), on_disk, {3, OffloadDevice::nvme, OffloadDevice::nvme});
  EXPECT_EQ(v.nvme_read_bytes, 12 * Pp + 2 * 2 * Pp);  // states in, partition for forward and backward
  EXPECT_EQ(v.nvme_write_bytes, 12 * Pp + 2 * Pp);     // states out, the updated partition
  EXPECT_EQ(v.pcie_device_to_host_bytes, 2 * Pp);      // gradients
  EXPECT_EQ(v.pcie_host_to_device_bytes, 2 * 2 * Pp);  // the gathered partitions
  // DeepSpeed's default max_in_cpu (1e9 elements) keeps this 2.5e8-element partition in pinned host memory
  // (stage3.py _create_param_groups_fp16_flat_cpu_memory): only the optimizer states touch the disk.
  const CommVolume kept =
      estimate_comm(model, test_cluster(4, 1), TrainingConfig{}, {3, OffloadDevice::nvme, OffloadDevice::nvme});
  EXPECT_EQ(kept.nvme_read_bytes, 12 * Pp);
  EXPECT_EQ(kept.nvme_write_bytes, 12 * Pp);
  EXPECT_EQ(kept.pcie_host_to_device_bytes, 2 * 2 * Pp);  // still copied to the GPU for every gather
}

// stage3.py keeps whole sub-groups (each closed at sub_group_size elements or more) while their sum fits in
// max_in_cpu: hand-worked partitions of 1e9-element sub-groups.
TEST(CommVolume, DeepSpeedKeepsTheSubGroupsWithinMaxInCpu) {
  const std::int64_t G = 1'000'000'000;
  EXPECT_EQ(deepspeed_param_elements_in_cpu(G / 2, G, G), G / 2);     // the partition fits: all of it
  EXPECT_EQ(deepspeed_param_elements_in_cpu(3 * G, G, G), 0);         // the first sub-group is over 1e9 already
  EXPECT_EQ(deepspeed_param_elements_in_cpu(3 * G, 2 * G, G), G);     // two sub-groups are over 2e9
  EXPECT_EQ(deepspeed_param_elements_in_cpu(3 * G, 5 * G / 2, G), 2 * G);
  EXPECT_EQ(deepspeed_param_elements_in_cpu(3 * G, 0, G), 0);         // max_in_cpu 0: all on NVMe
  EXPECT_EQ(deepspeed_param_elements_in_cpu(3 * G, 3 * G, G), 3 * G); // exactly fits
}

}  // namespace
}  // namespace zeroplan
