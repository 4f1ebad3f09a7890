// LoRA on the CPU trainer (exec/cpu/cpu_trainer.cpp, exec/lora_layout.h) against the trainer of the whole model:
// the adapted model is the base with each adapted weight W replaced by W + (alpha/r) B A (PEFT's merge,
// peft/tuners/lora/layer.py Linear.get_delta_weight), so its loss is the whole model's at the merged weights and the
// adapters' gradients follow from the merged weight's gradient G: dB = s G A^T, dA = s B^T G (G's rows of the module).
// The whole model's trainer is itself checked against finite differences and transformers (test_exec_cpu.cpp,
// bench/llama/hf_reference.py). Then: the base gets no gradients or optimizer states and stays bit for bit; QLoRA's
// base is the NF4 round trip of the same weights (core/nf4_quantization.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
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
  // Each block weight is bitsandbytes' quantize_4bit / dequantize_4bit of the whole model's initial weight, one
  // call per transformers module (Llama's qkv as q_proj, k_proj, v_proj; gate_up as gate_proj, up_proj).
  for (std::int64_t l = 0; l < cfg.shape.layers; ++l)
    for (BlockTensor which : {kQkvW, kAttProjW, kFcW, kFcProjW}) {
      const ParamTensor& w = model.block(l, which);
      const Nf4ModuleTensors q = quantize_nf4_modules(deq.data() + w.offset, nf4_module_elements(cfg.shape, which));
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
      nf4_bytes += quantize_nf4_modules(deq.data() + model.block(l, which).offset,
                                        nf4_module_elements(cfg.shape, which))
                       .bytes();
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


// QLoRA per transformers module: bitsandbytes (through transformers' replace_with_bnb_linear) quantises every
// nn.Linear as its own Params4bit, so Llama's q_proj, k_proj and v_proj (our fused qkv's rows) and gate_proj and
// up_proj (gate_up's rows) each get their own blocks of 64, their own offset (absmax.mean()) and their own groups of
// 256 blocks for the double quantisation (quantize_4bit with compress_statistics). The shape puts module boundaries
// inside a group of 256 blocks of the fused tensor (q_proj: 192 x 192 = 576 blocks), and each module has its own
// spread, so that one quantisation of the fused tensor gives other constants and codes.
ModelShape module_test_shape() { return make_llama_shape(256, 192, 2, 6, 2, 320, 32, 10000.0, 1e-5); }

// Module j of `which` drawn with spread spreads[j] (rows of the fused weight in order).
std::vector<float> fused_weight(const ModelShape& s, BlockTensor which, std::uint64_t seed,
                                const std::vector<float>& spreads) {
  const std::vector<std::int64_t> modules = nf4_module_elements(s, which);
  std::vector<float> w;
  for (std::size_t j = 0; j < modules.size(); ++j)
    for (std::int64_t i = 0; i < modules[j]; ++i)
      w.push_back(spreads[j] * hash_normal(seed, static_cast<std::uint64_t>(w.size())));
  return w;
}

TEST(LoraTrainer, Nf4ModulesOfAFusedLlamaWeightAreEachModuleQuantisedAlone) {
  const ModelShape s = module_test_shape();
  const std::int64_t C = s.hidden, Q = s.q_dim(), KV = s.kv_dim(), F = s.ffn_hidden;
  // The modules' sizes are transformers' weights [out, in]: q, k, v; gate, up; o and down whole.
  EXPECT_EQ(nf4_module_elements(s, kQkvW), (std::vector<std::int64_t>{Q * C, KV * C, KV * C}));
  EXPECT_EQ(nf4_module_elements(s, kFcW), (std::vector<std::int64_t>{F * C, F * C}));
  EXPECT_EQ(nf4_module_elements(s, kAttProjW), (std::vector<std::int64_t>{C * Q}));
  EXPECT_EQ(nf4_module_elements(s, kFcProjW), (std::vector<std::int64_t>{C * F}));
  // GPT-2's c_attn and c_fc are one Conv1D module each in transformers: one tensor.
  const ModelShape g = make_shape(257, 64, 2, 2, 32);
  EXPECT_EQ(nf4_module_elements(g, kQkvW), (std::vector<std::int64_t>{g.qkv_dim() * g.hidden}));
  EXPECT_EQ(nf4_module_elements(g, kFcW), (std::vector<std::int64_t>{g.mlp_in_dim() * g.hidden}));

  const std::vector<std::pair<BlockTensor, std::vector<float>>> cases = {
      {kQkvW, {0.02f, 0.08f, 0.005f}}, {kFcW, {0.03f, 0.01f}}};
  for (const auto& [which, spreads] : cases) {
    SCOPED_TRACE(which == kQkvW ? "qkv" : "gate_up");
    const std::vector<float> w = fused_weight(s, which, 5, spreads);
    const std::vector<std::int64_t> sizes = nf4_module_elements(s, which);
    const Nf4ModuleTensors q = quantize_nf4_modules(w.data(), sizes);
    ASSERT_EQ(q.modules.size(), sizes.size());
    EXPECT_EQ(q.elements(), static_cast<std::int64_t>(w.size()));
    std::int64_t first = 0, bytes = 0;
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      SCOPED_TRACE("module " + std::to_string(j));
      // The module's weight alone, as its own nn.Linear holds it.
      const std::vector<float> alone(w.begin() + first, w.begin() + first + sizes[j]);
      const Nf4Tensor want = quantize_nf4(alone.data(), sizes[j]);
      const Nf4Tensor& got = q.modules[j];
      EXPECT_EQ(got.elements, sizes[j]);
      EXPECT_EQ(got.codes, want.codes);
      EXPECT_EQ(got.absmax_codes, want.absmax_codes);
      EXPECT_EQ(got.absmax_scales, want.absmax_scales);
      EXPECT_EQ(got.offset, want.offset);
      // Its own blocks and groups: ceil(n/64) absmax codes, ceil(blocks/256) scales, counted from its first element.
      EXPECT_EQ(got.blocks(), nf4_blocks(sizes[j]));
      EXPECT_EQ(static_cast<std::int64_t>(got.absmax_scales.size()), nf4_statistics_blocks(sizes[j]));
      // The first-level absmax it dequantises with is its own blocks' max |x| (within the double quantisation's
      // 8-bit error: the constants are not borrowed from a neighbouring module's blocks).
      const std::vector<float> absmax = nf4_block_absmax(alone.data(), sizes[j]), read = got.block_absmax();
      for (std::size_t b = 0; b < absmax.size(); ++b)
        ASSERT_NEAR(read[b], absmax[b], 0.02 * absmax[b] + 1e-3 * spreads[j]) << "block " << b;
      bytes += nf4_tensor_bytes(sizes[j]);
      first += sizes[j];
    }
    // Bytes: each module's codes, absmax codes, scales and offset (what device_allocations counts).
    EXPECT_EQ(q.bytes(), bytes);
    EXPECT_EQ(nf4_module_tensors_bytes(sizes), bytes);
    // One quantize_4bit of the fused tensor is not bitsandbytes' model: one offset for all modules, groups across
    // module boundaries, so other constants and other dequantised weights.
    const Nf4Tensor fused = quantize_nf4(w.data(), static_cast<std::int64_t>(w.size()));
    for (const Nf4Tensor& m : q.modules) EXPECT_NE(m.offset, fused.offset);
    std::vector<float> per_module(w.size()), one(w.size());
    dequantize_nf4(q, per_module.data());
    dequantize_nf4(fused, one.data());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < w.size(); ++i) differ += per_module[i] != one[i];
    EXPECT_GT(differ, w.size() / 4);
  }
}

