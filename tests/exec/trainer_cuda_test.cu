// GPU tests: a whole training step of a small model against the CPU trainer (GPT-2's and Llama's pipelines), then
// the ZeRO stages, offload, loss scaling, restored states and the allocator on one GPU (each CUDA kernel alone:
// tests/exec/kernels_cuda_test.cu). Each test skips without a GPU. Tolerances (relative L2 error
// ||gpu - ref|| / ||ref||): whole-step bf16 gradients 6e-2 (two layers of bf16 activations and bf16 gradient
// storage).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "exec/activation_accounting.h"
#include "exec/comm/nccl_communicator.h"
#include "exec/cuda/cuda_trainer.h"
#include "exec/cuda/device_allocator.h"
#include "exec/token_data.h"
#include "exec/trainer.h"
#include "tests/exec/cuda_test_support.cuh"

using namespace zeroplan::exec;
using namespace zeroplan::exec::cuda_test;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Whole step against the CPU trainer.
// ---------------------------------------------------------------------------------------------------------
ExecConfig small_model(ExecPrecision precision) {
  ExecConfig c;
  c.shape = make_shape(257, 128, 2, 2, 256);  // head size 64: the tensor-core attention in 16-bit
  c.micro_batch = 2;
  c.seq_len = 192;
  c.precision = precision;
  c.optimizer.learning_rate = 1e-3;
  c.optimizer.weight_decay = 0.1;
  c.seed = 5;
  return c;
}

// small_model at stage 3 with several buckets, LayerNorm and biases persistent, two micro-steps and the ordered
// reductions (--deterministic), so that two ways of running it can be compared bit for bit.
ExecConfig small_stage3_model(ExecPrecision precision) {
  ExecConfig c = small_model(precision);
  c.grad_accum = 2;
  c.zero.stage = 3;
  c.zero.reduce_bucket_elements = 40000;
  c.zero.param_persistence_threshold = 1000;
  c.zero.deterministic = true;
  return c;
}

struct StepComparison {
  double loss_gpu, loss_cpu, logits_err, worst_grad_err;
  std::string worst_grad;
};

StepComparison compare_step(ExecConfig c) {
  auto gpu = make_cuda_trainer(c);
  ExecConfig cc = c;
  cc.precision = ExecPrecision::fp32;
  auto cpu = make_cpu_trainer(cc);
  auto params = gpu->params();
  cpu->set_params(params);  // the same (rounded) starting point
  auto src = TokenSource::synthetic(c.shape.vocab, 9);
  const auto b = src.next_batch(c.micro_batch, c.seq_len);
  StepComparison r;
  r.loss_gpu = gpu->forward_loss(b.inputs, b.targets);
  r.loss_cpu = cpu->forward_loss(b.inputs, b.targets);
  r.logits_err = rel_err(gpu->logits(), cpu->logits());
  gpu->forward_backward(b.inputs, b.targets);
  cpu->forward_backward(b.inputs, b.targets);
  const auto gg = gpu->grads(), gc = cpu->grads();
  r.worst_grad_err = 0;
  for (const auto& t : gpu->layout().tensors()) {
    const std::vector<float> a(gg.begin() + t.offset, gg.begin() + t.offset + t.numel());
    const std::vector<float> e(gc.begin() + t.offset, gc.begin() + t.offset + t.numel());
    const double err = rel_err(a, e);
    if (err > r.worst_grad_err) {
      r.worst_grad_err = err;
      r.worst_grad = t.name;
    }
  }
  return r;
}

TEST(CudaTrainer, Fp32StepMatchesCpuReference) {
  REQUIRE_GPU();
  const auto r = compare_step(small_model(ExecPrecision::fp32));
  EXPECT_NEAR(r.loss_gpu, r.loss_cpu, 1e-5);
  EXPECT_LT(r.logits_err, 1e-5);
  EXPECT_LT(r.worst_grad_err, 1e-4) << r.worst_grad;
}

TEST(CudaTrainer, Bf16StepMatchesCpuReference) {
  REQUIRE_GPU();
  const auto r = compare_step(small_model(ExecPrecision::bf16));
  EXPECT_NEAR(r.loss_gpu, r.loss_cpu, 2e-2);
  EXPECT_LT(r.logits_err, 2e-2);
  EXPECT_LT(r.worst_grad_err, 6e-2) << r.worst_grad;
}

// Head size 128 (the tensor-core attention's second instantiation) in a whole training step.
TEST(CudaTrainer, Bf16StepWithHeadSize128MatchesCpuReference) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::bf16);
  c.shape = make_shape(257, 256, 2, 2, 256);
  const auto r = compare_step(c);
  EXPECT_NEAR(r.loss_gpu, r.loss_cpu, 2e-2);
  EXPECT_LT(r.logits_err, 2e-2);
  EXPECT_LT(r.worst_grad_err, 6e-2) << r.worst_grad;
}

