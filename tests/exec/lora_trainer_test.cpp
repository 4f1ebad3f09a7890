// LoRA on the CPU trainer (exec/cpu/cpu_trainer.cpp, exec/lora_layout.h) against the trainer of the whole model:
// the adapted model is the base with each adapted weight W replaced by W + (alpha/r) B A (PEFT's merge,
// peft/tuners/lora/layer.py Linear.get_delta_weight), so its loss is the whole model's at the merged weights and the
// adapters' gradients follow from the merged weight's gradient G: dB = s G A^T, dA = s B^T G (G's rows of the module).
// The whole model's trainer is itself checked against finite differences and transformers (test_exec_cpu.cpp,
// bench/llama/hf_reference.py). Then: the base gets no gradients or optimizer states and stays bit for bit; QLoRA's
// base is the NF4 round trip of the same weights (core/nf4_quantization.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/nf4_quantization.h"
#include "exec/data_shard.h"
#include "exec/init_rng.h"
#include "exec/lora_layout.h"
#include "exec/token_data.h"
#include "exec/trainer.h"

namespace zeroplan::exec {
namespace {

ExecConfig config_of(bool llama, bool nf4) {
  ExecConfig c;
  if (llama) {
    c.shape = make_llama_shape(256, 64, 2, 4, 2, 96, 32, 10000.0, 1e-5);
    c.lora.modules = {"self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj"};
    c.lora.targets = {"q_proj", "v_proj", "o_proj", "up_proj", "down_proj"};
  } else {
    c.shape = make_shape(257, 64, 2, 2, 32);
    c.lora.modules = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    c.lora.targets = {"c_attn", "c_proj", "c_fc"};
  }
  c.micro_batch = 2;
  c.seq_len = 16;
  c.precision = ExecPrecision::fp32;
  c.seed = 11;
  c.lora.enabled = true;
  c.lora.rank = 4;
  c.lora.alpha = 16;  // scaling 4: the adapters' share is not small
  c.lora.quantize_nf4 = nf4;
  return c;
}

ExecConfig whole_model(ExecConfig c) {
  c.lora = LoraExecSettings{};
  return c;
}

const ParamTensor& tensor(const ParamLayout& layout, const std::string& name) {
  for (const ParamTensor& t : layout.tensors())
    if (t.name == name) return t;
  throw std::invalid_argument("no tensor " + name);
}

double relative_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, r = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    r += b[i] * b[i];
  }
  return std::sqrt(d / r);
}

