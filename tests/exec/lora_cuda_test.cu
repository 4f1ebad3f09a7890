// LoRA and QLoRA on the CUDA trainer (exec/cuda/cuda_trainer.cu) against the CPU LoRA trainer
// (exec/cpu/cpu_trainer.cpp), which tests/exec/lora_trainer_test.cpp holds against the whole model at the merged
// weights. Each test skips without a GPU. Tolerances (relative L2 error ||gpu - cpu|| / ||cpu||, or relative loss):
// - fp32: loss 1e-5, adapter gradients 1e-4 (summation order: cuBLASLt against Eigen, the flash attention);
// - bf16 (the CPU trainer in fp32 from the same bf16-rounded weights): loss 1e-2 relative, adapter gradients 6e-2,
//   the whole-model bf16 steps' tolerances of tests/exec/trainer_cuda_test.cu (2e-2 absolute on a loss near 5.5, 6e-2;
//   8-bit mantissa activations, gradients and x A^T);
// - the NF4 dequantisation kernel: bit for bit (core/nf4_quantization.h dequantize_nf4 in fp32; its rounding to
//   bf16 in bf16);
// - stages 0-3 on one GPU: losses 2e-6, adapters 1e-5 (the same arithmetic; cuBLASLt may pick another algorithm
//   for stage 3's gathered weights in the arena, whose alignment differs from the whole parameters', so not bit for
//   bit);
// - AdamW steps against the CPU: losses 2e-5, gradient norms 1e-4, adapters 1e-4 (as the whole model's steps).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include "core/nf4_quantization.h"
#include "exec/activation_accounting.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_trainer.h"
#include "exec/cuda/nf4.cuh"
#include "exec/init_rng.h"
#include "exec/lora_layout.h"
#include "exec/token_data.h"
#include "exec/trainer.h"
#include "tests/exec/cuda_test_support.cuh"

namespace zeroplan::exec {
namespace {

// cuda_test::rel_err with the sizes checked first: vectors of different sizes are infinitely far apart.
double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  return cuda_test::rel_err(got, ref);
}

float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The first element where two vectors differ in their bits, or "equal".
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " and " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " against " + std::to_string(want[i]);
  return "equal";
}

// Small models of both families, with adapters on every kind of block linear: GPT-2's four (c_attn the whole
// qkv weight, the GELU MLP's c_fc and c_proj), Llama's seven (q, k and v on the fused qkv rows, gate and up on the
// fused gate_up rows). `wide`: head size 64 (the tensor-core attention in 16-bit).
ExecConfig lora_config(bool llama, ExecPrecision precision, bool nf4 = false, bool wide = false) {
  ExecConfig c;
  if (llama) {
    c.shape = wide ? make_llama_shape(256, 128, 2, 2, 1, 192, 64, 10000.0, 1e-5)
                   : make_llama_shape(256, 64, 2, 4, 2, 96, 32, 10000.0, 1e-5);
    c.lora.modules = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                      "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    c.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  } else {
    c.shape = wide ? make_shape(257, 128, 2, 2, 64) : make_shape(257, 64, 2, 2, 32);
    c.lora.modules = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    c.lora.targets = {"c_attn", "c_proj", "c_fc"};
  }
  c.micro_batch = 2;
  c.seq_len = wide ? 64 : 16;
  c.precision = precision;
  c.seed = 11;
  c.optimizer.learning_rate = 1e-2;
  c.zero.deterministic = true;
  c.lora.enabled = true;
  c.lora.rank = 8;
  c.lora.alpha = 32;  // scaling 4: the adapters' share is not small
  c.lora.quantize_nf4 = nf4;
  return c;
}

ExecConfig fp32_of(ExecConfig c) {
  c.precision = ExecPrecision::fp32;
  return c;
}

