// Activation memory against Korthikanti et al. 2022 (arXiv 2205.05198) and against what our executor stores.
#include <gtest/gtest.h>

#include "sim/activation_memory.h"
#include "sim/memory_inputs.h"
#include "sim/memory_model.h"
#include "tests/sim/sim_test_fixtures.h"

namespace zeroplan {
namespace {

using testing::gpt2_shape;
using testing::test_cluster;

TrainingConfig paper_training(std::int64_t seq, std::int64_t micro_batch, Checkpointing checkpointing) {
  TrainingConfig t;
  t.precision = Precision::bf16;  // the paper's 16-bit activations
  t.seq_len = seq;
  t.micro_batch = micro_batch;
  t.checkpointing = checkpointing;
  t.fused_attention = false;  // the paper stores the s x s softmax and dropout tensors
  return t;
}

ActivationBytes activations_of(const TransformerShape& shape, const TrainingConfig& training) {
  const ModelDescription model = expand_transformer("m", shape, "test");
  const PlanChoice choice{3, OffloadDevice::none, OffloadDevice::none};
  return activation_bytes(model, training, gather_memory_inputs(model, test_cluster(8, 1), training, choice));
}

// GPT-3 175B (Brown et al. 2020): h 12288, 96 heads, 96 layers, s 2048; the paper's dropout is on.
TransformerShape gpt3_shape() {
  TransformerShape s = gpt2_shape(12288, 96, 96);
  s.max_seq = 2048;
  s.dropout = 0.1;
  return s;
}

TEST(KorthikantiActivations, Gpt3PerLayerIsSbhTimes34Plus5asOverH) {
  const std::int64_t s = 2048, b = 1, h = 12288, a = 96;
  const ActivationBytes act = activations_of(gpt3_shape(), paper_training(s, b, Checkpointing::none));
  // Sec. 4.1, eq. (1): sbh(34 + 5as/h); for GPT-3 5as/h = 80 (sec. 5), so 114 sbh = 2,868,903,936 bytes.
  ASSERT_EQ(5 * a * s % h, 0);
  EXPECT_EQ(5 * a * s / h, 80);
  // We add what the paper leaves out: the two LayerNorms' fp32 mean and rstd (16 B per token).
  const std::int64_t norm_statistics = 16 * s * b;
  EXPECT_EQ(act.block_terms.norm_statistics, 16);
  EXPECT_EQ(act.block_saved - norm_statistics, s * b * h * (34 + 5 * a * s / h));
  EXPECT_EQ(act.block_saved - norm_statistics, 2'868'903'936);
  EXPECT_EQ(act.saved_layers, 96 * act.block_saved);
}

TEST(KorthikantiActivations, SelectiveRecomputeKeeps34sbhAndSavesSeventyPercentForGpt3) {
  const std::int64_t s = 2048, b = 1, h = 12288;
  const ActivationBytes none = activations_of(gpt3_shape(), paper_training(s, b, Checkpointing::none));
  const ActivationBytes selective = activations_of(gpt3_shape(), paper_training(s, b, Checkpointing::selective));
  EXPECT_EQ(selective.block_saved - 16 * s * b, 34 * s * b * h);  // sec. 5: sbh * 34 (+ our LN statistics)
  // Sec. 5: selective recomputation reduces activation memory by 70% for GPT-3.
  const double reduction = 1.0 - static_cast<double>(selective.block_saved) / static_cast<double>(none.block_saved);
  EXPECT_NEAR(reduction, 0.70, 0.005);
}

TEST(KorthikantiActivations, SelectiveRecomputeSavesSixtyFivePercentForMtNlg) {
  // MT-NLG 530B: h 20480, 128 heads, 105 layers, s 2048: 5as/h = 64; the paper quotes a 65% reduction.
  TransformerShape shape = gpt2_shape(20480, 105, 128);
  shape.max_seq = 2048;
  shape.dropout = 0.1;
  const ActivationBytes none = activations_of(shape, paper_training(2048, 1, Checkpointing::none));
  const ActivationBytes selective = activations_of(shape, paper_training(2048, 1, Checkpointing::selective));
  const double reduction = 1.0 - static_cast<double>(selective.block_saved) / static_cast<double>(none.block_saved);
  EXPECT_NEAR(reduction, 0.65, 0.005);
}

TEST(KorthikantiActivations, FullRecomputeKeepsOnlyTheLayerInput) {
  const std::int64_t s = 2048, b = 2, h = 12288;
  const ActivationBytes full = activations_of(gpt3_shape(), paper_training(s, b, Checkpointing::full));
  EXPECT_EQ(full.block_saved, 2 * s * b * h);  // sec. 4.2: 2sbh per layer
  const ActivationBytes none = activations_of(gpt3_shape(), paper_training(s, b, Checkpointing::none));
  // One block is rebuilt during its backward: its full set less the kept input.
  EXPECT_EQ(full.recompute_live, none.block_saved - 2 * s * b * h);
}

TEST(KorthikantiActivations, NoDropoutDropsTheMasksAndTheDropoutOutput) {
  TransformerShape shape = gpt3_shape();
  shape.dropout = 0.0;
  const std::int64_t s = 2048, b = 1, h = 12288, a = 96;
  const ActivationBytes act = activations_of(shape, paper_training(s, b, Checkpointing::none));
  // 34 - 2 one-byte masks = 32 sbh; softmax output kept (2as^2b), its mask and the dropout output gone.
  EXPECT_EQ(act.block_saved - 16 * s * b, 32 * s * b * h + 2 * a * s * s * b);
}

TEST(ExecutorActivations, Gpt2NoDropoutFusedAttentionMatchesWhatTheExecutorStoresTermByTerm) {
  // exec/ stores per GPT-2 layer (bf16, no dropout, flash attention), in bytes per token:
  const std::int64_t h = 1600, a = 25;
  const std::int64_t ln1_input = 2 * h, ln1_out = 2 * h, qkv = 6 * h, attention_out = 2 * h, ln2_input = 2 * h,
                     ln2_out = 2 * h, fc_out = 8 * h, gelu_out = 8 * h;
  const std::int64_t ln_stats = 2 /*LNs*/ * 2 /*mean, rstd*/ * 4 /*fp32*/;
  const std::int64_t logsumexp = 4 * a;
  TrainingConfig training;
  training.precision = Precision::bf16;
  training.fused_attention = true;
  training.seq_len = 1024;
  training.micro_batch = 8;
  const BlockActivationTerms t = block_activation_terms(gpt2_shape(h, 48, a), training, 2);
  EXPECT_EQ(t.norm_inputs_outputs, ln1_input + ln1_out + ln2_input + ln2_out);
  EXPECT_EQ(t.qkv, qkv);
  EXPECT_EQ(t.attention_output, attention_out);
  EXPECT_EQ(t.mlp, fc_out + gelu_out);
  EXPECT_EQ(t.dropout_masks, 0);
  EXPECT_EQ(t.norm_statistics, ln_stats);
  EXPECT_EQ(t.attention_core, logsumexp);
  EXPECT_EQ(t.total() - ln_stats - logsumexp, 32 * h);  // the 32sbh of the brief
  const ActivationBytes act = activations_of(gpt2_shape(h, 48, a), training);
  EXPECT_EQ(act.block_saved, (32 * h + ln_stats + logsumexp) * 1024 * 8);
}

TEST(LlamaActivations, SwigluStoresGateUpAndProductAndRmsNormStoresOneStatistic) {
  const TransformerShape shape = testing::llama2_7b_shape();
  TrainingConfig training;
  training.precision = Precision::bf16;
  training.fused_attention = true;
  const BlockActivationTerms t = block_activation_terms(shape, training, 2);
  const std::int64_t h = 4096, f = 11008, a = 32;
  EXPECT_EQ(t.mlp, 3 * f * 2);              // gate, up, silu(gate)*up
  EXPECT_EQ(t.norm_inputs_outputs, 4 * h * 2);  // both RMSNorms' inputs and outputs
  EXPECT_EQ(t.qkv, 3 * h * 2);              // no GQA in Llama-2 7B
  EXPECT_EQ(t.norm_statistics, 2 * 4);      // rstd per RMSNorm, fp32
  EXPECT_EQ(t.attention_core, 4 * a);
  // Grouped-query attention shrinks K and V: Llama-3 8B has 8 KV heads of 128.
  TransformerShape gqa = shape;
  gqa.kv_heads = 8;
  EXPECT_EQ(block_activation_terms(gqa, training, 2).qkv, (4096 + 2 * 1024) * 2);
}

TEST(OutputLayerActivations, LogitsWithFp32LossAndFusedCrossEntropy) {
  TransformerShape shape = gpt2_shape(768, 12, 12);
  TrainingConfig training;
  training.precision = Precision::bf16;
  training.seq_len = 1024;
  training.micro_batch = 4;
  const std::int64_t sbv = 1024 * 4 * 50257;
  training.fp32_loss = true;
  EXPECT_EQ(activations_of(shape, training).logits, sbv * (2 + 2 + 4 + 4));
  training.fp32_loss = false;
  EXPECT_EQ(activations_of(shape, training).logits, sbv * (2 + 2));
  training.fused_cross_entropy = true;
  EXPECT_EQ(activations_of(shape, training).logits, sbv * 2);
}

TEST(OutputLayerActivations, Fp32TrainingDoublesEveryActivationElement) {
  TrainingConfig training;
  training.seq_len = 512;
  training.micro_batch = 2;
  training.precision = Precision::bf16;
  const ActivationBytes half = activations_of(gpt2_shape(768, 12, 12), training);
  training.precision = Precision::fp32;
  const ActivationBytes full = activations_of(gpt2_shape(768, 12, 12), training);
  const std::int64_t fixed = (16 + 4 * 12) * 512 * 2;  // fp32 norm statistics and logsumexp are fp32 already
  EXPECT_EQ(full.block_saved - fixed, 2 * (half.block_saved - fixed));
}

TEST(LayerListActivations, SumOfElementsPerSampleTimesMicroBatchTimesBytes) {
  ModelDescription model;
  model.name = "cnn";
  model.family = ModelFamily::generic;
  for (std::int64_t elements : {100'000, 300'000, 50'000}) {
    LayerDescription layer;
    layer.name = "l";
    layer.kind = "generic";
    layer.params = 1000;
    layer.largest_module_params = 1000;
    layer.module_count = 1;
    layer.module_calls = 2;  // the module and its layer
    layer.activation_elements_per_sample = elements;
    model.layers.push_back(layer);
  }
  TrainingConfig training;
  training.precision = Precision::fp16;
  training.micro_batch = 16;
  const PlanChoice choice{0, OffloadDevice::none, OffloadDevice::none};
  const ActivationBytes act =
      activation_bytes(model, training, gather_memory_inputs(model, test_cluster(1, 1), training, choice));
  EXPECT_EQ(act.saved_layers, 450'000 * 16 * 2);
  EXPECT_EQ(act.backward_working_set, 300'000 * 16 * 2);
  EXPECT_EQ(act.logits, 0);
}

}  // namespace
}  // namespace zeroplan
