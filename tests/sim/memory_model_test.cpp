// The assembled memory model: explain == estimate, monotonicity, and the placement of each term for the
// offload choices (zero-formulas.md sec. 3).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "sim/memory_model.h"
#include "tests/sim/sim_test_fixtures.h"

namespace zeroplan {
namespace {

using testing::gpt2_xl;
using testing::params_only_model;
using testing::test_cluster;

// The textbook model (the ideal engine: the ZeRO papers' terms with DeepSpeed's buffer sizes); DeepSpeed's own
// terms are checked in deepspeed_memory_test.cpp.
TrainingConfig base_training() {
  TrainingConfig t;
  t.engine = TrainingEngine::ideal;
  t.precision = Precision::bf16;
  t.micro_batch = 8;
  t.seq_len = 1024;
  return t;
}

ClusterDescription cluster_with_overhead(int gpus_per_node, int nodes) {
  ClusterDescription c = test_cluster(gpus_per_node, nodes);
  c.runtime.cuda_context_bytes = 500 * kMiB;
  c.runtime.cublas_workspace_bytes = 32 * kMiB;
  c.runtime.nccl_buffer_bytes = 1 * kGiB;
  c.runtime.allocator_reserve_fraction = 0.05;
  return c;
}

TEST(ExplainMemory, TermsSumToTheSameComponentsAsTheFastPathForEveryChoice) {
  const ModelDescription model = gpt2_xl();
  const ClusterDescription cluster = cluster_with_overhead(4, 1);
  for (Checkpointing checkpointing : {Checkpointing::none, Checkpointing::selective, Checkpointing::full})
    for (Precision precision : {Precision::bf16, Precision::fp32})
      for (const PlanChoice& choice : enumerate_plan_choices()) {
        SCOPED_TRACE(choice.label());
        TrainingConfig training = base_training();
        training.checkpointing = checkpointing;
        training.precision = precision;
        training.zero.zero_init = false;
        const MemoryEstimate fast = estimate_memory(model, cluster, training, choice);
        const MemoryEstimate explained = explain_memory(model, cluster, training, choice);
        EXPECT_TRUE(fast.terms.empty());
        ASSERT_FALSE(explained.terms.empty());
        std::map<std::string, Bytes> sums;
        for (const MemoryTerm& term : explained.terms) {
          sums[term.component] += term.bytes;
          EXPECT_FALSE(term.formula.empty()) << term.name;
          EXPECT_FALSE(term.source.empty()) << term.name;
        }
        Bytes total = 0;
        for (const auto& [name, bytes] : fast.gpu.components()) {
          EXPECT_EQ(sums[name], bytes) << name;
          EXPECT_EQ(explained.gpu.components().size(), fast.gpu.components().size());
          total += bytes;
        }
        EXPECT_EQ(total, fast.gpu.total);
        EXPECT_EQ(explained.gpu.total, fast.gpu.total);
        EXPECT_EQ(sums["host"], fast.host.total);
        EXPECT_EQ(sums["nvme"], fast.nvme_bytes);
        EXPECT_EQ(sums["host_init"], fast.init_peak_host_bytes);
        EXPECT_EQ(sums["gpu_init"], fast.init_peak_gpu_bytes);
      }
}

TEST(EstimateMemory, GrowsMonotonicallyWithMicroBatch) {
  const ModelDescription model = gpt2_xl();
  const ClusterDescription cluster = cluster_with_overhead(4, 1);
  for (const PlanChoice& choice : enumerate_plan_choices()) {
    TrainingConfig training = base_training();
    Bytes previous = 0;
    for (std::int64_t b = 1; b <= 64; ++b) {
      training.micro_batch = b;
      const Bytes total = estimate_memory(model, cluster, training, choice).gpu.total;
      EXPECT_GT(total, previous) << choice.label() << " b=" << b;
      previous = total;
    }
  }
}

TEST(EstimateMemory, OptimizerOffloadMovesMasterStatesAndFp32GradsToTheHost) {
  const std::int64_t P = 1'000'000'000;
  const ModelDescription model = params_only_model(P);
  const ClusterDescription cluster = test_cluster(4, 1);
  TrainingConfig training = base_training();
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    const MemoryEstimate on_gpu =
        estimate_memory(model, cluster, training, {stage, OffloadDevice::none, OffloadDevice::none});
    const MemoryEstimate offloaded =
        estimate_memory(model, cluster, training, {stage, OffloadDevice::cpu, OffloadDevice::none});
    EXPECT_EQ(on_gpu.gpu.master_params, 4 * P / 4);
    EXPECT_EQ(on_gpu.gpu.optimizer_states, 8 * P / 4);
    EXPECT_EQ(offloaded.gpu.master_params, 0);
    EXPECT_EQ(offloaded.gpu.optimizer_states, 0);
    // 16 B/param of each rank's partition on the host (zero-formulas.md sec. 3), 4 ranks on the node; stage 1/2
    // add a pinned staging buffer of the largest parameter in 16-bit.
    const Bytes staging = stage < 3 ? 2 * P * 4 : 0;
    EXPECT_EQ(offloaded.host.pinned, 16 * P / 4 * 4 + staging);
    EXPECT_EQ(offloaded.host.pageable, 0);
    // GPU keeps 16-bit params: 2P for stages 1/2, 2P/N for stage 3.
    EXPECT_EQ(offloaded.gpu.params, stage < 3 ? 2 * P : 2 * P / 4);
  }
}

TEST(EstimateMemory, ParamOffloadMovesTheSixteenBitPartitionAndNvmeUsesSwapBuffers) {
  const std::int64_t P = 1'000'000'000;
  const ModelDescription model = params_only_model(P);
  const ClusterDescription cluster = test_cluster(4, 1);
  const TrainingConfig training = base_training();
  const MemoryEstimate cpu = estimate_memory(model, cluster, training, {3, OffloadDevice::cpu, OffloadDevice::cpu});
  EXPECT_EQ(cpu.gpu.params, 0);
  EXPECT_EQ(cpu.host.total, (16 * P / 4 + 2 * P / 4) * 4);
  const MemoryEstimate nvme =
      estimate_memory(model, cluster, training, {3, OffloadDevice::nvme, OffloadDevice::nvme});
  EXPECT_EQ(nvme.nvme_bytes, ((4 + 8) * P / 4 + 2 * P / 4) * 4);
  const ZeroConfig& z = training.zero;
  const Bytes swap_per_rank =
      z.optimizer_buffer_count * std::min(z.sub_group_size, P / 4) * 4 + z.param_buffer_count * z.param_buffer_size * 2;
  EXPECT_EQ(nvme.host.total, (4 * P / 4 + swap_per_rank) * 4);
}

TEST(EstimateMemory, Fp32TrainingHasNoMasterCopyAndFourByteParamsAndGrads) {
  const std::int64_t P = 100'000'000;
  TrainingConfig training = base_training();
  training.precision = Precision::fp32;
  const MemoryEstimate m = estimate_memory(params_only_model(P), test_cluster(1, 1), training,
                                           {0, OffloadDevice::none, OffloadDevice::none});
  EXPECT_EQ(m.gpu.params, 4 * P);
  EXPECT_EQ(m.gpu.grads, 4 * P);
  EXPECT_EQ(m.gpu.master_params, 0);
  EXPECT_EQ(m.gpu.optimizer_states, 8 * P);
}

TEST(EstimateMemory, OptimizerKindsSetTheStateBytes) {
  const std::int64_t P = 2048 * 1000;
  TrainingConfig training = base_training();
  const PlanChoice stage0{0, OffloadDevice::none, OffloadDevice::none};
  training.optimizer = OptimizerKind::sgd_momentum;
  EXPECT_EQ(estimate_memory(params_only_model(P), test_cluster(1, 1), training, stage0).gpu.optimizer_states, 4 * P);
  training.optimizer = OptimizerKind::adam_8bit;
  // Two 1-byte states plus one fp32 absmax per 2048-value block for each state.
  EXPECT_EQ(estimate_memory(params_only_model(P), test_cluster(1, 1), training, stage0).gpu.optimizer_states,
            2 * P + 2 * 4 * 1000);
}

TEST(EstimateMemory, GradientsIncludeTheFp32PartitionAtTheStep) {
  const std::int64_t P = 1'000'000'000;
  const TrainingConfig training = base_training();
  const ClusterDescription cluster = test_cluster(4, 1);
  auto grads = [&](int stage) {
    return estimate_memory(params_only_model(P), cluster, training, {stage, OffloadDevice::none, OffloadDevice::none})
        .gpu.grads;
  };
  EXPECT_EQ(grads(0), 2 * P + 4 * P);
  EXPECT_EQ(grads(1), 2 * P + 4 * P / 4);
  EXPECT_EQ(grads(2), 2 * P / 4 + 4 * P / 4);
  EXPECT_EQ(grads(3), 2 * P / 4 + 4 * P / 4);
}

TEST(EstimateMemory, Stage3GathersAreBoundedAndSmallModulesPersist) {
  const ModelDescription model = gpt2_xl();
  TrainingConfig training = base_training();
  const MemoryEstimate m =
      estimate_memory(model, test_cluster(4, 1), training, {3, OffloadDevice::none, OffloadDevice::none});
  // Largest module: the token + position embeddings are separate modules; the token table 50257 x 1600.
  const std::int64_t largest = model.largest_layer_params();
  EXPECT_EQ(largest, 50257LL * 1600);
  // Persistent: every LayerNorm (2h) and bias (default threshold 1e5 elements), and the final norm.
  const std::int64_t h = 1600;
  const std::int64_t per_block_vectors = 2 * h + 3 * h + h + 2 * h + 4 * h + h;
  const std::int64_t persistent = 48 * per_block_vectors + 2 * h;
  const Bytes in_flight = 2 * (largest + training.zero.prefetch_bucket_size);
  EXPECT_EQ(m.gpu.gathered_params, in_flight + 2 * persistent);
  // A tiny max_live_parameters caps what is in flight.
  training.zero.max_live_parameters = 1'000'000;
  EXPECT_EQ(estimate_memory(model, test_cluster(4, 1), training, {3, OffloadDevice::none, OffloadDevice::none})
                .gpu.gathered_params,
            2 * 1'000'000 + 2 * persistent);
}

TEST(EstimateMemory, BucketsFollowDeepSpeedDefaultsAndOverlapComm) {
  const std::int64_t P = 1'000'000'000;
  TrainingConfig training = base_training();
  const ClusterDescription cluster = test_cluster(4, 1);
  const PlanChoice stage2{2, OffloadDevice::none, OffloadDevice::none};
  const Bytes single = estimate_memory(params_only_model(P), cluster, training, stage2).gpu.gradient_buckets;
  EXPECT_EQ(single, 2 * 500'000'000LL + 2 * 500'000'000LL);  // reduce bucket + all-gather bucket
  training.zero.overlap_comm = true;
  training.zero.overlap_comm_given = true;
  EXPECT_EQ(estimate_memory(params_only_model(P), cluster, training, stage2).gpu.gradient_buckets,
            2 * 2 * 500'000'000LL + 2 * 500'000'000LL);
}

TEST(EstimateMemory, RuntimeOverheadHasNcclOnlyWithSeveralRanksAndReservesAFractionOfActivations) {
  const ModelDescription model = gpt2_xl();
  const TrainingConfig training = base_training();
  const PlanChoice stage0{0, OffloadDevice::none, OffloadDevice::none};
  const MemoryEstimate one = estimate_memory(model, cluster_with_overhead(1, 1), training, stage0);
  const MemoryEstimate four = estimate_memory(model, cluster_with_overhead(4, 1), training, stage0);
  // The caching allocator's reserve: a fraction (0.05 here) of what the forward pass saves and backward frees.
  const double saved = static_cast<double>(one.gpu.activations + one.gpu.logits);
  EXPECT_GT(saved, 0.0);
  EXPECT_EQ(one.gpu.runtime_overhead, 500 * kMiB + 32 * kMiB + static_cast<Bytes>(std::ceil(0.05 * saved)));
  EXPECT_EQ(four.gpu.runtime_overhead - one.gpu.runtime_overhead, 1 * kGiB);
}

TEST(EstimateMemory, InitPeaksWithAndWithoutZeroInit) {
  const std::int64_t P = 1'000'000'000;
  const ModelDescription model = params_only_model(P);
  TrainingConfig training = base_training();
  const PlanChoice stage3{3, OffloadDevice::none, OffloadDevice::none};
  const MemoryEstimate with_init = estimate_memory(model, test_cluster(4, 1), training, stage3);
  EXPECT_EQ(with_init.init_peak_gpu_bytes, 0);
  EXPECT_EQ(with_init.init_peak_host_bytes, 4 * model.largest_layer_params() * 4);
  training.zero.zero_init = false;
  const MemoryEstimate without = estimate_memory(model, test_cluster(4, 1), training, stage3);
  EXPECT_EQ(without.init_peak_gpu_bytes, 2 * P);  // no runtime overhead in the test cluster
  EXPECT_EQ(without.init_peak_host_bytes, 4 * P * 4);
}

TEST(EstimateMemory, AbsurdSizesSaturateInsteadOfWrapping) {
  const ModelDescription model = gpt2_xl();
  TrainingConfig training = base_training();
  training.micro_batch = std::int64_t{1} << 40;
  training.seq_len = std::int64_t{1} << 20;
  training.fused_attention = false;
  const MemoryEstimate m =
      estimate_memory(model, test_cluster(4, 1), training, {0, OffloadDevice::none, OffloadDevice::none});
  EXPECT_GT(m.gpu.total, std::int64_t{1} << 59);
  EXPECT_GT(m.gpu.activations, 0);
}

}  // namespace
}  // namespace zeroplan