// The base for both trainers: the whole model's seeded initialisation, rounded to the GPU's precision (the CPU
// trainer then computes in fp32 from the same values).
std::vector<float> base_values(const ExecConfig& c, const ParamLayout& full) {
  std::vector<float> v(static_cast<std::size_t>(full.total()));
  full.initialize_range(c.seed, 0, full.total(), v.data());
  if (c.precision == ExecPrecision::bf16)
    for (float& x : v) x = bf16_round(x);
  return v;
}

ZeroEngine::StateSource source_of(const std::vector<float>& values) {
  return [&values](std::int64_t begin, std::int64_t n, float* master, float* m, float* v) {
    if (master) std::copy(values.begin() + begin, values.begin() + begin + n, master);
    if (m) std::fill(m, m + n, 0.0f);
    if (v) std::fill(v, v + n, 0.0f);
  };
}

// Nonzero adapters (B too, so that A's gradient is not zero), rounded to the GPU's precision.
std::vector<float> adapter_values(const ExecConfig& c, const ParamLayout& adapters) {
  std::vector<float> a(static_cast<std::size_t>(adapters.total()), 0.0f);
  for (const ParamTensor& t : adapters.tensors())
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const float x = 0.05f * hash_normal(99, t.init_index + i);
      a[static_cast<std::size_t>(t.offset + i)] = c.precision == ExecPrecision::bf16 ? bf16_round(x) : x;
    }
  return a;
}

// A CUDA trainer and the CPU trainer (fp32, stage 0) with the same base and adapters.
struct Pair {
  std::unique_ptr<Trainer> gpu, cpu;
};
Pair make_pair_of(const ExecConfig& c) {
  Pair p;
  p.gpu = make_cuda_trainer(c);
  ExecConfig cc = fp32_of(c);
  cc.zero = ZeroSettings{};
  p.cpu = make_cpu_trainer(cc);
  const ParamLayout full(c.shape);
  const std::vector<float> base = base_values(c, full);
  p.gpu->set_frozen(full, source_of(base));
  p.cpu->set_frozen(full, source_of(base));
  const std::vector<float> a = adapter_values(c, p.gpu->layout());
  p.gpu->set_params(a);
  p.cpu->set_params(a);
  return p;
}

// Loss and every adapter tensor's gradient of one micro-batch; returns the worst tensor's relative error.
void expect_step_matches_cpu(const ExecConfig& c, double loss_tol, double grad_tol, const std::string& what) {
  SCOPED_TRACE(what);
  Pair p = make_pair_of(c);
  ASSERT_EQ(p.gpu->layout().total(), p.cpu->layout().total());
  TokenSource data = TokenSource::synthetic(c.shape.vocab, 3);
  const auto b = data.next_batch(c.micro_batch, c.seq_len);
  const double lg = p.gpu->forward_loss(b.inputs, b.targets), lc = p.cpu->forward_loss(b.inputs, b.targets);
  EXPECT_NEAR(lg, lc, loss_tol * lc) << "forward only";
  const double fg = p.gpu->forward_backward(b.inputs, b.targets), fc = p.cpu->forward_backward(b.inputs, b.targets);
  EXPECT_NEAR(fg, fc, loss_tol * fc);
  const std::vector<float> gg = p.gpu->grads(), gc = p.cpu->grads();
  double worst = 0;
  std::string worst_name;
  for (const ParamTensor& t : p.gpu->layout().tensors()) {
    const std::vector<float> x(gg.begin() + t.offset, gg.begin() + t.offset + t.numel());
    const std::vector<float> y(gc.begin() + t.offset, gc.begin() + t.offset + t.numel());
    double norm = 0;
    for (float v : y) norm += static_cast<double>(v) * v;
    ASSERT_GT(norm, 0.0) << t.name << ": the reference gradient is zero (the test would prove nothing)";
    const double e = rel_err(x, y);
    if (e > worst) {
      worst = e;
      worst_name = t.name;
    }
  }
  EXPECT_LT(worst, grad_tol) << worst_name;
}

