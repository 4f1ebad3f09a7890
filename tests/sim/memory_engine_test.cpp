// The zeroplan engine (our executor, exec/) differs from DeepSpeed's in three terms the memory model names:
// no fp32 gradient copy, no gradient buckets (in-place reduction over the flat gradient buffer), and no
// caching-allocator reserve. Everything else (params, master, optimizer states, activations) is shared.
#include <gtest/gtest.h>

#include "exec/activation_accounting.h"
#include "sim/executor_device_memory.h"
#include "sim/memory_model.h"
#include "tests/sim/sim_test_fixtures.h"

namespace zeroplan {
namespace {

TrainingConfig training_for(TrainingEngine engine) {
  TrainingConfig training;
  training.micro_batch = 8;
  training.seq_len = 1024;
  training.precision = Precision::bf16;
  training.engine = engine;
  return training;
}

TEST(ZeroplanEngine, KeepsSixteenBitGradientsOnlyAndNoBucketsOrReserve) {
  const ModelDescription model = testing::gpt2_xl();
  ClusterDescription cluster = testing::test_cluster(1, 1);
  cluster.runtime.cuda_context_bytes = 554'500'096;
  cluster.runtime.cublas_workspace_bytes = 32 * kMiB;
  cluster.runtime.allocator_reserve_fraction = 0.10;
  const std::int64_t P = model.params();
  const PlanChoice stage0{0, OffloadDevice::none, OffloadDevice::none};
  const MemoryEstimate deepspeed = estimate_memory(model, cluster, training_for(TrainingEngine::deepspeed), stage0);
  const MemoryEstimate zeroplan = estimate_memory(model, cluster, training_for(TrainingEngine::zeroplan), stage0);

  // The executor's flat buffer holds the token embedding padded to a multiple of 128 rows (exec/exec_config.h
  // pad_vocab, as llm.c pads 50257 to 50304): 47 extra rows of 1600.
  const std::int64_t flat = P + (50304 - 50257) * 1600;
  EXPECT_EQ(zeroplan.gpu.grads, 2 * flat);              // bf16 gradients, nothing else
  // DeepSpeed: .grad over backward, and FP16_Optimizer's fp32 conversions and flat copy at the step (8 B/param).
  EXPECT_EQ(deepspeed.gpu.grads, 2 * P + 8 * P);
  EXPECT_EQ(zeroplan.gpu.gradient_buckets, 0);
  EXPECT_GT(deepspeed.gpu.gradient_buckets, 0);
  EXPECT_EQ(zeroplan.gpu.params, 2 * flat);
  EXPECT_EQ(deepspeed.gpu.params, 2 * P);
  EXPECT_EQ(zeroplan.gpu.master_params, 4 * flat);
  EXPECT_EQ(zeroplan.gpu.optimizer_states, 8 * flat);
  EXPECT_EQ(deepspeed.gpu.optimizer_states, 8 * P);
  // The same saved tensors; the executor's backward working set is its three reused gradient buffers
  // (12 h + 4 a B/token in bf16) against the largest PyTorch block's temporaries ((2f + 2h) e = 20 h).
  EXPECT_EQ(deepspeed.gpu.activations - zeroplan.gpu.activations, 8192 * (20 * 1600 - (12 * 1600 + 4 * 25)));
  // Runtime: context, the executor's workspace (cuBLASLt's, cuDNN's fused attention's and a few small buffers) and
  // its allocations' round-up to 2 MiB device pages (one rank: no NCCL; exact-size allocations: no reserve): above
  // context + cuBLASLt + cuDNN's attention, and by less than a page for each of its few dozen allocations and 1 MiB
  // of small buffers.
  const Bytes attention = exec::cudnn_attention_workspace_bytes(
      executor_planned_config(model, training_for(TrainingEngine::zeroplan), 0));
  EXPECT_GT(attention, 0) << "bf16, T 1024: offered to cuDNN";
  const Bytes floor = cluster.runtime.cuda_context_bytes + cluster.runtime.cublas_workspace_bytes + attention;
  EXPECT_GT(zeroplan.gpu.runtime_overhead, floor);
  EXPECT_LT(zeroplan.gpu.runtime_overhead, floor + 64 * kMiB);
  EXPECT_LT(zeroplan.gpu.runtime_overhead, deepspeed.gpu.runtime_overhead);
}

TEST(ZeroplanEngine, ExplainGivesTheSameNumbers) {
  const ModelDescription model = testing::gpt2_small();
  const ClusterDescription cluster = testing::test_cluster(1, 1);
  const TrainingConfig training = training_for(TrainingEngine::zeroplan);
  const PlanChoice stage0{0, OffloadDevice::none, OffloadDevice::none};
  const MemoryEstimate fast = estimate_memory(model, cluster, training, stage0);
  const MemoryEstimate explained = explain_memory(model, cluster, training, stage0);
  EXPECT_EQ(fast.gpu.total, explained.gpu.total);
  Bytes buckets_in_terms = -1;
  for (const MemoryTerm& term : explained.terms) {
    if (term.component == "gradient_buckets") buckets_in_terms = term.bytes;
  }
  EXPECT_EQ(buckets_in_terms, 0);
}

// The planner's activations for our engine are the executor's allocations (exec/activation_accounting.h, which a GPU
// test holds to the CUDA allocator) under every checkpointing mode: selective is the executor's own (norm and GELU
// outputs rebuilt), not Megatron's attention-core recompute.
TEST(ZeroplanEngine, ActivationsAreTheExecutorsUnderEveryCheckpointingMode) {
  const ModelDescription model = testing::gpt2_xl();
  const ClusterDescription cluster = testing::test_cluster(1, 1);
  const PlanChoice stage0{0, OffloadDevice::none, OffloadDevice::none};
  for (Checkpointing mode : {Checkpointing::none, Checkpointing::selective, Checkpointing::full}) {
    TrainingConfig training = training_for(TrainingEngine::zeroplan);
    training.checkpointing = mode;
    const MemoryEstimate planned = estimate_memory(model, cluster, training, stage0);
    const exec::ExpectedMemory executor = exec::expected_device_memory(executor_exec_config(model, training, 0));
    EXPECT_EQ(planned.gpu.activations, executor.activations) << to_string(mode);
  }
}

}  // namespace
}  // namespace zeroplan