TEST(CudaTrainer, Fp16StepMatchesCpuReference) {
  REQUIRE_GPU();
  const auto r = compare_step(small_model(ExecPrecision::fp16));
  EXPECT_NEAR(r.loss_gpu, r.loss_cpu, 1e-2);
  EXPECT_LT(r.logits_err, 1e-2);
  EXPECT_LT(r.worst_grad_err, 3e-2) << r.worst_grad;
}

// The Llama configuration of the same pipeline: RMSNorm, RoPE, SwiGLU, grouped-query attention, untied head.
// Head size 64 (GQA 4/2, q/k/v biases as Qwen2's) and head size 128 with Llama 3's rope scaling.
ExecConfig small_llama(ExecPrecision precision, std::int64_t head_size) {
  ExecConfig c = small_model(precision);
  const std::int64_t heads = 4, hidden = heads * head_size;
  c.shape = make_llama_shape(256, hidden, 2, heads, 2, 3 * hidden / 2 / 8 * 8, 256, 10000.0, 1e-5);
  if (head_size == 64) c.shape.qkv_bias = true;
  else c.shape.rope_scaling = RopeScaling{true, 8.0, 1.0, 4.0, 64};  // wavelengths past 64 positions are scaled
  return c;
}

// Tolerances as for GPT-2's steps above: fp32 1e-5 (loss, logits) and 1e-4 (gradients); bf16 2e-2 and 6e-2.
void expect_llama_step_matches_cpu(ExecPrecision precision, double loss_tol, double logits_tol, double grad_tol) {
  for (std::int64_t hs : {64, 128}) {
    const auto r = compare_step(small_llama(precision, hs));
    EXPECT_NEAR(r.loss_gpu, r.loss_cpu, loss_tol) << "head size " << hs;
    EXPECT_LT(r.logits_err, logits_tol) << "head size " << hs;
    EXPECT_LT(r.worst_grad_err, grad_tol) << r.worst_grad << ", head size " << hs;
  }
}

TEST(CudaTrainer, LlamaFp32StepMatchesCpuReference) {
  REQUIRE_GPU();
  expect_llama_step_matches_cpu(ExecPrecision::fp32, 1e-5, 1e-5, 1e-4);
}

TEST(CudaTrainer, LlamaBf16StepMatchesCpuReference) {
  REQUIRE_GPU();
  expect_llama_step_matches_cpu(ExecPrecision::bf16, 2e-2, 2e-2, 6e-2);
}

// Three AdamW steps with gradient accumulation against the CPU trainer, which keeps every tensor. Covers the
// recompute paths: full (each block's forward again) and selective (the norm and MLP activation outputs rebuilt in
// the backward working set); for Llama also no recompute (SwiGLU's backward in place over gate and up, the untied
// token embedding's gradient started at 0 on the first micro-step).
void expect_adamw_steps_match_cpu(const ExecConfig& base, ExecRecompute rec) {
  ExecConfig c = base;
  c.recompute = rec;
  c.grad_accum = 2;
  auto gpu = make_cuda_trainer(c);
  auto cpu = make_cpu_trainer(c);
  auto src = TokenSource::synthetic(c.shape.vocab, 4);
  for (int s = 0; s < 3; ++s) {
    const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
    const auto rg = gpu->step(b.inputs, b.targets);
    const auto rc = cpu->step(b.inputs, b.targets);
    EXPECT_NEAR(rg.loss, rc.loss, 1e-4) << "step " << s << ", recompute " << static_cast<int>(rec);
    EXPECT_NEAR(rg.grad_norm, rc.grad_norm, 1e-3 * rc.grad_norm) << "step " << s;
  }
  EXPECT_LT(rel_err(gpu->params(), cpu->params()), 1e-4) << "recompute " << static_cast<int>(rec);
}

TEST(CudaTrainer, LlamaParamsAfterAdamWStepsMatchCpu) {
  REQUIRE_GPU();
  for (auto rec : {ExecRecompute::none, ExecRecompute::full, ExecRecompute::selective})
    expect_adamw_steps_match_cpu(small_llama(ExecPrecision::fp32, 64), rec);
}

TEST(CudaTrainer, ParamsAfterAdamWStepsMatchCpu) {
  REQUIRE_GPU();
  for (auto rec : {ExecRecompute::full, ExecRecompute::selective})
    expect_adamw_steps_match_cpu(small_model(ExecPrecision::fp32), rec);
}