// ---------------------------------------------------------------------------------------------------------------
// NF4: the dequantisation kernel against the CPU's dequantize_nf4, bit for bit.
// ---------------------------------------------------------------------------------------------------------------
TEST(LoraCuda, Nf4DequantizationKernelEqualsTheCpuBitForBit) {
  REQUIRE_GPU();
  // Odd sizes, a partial last block of 64, more than 256 blocks (several fp32 scales), weights of two spreads.
  for (const auto& [n, spread] : std::vector<std::pair<std::int64_t, float>>{
           {64, 0.02f}, {1001, 1.0f}, {256 * 64 * 3 + 37, 0.02f}, {4096 * 96, 0.5f}}) {
    SCOPED_TRACE(std::to_string(n) + " elements");
    std::mt19937 rng(static_cast<unsigned>(n));
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> w(static_cast<std::size_t>(n));
    for (float& x : w) x = normal(rng);
    w[3] = 0.0f;  // a zero and a block's extreme
    w[10] = 8.0f * spread;
    const Nf4Tensor q = quantize_nf4(w.data(), n);
    std::vector<float> want(static_cast<std::size_t>(n));
    dequantize_nf4(q, want.data());
    // Codes right after the offset, off an 8-byte boundary (the one-byte-per-thread kernel), and on a 16-byte one
    // (the 16-element chunks' kernel, where n is a multiple of 16).
    for (const bool aligned_codes : {false, true}) {
      SCOPED_TRACE(aligned_codes ? "codes 16-byte aligned" : "codes off an 8-byte boundary");
      // The device copy as the trainer holds it: scales and offset (fp32), packed codes, absmax codes.
      const std::size_t scale_bytes = q.absmax_scales.size() * sizeof(float);
      const std::size_t codes_at = aligned_codes ? (scale_bytes + sizeof(float) + 15) / 16 * 16
                                                 : scale_bytes + sizeof(float) + (scale_bytes % 8 == 0 ? 0 : 4);
      void* store = nullptr;
      CUDA_CHECK(cudaMalloc(&store, codes_at + q.codes.size() + q.absmax_codes.size()));
      auto* bytes = static_cast<unsigned char*>(store);
      CUDA_CHECK(cudaMemcpy(bytes, q.absmax_scales.data(), scale_bytes, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(bytes + scale_bytes, &q.offset, sizeof(float), cudaMemcpyHostToDevice));
      std::uint8_t* codes = bytes + codes_at;
      CUDA_CHECK(cudaMemcpy(codes, q.codes.data(), q.codes.size(), cudaMemcpyHostToDevice));
      CUDA_CHECK(
          cudaMemcpy(codes + q.codes.size(), q.absmax_codes.data(), q.absmax_codes.size(), cudaMemcpyHostToDevice));
      cuda::Nf4DeviceTensor t;
      t.elements = n;
      t.absmax_scales = reinterpret_cast<const float*>(bytes);
      t.offset = reinterpret_cast<const float*>(bytes + scale_bytes);
      t.codes = codes;
      t.absmax_codes = codes + q.codes.size();
      float* out32 = nullptr;
      __nv_bfloat16* out16 = nullptr;
      CUDA_CHECK(cudaMalloc(&out32, n * sizeof(float)));
      CUDA_CHECK(cudaMalloc(&out16, n * sizeof(__nv_bfloat16)));
      CUDA_CHECK(cudaMemset(out32, 0x7f, n * sizeof(float)));  // unwritten elements show
      cuda::dequantize_nf4<float>(out32, t, nullptr);
      cuda::dequantize_nf4<__nv_bfloat16>(out16, t, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> got(static_cast<std::size_t>(n));
      std::vector<__nv_bfloat16> got16(static_cast<std::size_t>(n));
      CUDA_CHECK(cudaMemcpy(got.data(), out32, n * sizeof(float), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(got16.data(), out16, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(out32));
      CUDA_CHECK(cudaFree(out16));
      CUDA_CHECK(cudaFree(store));
      EXPECT_EQ(first_difference(got, want), "equal") << "fp32";
      std::vector<float> got_bf16(got16.size()), want_bf16(want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        got_bf16[i] = __bfloat162float(got16[i]);
        want_bf16[i] = bf16_round(want[i]);
      }
      EXPECT_EQ(first_difference(got_bf16, want_bf16), "equal") << "bf16";
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// A step against the CPU LoRA trainer.
// ---------------------------------------------------------------------------------------------------------------
TEST(LoraCuda, Fp32StepEqualsTheCpuLoraTrainer) {
  REQUIRE_GPU();
  for (bool llama : {false, true})
    for (ExecRecompute rec : {ExecRecompute::none, ExecRecompute::selective, ExecRecompute::full}) {
      ExecConfig c = lora_config(llama, ExecPrecision::fp32);
      c.recompute = rec;
      expect_step_matches_cpu(c, 1e-5, 1e-4,
                              std::string(llama ? "llama" : "gpt2") + ", recompute " + std::to_string(static_cast<int>(rec)));
    }
}

// QLoRA in fp32: the GPU dequantises the same codes to the same fp32 weights as the CPU, so the step is fp32 LoRA's.
TEST(LoraCuda, Fp32QloraStepEqualsTheCpuQloraTrainer) {
  REQUIRE_GPU();
  for (bool llama : {false, true}) {
    const ExecConfig c = lora_config(llama, ExecPrecision::fp32, /*nf4=*/true);
    expect_step_matches_cpu(c, 1e-5, 1e-4, llama ? "llama" : "gpt2");
    Pair p = make_pair_of(c);
    for (std::int64_t l = 0; l < c.shape.layers; ++l)
      for (BlockTensor w : {kQkvW, kAttProjW, kFcW, kFcProjW})
        EXPECT_EQ(first_difference(p.gpu->dequantized_weight(l, w), p.cpu->dequantized_weight(l, w)), "equal")
            << "layer " << l << ", weight " << static_cast<int>(w);
  }
}

TEST(LoraCuda, Bf16StepFollowsTheCpuLoraTrainer) {
  REQUIRE_GPU();
  for (bool llama : {false, true})
    for (bool nf4 : {false, true})
      expect_step_matches_cpu(lora_config(llama, ExecPrecision::bf16, nf4, /*wide=*/true), 1e-2, 6e-2,
                              std::string(llama ? "llama" : "gpt2") + (nf4 ? ", nf4" : ""));
}

// bf16 QLoRA quantises the base as the bf16 model holds it and dequantises to bf16: each weight the GEMMs read is
// the bf16 rounding of the CPU's dequantisation of the bf16 weight's codes.
TEST(LoraCuda, Bf16QloraDequantisesTheBf16WeightsCodes) {
  REQUIRE_GPU();
  const ExecConfig c = lora_config(true, ExecPrecision::bf16, /*nf4=*/true, /*wide=*/true);
  auto gpu = make_cuda_trainer(c);
  const ParamLayout full(c.shape);
  const std::vector<float> base = base_values(c, full);  // the seeded initialisation, rounded to bf16
  for (std::int64_t l = 0; l < c.shape.layers; ++l)
    for (BlockTensor w : {kQkvW, kAttProjW, kFcW, kFcProjW}) {
      const ParamTensor& t = full.block(l, w);
      // Module by module, as bitsandbytes holds Llama's q/k/v and gate/up (each its own Params4bit).
      const Nf4ModuleTensors q = quantize_nf4_modules(base.data() + t.offset, nf4_module_elements(c.shape, w));
      std::vector<float> want(static_cast<std::size_t>(t.numel()));
      dequantize_nf4(q, want.data());
      for (float& x : want) x = bf16_round(x);
      EXPECT_EQ(first_difference(gpu->dequantized_weight(l, w), want), "equal") << t.name;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Training: only the adapters change, every stage on one GPU the same.
// ---------------------------------------------------------------------------------------------------------------
TEST(LoraCuda, OnlyTheAdaptersTrainAndTheBaseStaysBitForBit) {
  REQUIRE_GPU();
  for (ExecPrecision precision : {ExecPrecision::fp32, ExecPrecision::bf16})
    for (int stage = 0; stage <= 3; ++stage)
      for (bool nf4 : {false, true}) {
        SCOPED_TRACE(to_string(precision) + ", stage " + std::to_string(stage) + (nf4 ? ", nf4" : ""));
        ExecConfig c = lora_config(true, precision, nf4, /*wide=*/true);
        c.zero.stage = stage;
        c.zero.param_persistence_threshold = 100;  // stage 3 gathers the base's weights and the adapters
        auto gpu = make_cuda_trainer(c);
        ASSERT_NE(gpu->frozen_layout(), nullptr);
        ASSERT_TRUE(gpu->layout().is_adapters());
        const std::vector<float> base0 = gpu->frozen_params(), p0 = gpu->params();
        std::vector<std::vector<float>> weights0;
        if (nf4)
          for (BlockTensor w : {kQkvW, kFcProjW}) weights0.push_back(gpu->dequantized_weight(1, w));
        // B starts at zero (PEFT's init): the adapted model is the base, and A's first gradient is zero.
        for (const ParamTensor& t : gpu->layout().tensors())
          if (t.name.find("lora_B") != std::string::npos)
            for (std::int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(p0[t.offset + i], 0.0f) << t.name;
        TokenSource data = TokenSource::synthetic(c.shape.vocab, 4);
        const auto b = data.next_batch(c.micro_batch, c.seq_len);
        double first = 0, last = 0;
        for (int step = 0; step < 8; ++step) {  // one batch again and again: the adapters fit it
          const StepResult r = gpu->step(b.inputs, b.targets);
          if (step == 0) first = r.loss;
          last = r.loss;
          EXPECT_TRUE(std::isfinite(r.loss));
          EXPECT_GT(r.grad_norm, 0.0);
        }
        EXPECT_EQ(first_difference(gpu->frozen_params(), base0), "equal") << "the frozen base changed";
        if (nf4) {
          int k = 0;
          for (BlockTensor w : {kQkvW, kFcProjW})
            EXPECT_EQ(first_difference(gpu->dequantized_weight(1, w), weights0[k++]), "equal") << "NF4 codes changed";
        }
        EXPECT_NE(gpu->params(), p0);
        EXPECT_LT(last, first);
      }
}

// Stages 0-3 on one GPU, with gradient accumulation: the same losses, adapters and base.
TEST(LoraCuda, EveryStageOnOneGpuGivesTheSameRun) {
  REQUIRE_GPU();
  for (bool nf4 : {false, true}) {
    std::vector<double> losses0;
    std::vector<float> params0;
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (nf4 ? ", nf4" : ""));
      ExecConfig c = lora_config(true, ExecPrecision::fp32, nf4);
      c.grad_accum = 2;
      c.zero.stage = stage;
      c.zero.reduce_bucket_elements = 3000;  // several buckets of adapters
      c.zero.param_persistence_threshold = 100;
      c.zero.prefetch_bucket_elements = 5000;
      auto gpu = make_cuda_trainer(c);
      gpu->set_params(adapter_values(c, gpu->layout()));
      TokenSource data = TokenSource::synthetic(c.shape.vocab, 5);
      std::vector<double> losses;
      for (int s = 0; s < 3; ++s) {
        const auto b = data.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        losses.push_back(gpu->step(b.inputs, b.targets).loss);
      }
      const std::vector<float> params = gpu->params();
      if (stage == 0) {
        losses0 = losses;
        params0 = params;
        continue;
      }
      for (std::size_t s = 0; s < losses.size(); ++s) EXPECT_NEAR(losses[s], losses0[s], 2e-6 * losses0[s]) << "step " << s;
      EXPECT_LT(rel_err(params, params0), 1e-5);
    }
  }
}

// Steps with gradient accumulation against the CPU trainer (AdamW on the adapters, accumulation semantics of the
// adapters' GEMMs: written on the first micro-step, added on the next).
TEST(LoraCuda, Fp32AdamWStepsWithAccumulationMatchTheCpu) {
  REQUIRE_GPU();
  for (int stage : {0, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    ExecConfig c = lora_config(false, ExecPrecision::fp32);
    c.grad_accum = 2;
    c.zero.stage = stage;
    c.optimizer.learning_rate = 1e-3;
    Pair p = make_pair_of(c);
    TokenSource data = TokenSource::synthetic(c.shape.vocab, 6);
    for (int s = 0; s < 3; ++s) {
      const auto b = data.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
      const StepResult rg = p.gpu->step(b.inputs, b.targets), rc = p.cpu->step(b.inputs, b.targets);
      EXPECT_NEAR(rg.loss, rc.loss, 2e-5 * rc.loss) << "step " << s;
      EXPECT_NEAR(rg.grad_norm, rc.grad_norm, 1e-4 * rc.grad_norm) << "step " << s;
    }
    EXPECT_LT(rel_err(p.gpu->params(), p.cpu->params()), 1e-4);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Memory: what the allocator saw, per component, is exec/activation_accounting.h device_allocations' list.
// ---------------------------------------------------------------------------------------------------------------
TEST(LoraCuda, AllocatesWhatTheListCounts) {
  REQUIRE_GPU();
  struct Case {
    ExecPrecision precision;
    int stage;
    bool nf4;
    ExecRecompute recompute;
    bool fp32_accumulation;
  };
  const std::vector<Case> cases = {
      {ExecPrecision::bf16, 0, false, ExecRecompute::none, false},
      {ExecPrecision::bf16, 1, true, ExecRecompute::selective, true},
      {ExecPrecision::bf16, 2, false, ExecRecompute::full, false},
      {ExecPrecision::bf16, 3, false, ExecRecompute::none, false},
      {ExecPrecision::bf16, 3, true, ExecRecompute::full, false},
      {ExecPrecision::fp32, 0, true, ExecRecompute::none, false},
      {ExecPrecision::fp32, 2, true, ExecRecompute::selective, false},
  };
  for (bool llama : {false, true})
    for (const Case& k : cases) {
      ExecConfig c = lora_config(llama, k.precision, k.nf4, /*wide=*/true);
      c.zero.stage = k.stage;
      c.recompute = k.recompute;
      c.grad_accum = 2;
      c.zero.fp32_grad_accumulation = k.fp32_accumulation;
      c.zero.reduce_bucket_elements = 3000;
      c.zero.param_persistence_threshold = 100;
      const std::string what = std::string(llama ? "llama" : "gpt2") + ", " + to_string(k.precision) + ", stage " +
                               std::to_string(k.stage) + (k.nf4 ? ", nf4" : "") + ", recompute " +
                               std::to_string(static_cast<int>(k.recompute));
      auto gpu = make_cuda_trainer(c);
      TokenSource data = TokenSource::synthetic(c.shape.vocab, 7);
      const auto b = data.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
      gpu->step(b.inputs, b.targets);
      std::map<std::string, std::int64_t> planned;
      for (const DeviceAllocation& a : device_allocations(c, 1)) planned[a.component] += a.bytes;
      const MemoryReport m = gpu->memory();
      std::int64_t sum = 0;
      for (const auto& [component, bytes] : m.peak_by_component) {
        if (component == "transfer") continue;  // freed before training (device_allocations leaves it out)
        EXPECT_EQ(bytes, planned[component]) << component << ": " << what;
        sum += bytes;
      }
      for (const auto& [component, bytes] : planned) EXPECT_EQ(m.component(component), bytes) << component << ": " << what;
      if (m.component("transfer") == 0) EXPECT_EQ(m.peak_total, sum) << what;
      // With LoRA the closed-form figures are the list's at stage 0.
      if (k.stage == 0) {
        const ExpectedMemory e = expected_device_memory(c);
        for (const auto& [component, bytes] : e.components()) EXPECT_EQ(m.component(component), bytes) << component;
      }
    }
}

}  // namespace
}  // namespace zeroplan::exec
