// The simulator against reality: the step times of the PyTorch peers measured on our GPU machine (4x H200,
// NVLink NV18, PyTorch 2.11; ../shared/reference/device-and-peers.md, copied below so the test does not depend
// on any cluster or reference file changing), predicted with the bundled h200x4 cluster description.
//
// Each peer is modelled as the DeepSpeed stage whose schedule matches it, with its overlap settings:
// - eager (1 GPU) and DDP: stage 0; DDP all-reduces 25 MiB gradient buckets during backward (overlap_comm on,
//   reduce_bucket_size = 25 MiB of fp32 gradients). Both train under torch.autocast over fp32 parameters
//   (autocast_fp32_params: fp32 residual stream and norms, weight casts, fp32 gradients on the wire).
// - ZeroRedundancyOptimizer: stage 1 under autocast: DDP's overlapped all-reduce, the optimizer on this rank's
//   quarter, then the updated fp32 parameters broadcast from their owners after the step, one broadcast per
//   parameter tensor (parameters_as_bucket_view=False, the default): modelled as the stage-1 parameter all-gather
//   after the step in calls of allgather_bucket_size = P / (tensors) elements (GPT-2: 12 tensors per block plus
//   wte, wpe and the final LayerNorm's two: 580 for 1.5B). Same bytes, not overlapped; a ring broadcast of each
//   owner's quarter moves 4/3 of an all-gather's wire bytes, and real tensors are uneven (biases are
//   latency-bound), so this part is approximate.
// - FSDP SHARD_GRAD_OP: stage 2 with bf16 parameters (FSDP MixedPrecision, fp32 master in the optimizer),
//   gradients reduce-scattered per FSDP unit (one transformer block) during backward; DeepSpeed all-gathers the
//   updated parameters after the step where FSDP gathers them before the next forward with prefetch.
// - FSDP2 fully_shard and FSDP FULL_SHARD: stage 3 with bf16 parameters, prefetch on, gradients reduce-scattered
//   per unit (block) during backward.
// The model is the peer's (bench/exec/pytorch_peer.py): GPT-2 with vocab 50304, tied embeddings, no dropout,
// flash attention, fp32 loss, AdamW, gradient clipping at 1.0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/simulator.h"
#include "tests/sim/sim_test_fixtures.h"

namespace zeroplan {
namespace {

// The relative tolerance every prediction must meet (issue 3's compute-model brief: aim 15%).
constexpr double kTolerance = 0.15;

ModelDescription peer_gpt2(std::int64_t hidden, std::int64_t layers, std::int64_t heads) {
  // The peers pad the vocabulary to 50304 and train without dropout.
  TransformerShape shape = testing::gpt2_shape(hidden, layers, heads);
  shape.vocab_size = 50304;
  shape.dropout = 0.0;
  return expand_transformer("peer gpt2 h" + std::to_string(hidden), shape, "simulator_peers_test");
}

struct PeerRow {
  const char* peer;
  bool large_model;      // GPT-2 1.5B (else 124M)
  int gpus;
  std::int64_t micro_batch;
  int stage;
  bool autocast;         // torch.autocast over fp32 parameters (else bf16 parameters, FSDP mixed precision)
  double measured_ms;    // device-and-peers.md
};

// device-and-peers.md, "The peers" table (step ms), 2026-11-21.
const std::vector<PeerRow> kPeers = {
    {"GPT-2 1.5B, 1 GPU, eager + autocast", true, 1, 8, 0, true, 207.0},
    {"GPT-2 1.5B, 4 GPUs, DDP", true, 4, 8, 0, true, 224.0},
    {"GPT-2 1.5B, 4 GPUs, ZeroRedundancyOptimizer", true, 4, 8, 1, true, 241.0},
    {"GPT-2 1.5B, 4 GPUs, FSDP SHARD_GRAD_OP", true, 4, 8, 2, false, 196.0},
    {"GPT-2 1.5B, 4 GPUs, FSDP2 fully_shard", true, 4, 8, 3, false, 199.0},
    {"GPT-2 124M, 4 GPUs, FSDP FULL_SHARD", false, 4, 16, 3, false, 47.0},
};

StepSimulation predict(const PeerRow& row, const ModelDescription& model) {
  const ClusterDescription cluster = with_gpu_count(load_cluster("h200x4"), row.gpus);
  TrainingConfig training;
  training.engine = TrainingEngine::ideal;  // PyTorch's DDP/FSDP: no DeepSpeed code paths
  training.micro_batch = row.micro_batch;
  training.seq_len = 1024;
  training.precision = Precision::bf16;
  training.optimizer = OptimizerKind::adamw;
  training.gradient_clipping = 1.0;
  training.fused_attention = true;
  training.fp32_loss = true;
  training.autocast_fp32_params = row.autocast;
  training.zero.overlap_comm = true;
  training.zero.overlap_comm_given = true;
  if (row.stage <= 1) {
    training.zero.reduce_bucket_size = 25 * 1024 * 1024 / 4;  // DDP bucket_cap_mb = 25 of fp32 gradients
    const std::int64_t tensors = 12 * model.transformer->layers + 4;
    training.zero.allgather_bucket_size = (model.params() + tensors - 1) / tensors;  // one broadcast per tensor
  } else {
    training.zero.reduce_bucket_size = model.layers[1].params;  // one FSDP unit: a transformer block
  }
  PlanChoice choice;
  choice.stage = row.stage;
  return simulate_step(model, cluster, training, choice);
}

TEST(SimulatorPeers, StepTimesWithinToleranceOfTheMeasuredPeers) {
  const ModelDescription large = peer_gpt2(1600, 48, 25);
  const ModelDescription small = peer_gpt2(768, 12, 12);
  std::printf("%-46s %6s %10s %10s %8s %8s\n", "peer", "stage", "measured", "predicted", "error", "MFU");
  for (const PeerRow& row : kPeers) {
    const StepSimulation sim = predict(row, row.large_model ? large : small);
    const double predicted_ms = sim.step_seconds * 1e3;
    const double error = predicted_ms / row.measured_ms - 1.0;
    std::printf("%-46s %6d %8.1f ms %8.1f ms %+7.1f%% %7.1f%%\n", row.peer, row.stage, row.measured_ms,
                predicted_ms, 100.0 * error, 100.0 * sim.mfu);
    EXPECT_LE(std::abs(error), kTolerance) << row.peer << ": predicted " << predicted_ms << " ms, measured "
                                          << row.measured_ms << " ms";
  }
}

// The ordering the measurements show must come out of the model too: sharding the optimizer step (stages 2 and
// 3 with bf16 parameters) beats DDP, and ZeroRedundancyOptimizer's broadcast after the step costs more than it
// saves.
TEST(SimulatorPeers, OrderingOfThePeersIsReproduced) {
  const ModelDescription large = peer_gpt2(1600, 48, 25);
  const double ddp = predict(kPeers[1], large).step_seconds;
  const double zero1 = predict(kPeers[2], large).step_seconds;
  const double fsdp_grad_op = predict(kPeers[3], large).step_seconds;
  EXPECT_LT(fsdp_grad_op, ddp);
  EXPECT_GT(zero1, ddp);
}

}  // namespace
}  // namespace zeroplan