// bf16 with selective recompute against the same run keeping every tensor: the rebuilt GELU output is rounded from
// the stored bf16 pre-GELU value (the GEMM epilogue rounds it from fp32), a bf16 rounding difference in the FC
// projection's weight gradient, so the tolerance is bf16's (2^-8 relative) on the losses over a few steps.
TEST(CudaTrainer, SelectiveRecomputeTrainsAsKeepingEveryTensor) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::bf16);
  auto keep = make_cuda_trainer(c);
  c.recompute = ExecRecompute::selective;
  auto rebuild = make_cuda_trainer(c);
  auto src = TokenSource::synthetic(c.shape.vocab, 4);
  for (int s = 0; s < 4; ++s) {
    const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
    const auto rk = keep->step(b.inputs, b.targets);
    const auto rr = rebuild->step(b.inputs, b.targets);
    EXPECT_NEAR(rr.loss, rk.loss, 4e-3 * rk.loss) << "step " << s;
  }
  EXPECT_LT(rel_err(rebuild->params(), keep->params()), 1e-2);
}

// Every ZeRO stage on one GPU (the engine's stage-3 gathers, prefetch and arena included) gives the fp32 CPU
// reference's losses and parameters over the same steps.
TEST(CudaTrainer, EveryStageOnOneGpuMatchesCpu) {
  REQUIRE_GPU();
  for (int stage = 0; stage <= 3; ++stage) {
    ExecConfig c = small_model(ExecPrecision::fp32);
    c.grad_accum = 2;
    c.zero.stage = stage;
    c.zero.reduce_bucket_elements = 40000;  // several buckets
    c.zero.param_persistence_threshold = 1000;  // LayerNorm and biases persistent, weights gathered
    c.zero.prefetch_bucket_elements = 50000;
    c.zero.max_reuse_distance = 0;
    auto gpu = make_cuda_trainer(c);
    ExecConfig cc = c;
    cc.zero.stage = 0;
    auto cpu = make_cpu_trainer(cc);
    auto src = TokenSource::synthetic(c.shape.vocab, 4);
    for (int s = 0; s < 3; ++s) {
      const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
      const auto rg = gpu->step(b.inputs, b.targets);
      const auto rc = cpu->step(b.inputs, b.targets);
      EXPECT_NEAR(rg.loss, rc.loss, 1e-4) << "stage " << stage << ", step " << s;
    }
    EXPECT_LT(rel_err(gpu->params(), cpu->params()), 1e-4) << "stage " << stage;
  }
}

// A trainer's states read and restored into a fresh trainer (the checkpoint path) continue the same run, bit
// for bit on the GPU too: the 16-bit parameters are rebuilt as the rounding of the fp32 master.
TEST(CudaTrainer, RestoredStateContinuesBitForBit) {
  REQUIRE_GPU();
  for (int stage : {0, 3}) {
    ExecConfig c = small_model(ExecPrecision::bf16);
    c.zero.stage = stage;
    c.zero.param_persistence_threshold = 1000;
    // Bit for bit needs the ordered reductions: without them two uninterrupted runs differ in the last bits too.
    c.zero.deterministic = true;
    auto a = make_cuda_trainer(c);
    auto src = TokenSource::synthetic(c.shape.vocab, 6);
    std::vector<TokenBatch> batches;
    for (int s = 0; s < 4; ++s) batches.push_back(src.next_batch(c.micro_batch, c.seq_len));
    for (int s = 0; s < 2; ++s) a->step(batches[s].inputs, batches[s].targets);
    std::vector<float> master, m, v;
    a->read_owned_state(master, m, v);
    const auto ranges = a->owned_ranges();
    auto b = make_cuda_trainer(c);
    b->restore_state(
        [&](std::int64_t begin, std::int64_t n, float* pm, float* pmm, float* pv) {
          // one rank owns everything: owned ranges tile the flat buffer in bucket order
          std::int64_t at = 0;
          for (const auto& [lo, len] : ranges) {
            const std::int64_t x = std::max(begin, lo), y = std::min(begin + n, lo + len);
            for (std::int64_t i = x; i < y; ++i) {
              if (pm) pm[i - begin] = master[at + (i - lo)];
              if (pmm) pmm[i - begin] = m[at + (i - lo)];
              if (pv) pv[i - begin] = v[at + (i - lo)];
            }
            at += len;
          }
        },
        a->optimizer_step(), a->loss_scaler_state());
    for (int s = 2; s < 4; ++s) {
      const auto ra = a->step(batches[s].inputs, batches[s].targets);
      const auto rb = b->step(batches[s].inputs, batches[s].targets);
      EXPECT_EQ(ra.loss, rb.loss) << "stage " << stage << ", step " << s;
    }
    EXPECT_EQ(a->params(), b->params()) << "stage " << stage;
  }
}