// The adapters set to nonzero values (B too, so that A's gradient is not zero), then the merged whole model.
void check_against_merged_model(bool llama) {
  SCOPED_TRACE(llama ? "llama" : "gpt2");
  const ExecConfig cfg = config_of(llama, false);
  auto lora = make_cpu_trainer(cfg);
  auto whole = make_cpu_trainer(whole_model(cfg));
  const ParamLayout& adapters = lora->layout();
  std::vector<float> a(static_cast<std::size_t>(adapters.total()), 0.0f);
  for (const ParamTensor& t : adapters.tensors())
    for (std::int64_t i = 0; i < t.numel(); ++i) a[t.offset + i] = 0.05f * hash_normal(99, t.init_index + i);
  lora->set_params(a);
  // The base equals the whole model's seeded initialisation (same layout, same seed).
  const std::vector<float> base = lora->frozen_params();
  ASSERT_EQ(base, whole->params());
  std::vector<float> merged = base;
  const float s = static_cast<float>(cfg.lora.scaling());
  const std::vector<AdaptedLinear> modules = adapted_linears(cfg.shape, cfg.lora);
  const ParamLayout& model = whole->layout();
  for (std::int64_t l = 0; l < cfg.shape.layers; ++l)
    for (const AdaptedLinear& m : modules) {
      const std::string p = peft_block_prefix(cfg.shape, l) + m.path;
      const ParamTensor& A = tensor(adapters, p + ".lora_A.weight");
      const ParamTensor& B = tensor(adapters, p + ".lora_B.weight");
      const ParamTensor& W = model.block(l, m.base);
      for (std::int64_t o = 0; o < m.out; ++o)
        for (std::int64_t i = 0; i < m.in; ++i) {
          double d = 0;
          for (std::int64_t k = 0; k < cfg.lora.rank; ++k) d += double(a[B.offset + o * cfg.lora.rank + k]) * a[A.offset + k * m.in + i];
          merged[W.offset + (m.row_offset + o) * m.in + i] += s * static_cast<float>(d);
        }
    }
  whole->set_params(merged);
  TokenSource data = TokenSource::synthetic(cfg.shape.vocab, 3);
  const TokenBatch batch = next_rank_share(data, cfg.micro_batch, cfg.seq_len, 1, 1, 0);
  const double loss_lora = lora->forward_backward(batch.inputs, batch.targets);
  const double loss_whole = whole->forward_backward(batch.inputs, batch.targets);
  EXPECT_NEAR(loss_lora, loss_whole, 2e-6 * loss_whole);
  const std::vector<float> ga = lora->grads(), gw = whole->grads();
  for (std::int64_t l = 0; l < cfg.shape.layers; ++l)
    for (const AdaptedLinear& m : modules) {
      const std::string p = peft_block_prefix(cfg.shape, l) + m.path;
      SCOPED_TRACE(p);
      const ParamTensor& A = tensor(adapters, p + ".lora_A.weight");
      const ParamTensor& B = tensor(adapters, p + ".lora_B.weight");
      const ParamTensor& W = model.block(l, m.base);
      const std::int64_t r = cfg.lora.rank;
      auto G = [&](std::int64_t o, std::int64_t i) { return double(gw[W.offset + (m.row_offset + o) * m.in + i]); };
      std::vector<double> want_a, got_a, want_b, got_b;
      for (std::int64_t k = 0; k < r; ++k)
        for (std::int64_t i = 0; i < m.in; ++i) {
          double d = 0;
          for (std::int64_t o = 0; o < m.out; ++o) d += a[B.offset + o * r + k] * G(o, i);
          want_a.push_back(s * d);
          got_a.push_back(ga[A.offset + k * m.in + i]);
        }
      for (std::int64_t o = 0; o < m.out; ++o)
        for (std::int64_t k = 0; k < r; ++k) {
          double d = 0;
          for (std::int64_t i = 0; i < m.in; ++i) d += G(o, i) * a[A.offset + k * m.in + i];
          want_b.push_back(s * d);
          got_b.push_back(ga[B.offset + o * r + k]);
        }
      EXPECT_LT(relative_l2(got_a, want_a), 2e-5);
      EXPECT_LT(relative_l2(got_b, want_b), 2e-5);
    }
}

TEST(LoraTrainer, Gpt2EqualsTheMergedWholeModelInLossAndGradients) { check_against_merged_model(false); }
TEST(LoraTrainer, LlamaEqualsTheMergedWholeModelInLossAndGradients) { check_against_merged_model(true); }

TEST(LoraTrainer, AdaptersStartAsPeftDoesAndOnlyTheyTrain) {
  for (int stage : {0, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    ExecConfig cfg = config_of(true, false);
    cfg.zero.stage = stage;
    cfg.zero.param_persistence_threshold = 0;  // stage 3 partitions every tensor, the base's and the adapters'
    cfg.optimizer.learning_rate = 1e-2;
    auto lora = make_cpu_trainer(cfg);
    const ParamLayout& adapters = lora->layout();
    ASSERT_TRUE(adapters.is_adapters());
    EXPECT_EQ(lora_adapter_params(cfg.shape, cfg.lora), 2 * 4 * ((64 + 64) + (64 + 32) + (64 + 64) + (64 + 96) + (96 + 64)));
    // A: U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ a=sqrt(5)), spread over the range; B: zeros.
    const std::vector<float> p0 = lora->params();
    for (const ParamTensor& t : adapters.tensors()) {
      const bool is_a = t.name.find("lora_A") != std::string::npos;
      float lo = 1e9f, hi = -1e9f;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        lo = std::min(lo, p0[t.offset + i]);
        hi = std::max(hi, p0[t.offset + i]);
      }
      if (is_a) {
        const float bound = 1.0f / std::sqrt(static_cast<float>(t.cols));
        EXPECT_GE(lo, -bound);
        EXPECT_LE(hi, bound);
        EXPECT_GT(hi - lo, bound);  // 256+ draws cover more than half the range
      } else {
        EXPECT_EQ(lo, 0.0f);
        EXPECT_EQ(hi, 0.0f);
      }
    }
    // Memory: the base only under params (and, at stage 3, gathered units); grads and AdamW are the adapters'.
    const MemoryReport mem = lora->memory();
    ASSERT_NE(lora->frozen_layout(), nullptr);
    const std::int64_t adapter_bytes = 4 * adapters.total(), base_bytes = 4 * lora->frozen_layout()->total();
    EXPECT_EQ(mem.component("grads"), adapter_bytes);
    EXPECT_EQ(mem.component("optimizer_states"), 2 * adapter_bytes);
    EXPECT_EQ(mem.component("params"), stage == 3 ? (adapter_bytes + base_bytes) : adapter_bytes + base_bytes);
    const std::vector<float> base0 = lora->frozen_params();
    TokenSource data = TokenSource::synthetic(cfg.shape.vocab, 4);
    const TokenBatch b = next_rank_share(data, cfg.micro_batch, cfg.seq_len, 1, 1, 0);
    double first = 0, last = 0;
    for (int step = 0; step < 8; ++step) {  // one batch again and again: the adapters fit it
      const StepResult r = lora->step(b.inputs, b.targets);
      if (step == 0) first = r.loss;
      last = r.loss;
      EXPECT_GT(r.grad_norm, 0.0);
    }
    EXPECT_EQ(lora->frozen_params(), base0) << "the frozen base changed";
    const std::vector<float> p1 = lora->params();
    EXPECT_NE(p1, p0);
    EXPECT_LT(last, first);
  }
}