// The CPU trainer's QLoRA base: the weight its matmuls read is each module's own round trip, from the base it was
// given (set_frozen, as --init-from gives it); GPT-2's fused c_attn stays one tensor.
TEST(LoraTrainer, QloraDequantisesEachModuleOfAFusedWeightFromItsOwnConstants) {
  for (bool llama : {true, false}) {
    SCOPED_TRACE(llama ? "llama" : "gpt2");
    ExecConfig cfg = config_of(llama, true);
    if (llama) cfg.shape = module_test_shape();
    auto qlora = make_cpu_trainer(cfg);
    const ParamLayout full(cfg.shape);
    std::vector<float> values(static_cast<std::size_t>(full.total()));
    full.initialize_range(cfg.seed, 0, full.total(), values.data());
    // Modules of one weight with different spreads (q, k, v; gate, up), written over the initialisation.
    for (std::int64_t l = 0; l < cfg.shape.layers; ++l)
      for (BlockTensor which : {kQkvW, kFcW}) {
        const std::vector<float> w = fused_weight(cfg.shape, which, 17 + static_cast<std::uint64_t>(l),
                                                  which == kQkvW ? std::vector<float>{0.02f, 0.08f, 0.005f}
                                                                 : std::vector<float>{0.03f, 0.01f});
        ASSERT_EQ(static_cast<std::int64_t>(w.size()), full.block(l, which).numel());
        std::copy(w.begin(), w.end(), values.begin() + full.block(l, which).offset);
      }
    qlora->set_frozen(full, [&values](std::int64_t begin, std::int64_t n, float* master, float* m, float* v) {
      if (master) std::copy(values.begin() + begin, values.begin() + begin + n, master);
      if (m) std::fill(m, m + n, 0.0f);
      if (v) std::fill(v, v + n, 0.0f);
    });
    for (std::int64_t l = 0; l < cfg.shape.layers; ++l)
      for (BlockTensor which : {kQkvW, kAttProjW, kFcW, kFcProjW}) {
        const ParamTensor& t = full.block(l, which);
        // Each transformers module alone: quantize_4bit, dequantize_4bit, back to back.
        std::vector<float> want;
        std::int64_t first = t.offset;
        for (std::int64_t n : nf4_module_elements(cfg.shape, which)) {
          std::vector<float> out(static_cast<std::size_t>(n));
          dequantize_nf4(quantize_nf4(values.data() + first, n), out.data());
          want.insert(want.end(), out.begin(), out.end());
          first += n;
        }
        ASSERT_EQ(first, t.offset + t.numel());
        const std::vector<float> got = qlora->dequantized_weight(l, which);
        ASSERT_EQ(got, want) << t.name;
        std::vector<float> one(static_cast<std::size_t>(t.numel()));
        dequantize_nf4(quantize_nf4(values.data() + t.offset, t.numel()), one.data());
        const bool fused_modules = llama && (which == kQkvW || which == kFcW);
        if (fused_modules) EXPECT_NE(got, one) << t.name << ": quantised as one tensor";
        else EXPECT_EQ(got, one) << t.name << ": one module, one tensor";
      }
  }
}

}  // namespace
}  // namespace zeroplan::exec