// --deterministic: two runs of the same steps give the same bits (bf16, accumulation, several buckets).
TEST(CudaTrainer, DeterministicRunsRepeatBitForBit) {
  REQUIRE_GPU();
  for (int stage : {0, 2}) {
    ExecConfig c = small_model(ExecPrecision::bf16);
    c.grad_accum = 2;
    c.zero.stage = stage;
    c.zero.deterministic = true;
    std::vector<float> params[2];
    std::vector<double> losses[2];
    for (int run = 0; run < 2; ++run) {
      auto gpu = make_cuda_trainer(c);
      auto src = TokenSource::synthetic(c.shape.vocab, 8);
      for (int s = 0; s < 3; ++s) {
        const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        losses[run].push_back(gpu->step(b.inputs, b.targets).loss);
      }
      params[run] = gpu->params();
    }
    EXPECT_EQ(losses[0], losses[1]) << "stage " << stage;
    EXPECT_EQ(params[0], params[1]) << "stage " << stage;
  }
}

// data_types.grad_accum_dtype fp32 (bf16 model, 4 micro-steps): the step's gradients are the exact sum of the
// four micro-steps' bf16 gradients, up to fp32 rounding (1e-6 relative). The reference sums, in double on the
// host, the gradients of the same micro-batches taken one at a time by a one-micro-step trainer (its loss gradient
// is 4x the step's, a power of two: the bf16 micro-step gradients are the same up to that factor). Accumulating in
// bf16 instead rounds every partial sum to 8 bits (error ~1e-3), which the second half checks the test can see.
// At stages 0-1 the micro-step gradients are added into fp32 gradients; from stage 2 each reduced chunk into the
// fp32 partition, with 16-bit and with fp32 reductions.
TEST(CudaTrainer, Fp32GradientAccumulationIsTheExactSumOfTheMicroSteps) {
  REQUIRE_GPU();
  constexpr int kMicroSteps = 4;
  for (int stage = 0; stage <= 3; ++stage) {
    for (const bool fp32_communication : {false, true}) {
      if (fp32_communication && stage < 2) continue;  // one rank reduces nothing at stages 0-1
      ExecConfig one = small_model(ExecPrecision::bf16);
      one.zero.stage = stage;
      one.zero.deterministic = true;  // fixed-order column sums: the micro-step gradients repeat bit for bit
      one.zero.reduce_bucket_elements = 40000;
      one.zero.param_persistence_threshold = 1000;
      one.zero.fp32_grad_accumulation = true;
      one.zero.fp32_communication = fp32_communication;
      auto single = make_cuda_trainer(one);
      auto src = TokenSource::synthetic(one.shape.vocab, 12);
      const auto batch = src.next_batch(one.micro_batch * kMicroSteps, one.seq_len);
      const std::size_t bt = static_cast<std::size_t>(one.micro_batch * one.seq_len);
      std::vector<double> sum(single->params().size(), 0.0);
      for (int k = 0; k < kMicroSteps; ++k) {
        const std::vector<std::int32_t> in(batch.inputs.begin() + k * bt, batch.inputs.begin() + (k + 1) * bt);
        const std::vector<std::int32_t> tg(batch.targets.begin() + k * bt, batch.targets.begin() + (k + 1) * bt);
        single->forward_backward(in, tg);
        const auto g = single->grads();
        for (std::size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
      }
      std::vector<float> reference(sum.size());
      for (std::size_t i = 0; i < sum.size(); ++i) reference[i] = static_cast<float>(sum[i] / kMicroSteps);
      double err[2];
      for (const bool fp32_accumulation : {true, false}) {
        ExecConfig c = one;
        c.grad_accum = kMicroSteps;
        c.zero.fp32_grad_accumulation = fp32_accumulation;
        auto trainer = make_cuda_trainer(c);
        trainer->step(batch.inputs, batch.targets);
        err[fp32_accumulation ? 0 : 1] = rel_err(trainer->grads(), reference);
      }
      const std::string where = "stage " + std::to_string(stage) + (fp32_communication ? ", fp32 reductions" : "");
      EXPECT_LT(err[0], 1e-6) << where;
      EXPECT_GT(err[1], 1e-4) << where << " (bf16 accumulation)";
    }
  }
}

TEST(CudaTrainer, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::fp16);
  c.loss_scale.initial_scale_power = 40;  // 2^40 x gradients overflows fp16 (max 65504)
  c.loss_scale.hysteresis = 1;
  auto gpu = make_cuda_trainer(c);
  const auto before = gpu->params();
  auto src = TokenSource::synthetic(c.shape.vocab, 2);
  const auto b = src.next_batch(c.micro_batch, c.seq_len);
  const auto r = gpu->step(b.inputs, b.targets);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(r.loss_scale, std::pow(2.0, 40));
  EXPECT_EQ(gpu->params(), before);
  int steps = 1;
  StepResult last = r;
  while (last.skipped && steps < 40) {
    last = gpu->step(b.inputs, b.targets);
    ++steps;
  }
  EXPECT_FALSE(last.skipped);
  EXPECT_LT(last.loss_scale, std::pow(2.0, 20));
  EXPECT_TRUE(std::isfinite(last.grad_norm));
}