TEST(LoraTrainer, QloraHoldsTheBaseWeightsAsNf4AndComputesWithTheirRoundTrip) {
  const ExecConfig cfg = config_of(true, true);
  auto qlora = make_cpu_trainer(cfg);
  auto whole = make_cpu_trainer(whole_model(cfg));
  // The base layout lacks the block weights; the rest equals the whole model's initialisation.
  const ParamLayout& base_layout = *qlora->frozen_layout();
  EXPECT_FALSE(base_layout.has(kQkvW));
  std::vector<float> deq = whole->params();
  const ParamLayout& model = whole->layout();
  const std::vector<float> base = qlora->frozen_params();
  for (const ParamTensor& t : base_layout.tensors()) {
    const ParamTensor& w = tensor(model, t.name);
    for (std::int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(base[t.offset + i], deq[w.offset + i]) << t.name;
  }
  // Each block weight is bitsandbytes' quantize_4bit / dequantize_4bit of the whole model's initial weight.
  for (std::int64_t l = 0; l < cfg.shape.layers; ++l)
    for (BlockTensor which : {kQkvW, kAttProjW, kFcW, kFcProjW}) {
      const ParamTensor& w = model.block(l, which);
      const Nf4Tensor q = quantize_nf4(deq.data() + w.offset, w.numel());
      std::vector<float> round_trip(static_cast<std::size_t>(w.numel()));
      dequantize_nf4(q, round_trip.data());
      ASSERT_EQ(qlora->dequantized_weight(l, which), round_trip);
      std::copy(round_trip.begin(), round_trip.end(), deq.begin() + w.offset);
    }
  // B = 0: the adapted model is the dequantised base; the whole model at those weights gives the same loss.
  whole->set_params(deq);
  TokenSource data = TokenSource::synthetic(cfg.shape.vocab, 6);
  const TokenBatch b = next_rank_share(data, cfg.micro_batch, cfg.seq_len, 1, 1, 0);
  const double lq = qlora->forward_loss(b.inputs, b.targets), lw = whole->forward_loss(b.inputs, b.targets);
  EXPECT_NEAR(lq, lw, 1e-6 * lw);
  // The codes and constants are counted under params, beside the base's other tensors and one dequantised weight.
  const MemoryReport mem = qlora->memory();
  std::int64_t nf4_bytes = 0;
  for (std::int64_t l = 0; l < cfg.shape.layers; ++l)
    for (BlockTensor which : {kQkvW, kAttProjW, kFcW, kFcProjW})
      nf4_bytes += quantize_nf4(deq.data() + model.block(l, which).offset, model.block(l, which).numel()).bytes();
  const std::int64_t widest = std::max({model.block(0, kQkvW).numel(), model.block(0, kFcW).numel(),
                                        model.block(0, kAttProjW).numel(), model.block(0, kFcProjW).numel()});
  EXPECT_EQ(mem.component("params"), 4 * (qlora->layout().total() + base_layout.total()) + nf4_bytes + 4 * widest);
  // Training leaves the codes as they were.
  const std::vector<float> w0 = qlora->dequantized_weight(1, kFcW);
  for (int step = 0; step < 3; ++step) {
    const TokenBatch t = next_rank_share(data, cfg.micro_batch, cfg.seq_len, 1, 1, 0);
    qlora->step(t.inputs, t.targets);
  }
  EXPECT_EQ(qlora->dequantized_weight(1, kFcW), w0);
}

}  // namespace
}  // namespace zeroplan::exec