// ZeRO-Offload on one GPU (stages 1-3, every precision): the CPU AdamW on the host against the GPU's AdamW
// kernel on the device, over the same steps. The two compute the same update with different operation order
// (the GPU kernel contracts multiply-adds), so the fp32 master differs in its last bits and a 16-bit parameter
// can round the other way: tolerances are relative L2 over all parameters and the master, 1e-5 in fp32 (a few
// ulps after 4 steps) and 2e-3 in bf16/fp16 (an occasional flipped 16-bit rounding, 2^-8 relative, on ~1e-4 of
// the elements reaching the loss); losses within 1e-4 (fp32) and 2e-3 relative (16-bit). sub_group_size 30000
// splits buckets into several pieces.
TEST(CudaTrainer, OptimizerOffloadMatchesTheDeviceOptimizer) {
  REQUIRE_GPU();
  for (ExecPrecision precision : {ExecPrecision::fp32, ExecPrecision::bf16, ExecPrecision::fp16})
    for (int stage = 1; stage <= 3; ++stage) {
      const std::string what = to_string(precision) + ", stage " + std::to_string(stage);
      ExecConfig c = small_model(precision);
      c.grad_accum = 2;
      c.zero.stage = stage;
      c.zero.reduce_bucket_elements = 40000;
      c.zero.param_persistence_threshold = 1000;
      c.optimizer.grad_clip = 0.5;
      ExecConfig o = c;
      o.zero.offload_optimizer = true;
      o.zero.sub_group_elements = 30000;
      o.zero.cpu_optimizer_threads = 4;
      auto dev = make_cuda_trainer(c);
      auto off = make_cuda_trainer(o);
      const double tol = precision == ExecPrecision::fp32 ? 1e-5 : 2e-3;
      auto src = TokenSource::synthetic(c.shape.vocab, 12);
      for (int s = 0; s < 4; ++s) {
        const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        const auto rd = dev->step(b.inputs, b.targets);
        const auto ro = off->step(b.inputs, b.targets);
        EXPECT_EQ(rd.skipped, ro.skipped) << what << ", step " << s;
        EXPECT_NEAR(ro.loss, rd.loss, (precision == ExecPrecision::fp32 ? 1e-4 : 2e-3) * std::fabs(rd.loss))
            << what << ", step " << s;
        EXPECT_GT(ro.times.offload.pieces, 1) << what;
        EXPECT_GT(ro.times.offload.to_host_s, 0) << what;
        // Stages 1-2 update during the next step's forward (the deferred update): step 0 copies nothing back.
        if (s > 0 || stage == 3) EXPECT_GT(ro.times.offload.to_device_s, 0) << what << ", step " << s;
      }
      EXPECT_LT(rel_err(off->params(), dev->params()), tol) << what;
      std::vector<float> md, mo, m1, m2, v1, v2;
      dev->read_owned_state(md, m1, v1);
      off->read_owned_state(mo, m2, v2);
      EXPECT_LT(rel_err(mo, md), tol) << what << ": master";
      EXPECT_LT(rel_err(m2, m1), 10 * tol) << what << ": AdamW momentum";
      // Nothing of the optimizer on the GPU; on the host the master, the moments, the gradients and (16-bit)
      // the copy back.
      const MemoryReport mem = off->memory();
      EXPECT_EQ(mem.component("master_params"), 0) << what;
      EXPECT_EQ(mem.component("optimizer_states"), 0) << what;
      const std::int64_t part = static_cast<std::int64_t>(mo.size());
      const std::int64_t e = element_bytes(precision);
      EXPECT_EQ(mem.host_total(), part * (12 + e + (precision == ExecPrecision::fp32 ? 0 : e))) << what;
    }
}

// ZeRO-Infinity parameter offload (offload_param cpu, stage 3) on one GPU, every precision: the parameter
// partition in host memory, each chunk copied host-to-device into a staging buffer before its all-gather. With
// the device AdamW (results copied back to the host) against the same run without parameter offload, and with
// the optimizer offloaded too (the CPU AdamW writing the host partition) against optimizer offload alone. The
// staged chunks are the bytes the device partition would hold and the same AdamW computes the update, so with
// --deterministic (the ordered reductions) the runs are equal: tolerance 0 on losses, parameters and states.
// buffer_count 2 makes the staging buffers rotate inside a unit; one case uses pageable memory (pin_memory
// false).
TEST(CudaTrainer, ParameterOffloadEqualsTheDevicePartition) {
  REQUIRE_GPU();
  for (ExecPrecision precision : {ExecPrecision::fp32, ExecPrecision::bf16, ExecPrecision::fp16})
    for (bool optimizer : {false, true}) {
      const std::string what = to_string(precision) + (optimizer ? ", optimizer offloaded too" : ", device AdamW");
      ExecConfig c = small_stage3_model(precision);
      c.zero.offload_optimizer = optimizer;
      c.zero.cpu_optimizer_threads = 4;
      c.optimizer.grad_clip = 0.5;
      ExecConfig o = c;
      o.zero.offload_param = true;
      o.zero.param_buffer_count = 2;
      o.zero.offload_pin_memory = !(optimizer && precision == ExecPrecision::bf16);
      auto dev = make_cuda_trainer(c);
      auto off = make_cuda_trainer(o);
      EXPECT_EQ(differing_elements(off->params(), dev->params()), "equal") << what << ": initialization";
      auto src = TokenSource::synthetic(c.shape.vocab, 12);
      for (int s = 0; s < 4; ++s) {
        const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        const auto rd = dev->step(b.inputs, b.targets);
        const auto ro = off->step(b.inputs, b.targets);
        EXPECT_EQ(ro.skipped, rd.skipped) << what << ", step " << s;
        EXPECT_EQ(ro.loss, rd.loss) << what << ", step " << s;
        EXPECT_EQ(ro.grad_norm, rd.grad_norm) << what << ", step " << s;
        EXPECT_GT(ro.times.offload.param_to_device_s, 0) << what;
        if (optimizer) EXPECT_EQ(ro.times.offload.param_to_host_s, 0) << what;
        else EXPECT_GT(ro.times.offload.param_to_host_s, 0) << what;
      }
      const std::vector<float> pd = dev->params();
      EXPECT_EQ(differing_elements(off->params(), pd), "equal") << what;
      // The device engine gathers from its fp32 master on the device in 16-bit training (no 16-bit partition),
      // else from its partition: the same bits as the offloaded 16-bit partition's gathers, above.
      EXPECT_EQ(dev->memory().component("params") == 0, precision != ExecPrecision::fp32 && !optimizer) << what;
      std::vector<float> md, mo, m1, m2, v1, v2;
      dev->read_owned_state(md, m1, v1);
      off->read_owned_state(mo, m2, v2);
      EXPECT_EQ(differing_elements(mo, md), "equal") << what << ": master";
      EXPECT_EQ(differing_elements(m2, m1), "equal") << what << ": AdamW momentum";
      EXPECT_EQ(differing_elements(v2, v1), "equal") << what << ": AdamW variance";
      // The partition on the host (fp32 with the optimizer offloaded: the host master is the partition), staging
      // buffers on the GPU instead.
      const MemoryReport mem = off->memory();
      EXPECT_EQ(mem.component("params"), 0) << what;
      EXPECT_GT(mem.component("offload_buffers"), 0) << what;
      const std::int64_t part = static_cast<std::int64_t>(mo.size());
      const std::int64_t e = element_bytes(precision);
      // With the optimizer offloaded the 16-bit copy the CPU AdamW writes is the partition: no byte more.
      EXPECT_EQ(mem.host_total() - dev->memory().host_total(), optimizer ? 0 : part * e) << what;
      // set_params writes the host partition through the device's rounding.
      off->set_params(pd);
      EXPECT_EQ(off->params(), pd) << what << ": set_params";
    }
}

// Stage 3 on two GPUs over NCCL, 16-bit: the device engine keeps no 16-bit partition and each all-gather casts its
// rank's chunk of the fp32 master into its own slot and gathers in place; with offload_param the 16-bit partition
// is kept (in host memory) and gathered from a staging buffer. With --deterministic the two runs are equal, bit for
// bit, on both ranks: losses, gradient norms and parameters (bf16 and fp16, clipping on, two micro-steps). Skipped
// below two GPUs.
TEST(CudaTrainer, TwoGpuStage3GathersTheCastMasterAsTheKeptPartition) {
  REQUIRE_GPU();
  int gpus = 0;
  CUDA_CHECK(cudaGetDeviceCount(&gpus));
  if (gpus < 2) GTEST_SKIP() << "needs two GPUs; this machine has " << gpus;
  constexpr int kSteps = 3;
  for (ExecPrecision precision : {ExecPrecision::bf16, ExecPrecision::fp16}) {
    struct RankRun {
      std::vector<double> loss, norm;
      std::vector<float> params;
      std::int64_t params_bytes = -1;
      std::string failure;
    };
    auto run_two_ranks = [&](bool keep_partition) {
      ExecConfig c = small_stage3_model(precision);
      c.optimizer.grad_clip = 0.5;
      c.zero.offload_param = keep_partition;
      c.zero.param_buffer_count = 2;
      const std::string id = make_nccl_unique_id_hex();
      std::vector<RankRun> runs(2);
      std::vector<std::thread> ranks;
      for (int r = 0; r < 2; ++r)
        ranks.emplace_back([&, r] {
          try {
            CUDA_CHECK(cudaSetDevice(r));
            CommWatch watch;
            watch.timeout_s = 60;  // a rank that failed leaves its peer waiting: it stops within a minute
            auto comm = make_nccl_communicator(r, 2, r, id, nullptr, watch);
            auto t = make_cuda_trainer(c, comm.get());
            auto src = TokenSource::synthetic(c.shape.vocab, 40 + r);
            for (int s = 0; s < kSteps; ++s) {
              const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
              const auto res = t->step(b.inputs, b.targets);
              runs[r].loss.push_back(res.loss);
              runs[r].norm.push_back(res.grad_norm);
            }
            runs[r].params = t->params();
            runs[r].params_bytes = t->memory().component("params");
          } catch (const std::exception& e) {
            runs[r].failure = e.what();
          }
        });
      for (std::thread& t : ranks) t.join();
      return runs;
    };
    const std::vector<RankRun> cast = run_two_ranks(false), kept = run_two_ranks(true);
    CUDA_CHECK(cudaSetDevice(0));
    for (int r = 0; r < 2; ++r) {
      const std::string label = to_string(precision) + ", rank " + std::to_string(r);
      ASSERT_TRUE(cast[r].failure.empty()) << label << ": " << cast[r].failure;
      ASSERT_TRUE(kept[r].failure.empty()) << label << " (offload_param): " << kept[r].failure;
      EXPECT_EQ(cast[r].params_bytes, 0) << label;
      EXPECT_EQ(cast[r].loss, kept[r].loss) << label;
      EXPECT_EQ(cast[r].norm, kept[r].norm) << label;
      EXPECT_EQ(differing_elements(cast[r].params, kept[r].params), "equal") << label;
      EXPECT_EQ(differing_elements(cast[r].params, cast[0].params), "equal") << label << ": against rank 0";
    }
  }
}

// ZeRO-Infinity parameter offload to NVMe (offload_param nvme) on one GPU, every precision, against the partition
// in host memory (offload_param cpu): the chunks only go through the swap files and pinned swap buffers in between
// (read ahead of their all-gathers, written back after the update), so with --deterministic the runs are equal:
// losses, parameters and states, tolerance 0. The files live under the build directory (a disk with direct I/O).
TEST(CudaTrainer, ParameterOffloadToNvmeEqualsTheHostPartition) {
  REQUIRE_GPU();
  const std::string dir = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/nvme_cuda_param";
  std::filesystem::create_directories(dir);
  for (ExecPrecision precision : {ExecPrecision::fp32, ExecPrecision::bf16})
    for (bool optimizer : {false, true}) {
      const std::string what = to_string(precision) + (optimizer ? ", optimizer offloaded too" : ", device AdamW");
      ExecConfig c = small_stage3_model(precision);
      c.zero.offload_optimizer = optimizer;
      c.zero.cpu_optimizer_threads = 4;
      c.zero.offload_param = true;
      c.zero.param_buffer_count = 2;
      c.optimizer.grad_clip = 0.5;
      ExecConfig o = c;
      o.zero.param_nvme_path = dir;
      o.zero.param_max_in_cpu = 0;  // every chunk on NVMe (DeepSpeed's default max_in_cpu would keep this model in host memory)
      auto host = make_cuda_trainer(c);
      auto nvme = make_cuda_trainer(o);
      EXPECT_EQ(differing_elements(nvme->params(), host->params()), "equal") << what << ": initialization";
      auto src = TokenSource::synthetic(c.shape.vocab, 12);
      for (int s = 0; s < 4; ++s) {
        const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        const auto rh = host->step(b.inputs, b.targets);
        const auto rn = nvme->step(b.inputs, b.targets);
        EXPECT_EQ(rn.loss, rh.loss) << what << ", step " << s;
        EXPECT_EQ(rn.grad_norm, rh.grad_norm) << what << ", step " << s;
        EXPECT_GT(rn.times.offload.param_nvme_read_bytes, 0) << what;
        EXPECT_EQ(rn.times.offload.param_nvme_write_bytes, nvme->memory().nvme_bytes) << what;
      }
      const std::vector<float> ph = host->params();
      EXPECT_EQ(differing_elements(nvme->params(), ph), "equal") << what;
      std::vector<float> mh, mn, m1, m2, v1, v2;
      host->read_owned_state(mh, m1, v1);
      nvme->read_owned_state(mn, m2, v2);
      EXPECT_EQ(differing_elements(mn, mh), "equal") << what << ": master";
      EXPECT_EQ(differing_elements(m2, m1), "equal") << what << ": AdamW momentum";
      EXPECT_EQ(differing_elements(v2, v1), "equal") << what << ": AdamW variance";
      nvme->set_params(ph);  // through the device's rounding into the files
      EXPECT_EQ(nvme->params(), ph) << what << ": set_params";
    }
  std::filesystem::remove_all(dir);
}

// fp16 under offload: the overflow is decided from the agreed norm before any update, so the skipped step leaves
// the parameters (on the GPU and the host master) as they were.
TEST(CudaTrainer, OffloadedFp16OverflowSkipsTheStep) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::fp16);
  c.zero.stage = 2;
  c.zero.offload_optimizer = true;
  c.loss_scale.initial_scale_power = 40;
  c.loss_scale.hysteresis = 1;
  auto gpu = make_cuda_trainer(c);
  const auto before = gpu->params();
  std::vector<float> master0, m0, v0;
  gpu->read_owned_state(master0, m0, v0);
  auto src = TokenSource::synthetic(c.shape.vocab, 2);
  const auto b = src.next_batch(c.micro_batch, c.seq_len);
  const auto r = gpu->step(b.inputs, b.targets);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(gpu->params(), before);
  std::vector<float> master1, m1, v1;
  gpu->read_owned_state(master1, m1, v1);
  EXPECT_EQ(master1, master0);
  EXPECT_EQ(m1, m0);
  StepResult last = r;
  for (int steps = 1; last.skipped && steps < 40; ++steps) last = gpu->step(b.inputs, b.targets);
  EXPECT_FALSE(last.skipped);
  EXPECT_NE(gpu->params(), before);
}

TEST(CudaTrainer, AllocatorMatchesTheAccountingFormula) {
  REQUIRE_GPU();
  for (int stage : {0, 3})
  for (auto rec : {ExecRecompute::none, ExecRecompute::selective, ExecRecompute::full})
   for (bool llama : {false, true}) {
    ExecConfig c = llama ? small_llama(ExecPrecision::bf16, 128) : small_model(ExecPrecision::bf16);
    c.zero.stage = stage;
    c.zero.param_persistence_threshold = 1000;  // stage 3: norms persistent, weights gathered
    c.recompute = rec;
    c.zero.fp32_grad_accumulation = rec == ExecRecompute::selective;  // fp32 gradients and the micro-step ones
    auto gpu = make_cuda_trainer(c);
    const auto mem = gpu->memory();
    // Stage 0: the closed-form figures; stage 3: the list of allocations the planner counts, summed per component.
    std::map<std::string, std::int64_t> expected;
    std::int64_t expected_total = 0;
    if (stage == 0) {
      const auto e = expected_device_memory(c);
      for (const auto& [name, bytes] : e.components()) expected[name] = bytes;
      expected_total = e.total();
    } else {
      for (const DeviceAllocation& a : device_allocations(c, 1)) {
        expected[a.component] += a.bytes;
        expected_total += a.bytes;
      }
    }
    for (const auto& [name, bytes] : expected)
      EXPECT_EQ(mem.component(name), bytes) << name << (llama ? ", llama" : ", gpt2") << ", stage " << stage;
    EXPECT_EQ(mem.peak_total, expected_total) << "stage " << stage;
    // Stage 3 with the fp32 master on the device keeps no 16-bit partition (the all-gathers cast the master).
    if (stage == 3) EXPECT_EQ(mem.component("params"), 0) << (llama ? "llama" : "gpt2");
    EXPECT_GT(mem.device_total, 0);
  }
}

TEST(CudaTrainer, OutOfMemoryNamesTheTensor) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::bf16);
  c.shape = make_shape(50257, 12288, 96, 96, 2048);  // GPT-3 175B: cannot fit one GPU
  c.seq_len = 2048;
  try {
    auto gpu = make_cuda_trainer(c);
    FAIL() << "expected DeviceOutOfMemory";
  } catch (const DeviceOutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of device memory allocating"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GiB requested"), std::string::npos) << msg;
  }
  // the device is still usable afterwards
  auto ok = make_cuda_trainer(small_model(ExecPrecision::bf16));
  EXPECT_GT(ok->memory().peak_total, 0);
}

TEST(CudaTrainer, LossFallsOnText) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::bf16);
  c.seq_len = 64;
  c.micro_batch = 8;
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  const std::string path = ::testing::TempDir() + "fox_gpu.txt";
  { std::ofstream(path) << text; }
  auto src = TokenSource::from_file(path, c.shape.vocab);
  auto gpu = make_cuda_trainer(c);
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    const auto b = src.next_batch(c.micro_batch, c.seq_len);
    const auto r = gpu->step(b.inputs, b.targets);
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_LT(last, 0.3 * first);
}

}  // namespace
