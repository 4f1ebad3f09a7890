// Internal to cpu_adamw.cpp: the per-instruction-set kernels over one run of elements that share a weight decay.
// Each kernel does the operations of the scalar update (adamw_element in cpu_adamw.cpp) in the same order, one
// vector of elements at a time, and hands the last count % width elements to adamw_span_scalar, so every path
// gives the same bits.
#pragma once

#include <cstdint>

#include "exec/offload/cpu_adamw.h"

namespace zeroplan::exec::offload::detail {

// Per-step constants, computed once per update in fp32 as the CPU reference does.
struct AdamwCoefficients {
  float lr, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction1, bias_correction2, eps, grad_scale;
};

// Pointers at element 0 of a run of `count` elements, all with weight decay `weight_decay` (0 where none).
struct AdamwSpan {
  float* params;
  const float* grads;              // or null, then grads_bf16 or grads_fp16
  const std::uint16_t* grads_bf16;
  const std::uint16_t* grads_fp16;
  float* exp_avg;
  float* exp_avg_sq;
  std::uint16_t* params_half;      // may be null
  HalfFormat half_format;
  std::int64_t count;
  float weight_decay;
};

void adamw_span_scalar(const AdamwSpan& span, const AdamwCoefficients& c);
void adamw_span_avx2(const AdamwSpan& span, const AdamwCoefficients& c);
void adamw_span_avx512(const AdamwSpan& span, const AdamwCoefficients& c);

// Internal linkage for the helpers defined here: the AVX files are compiled with -mavx2 / -mavx512f, and an
// inline function with external linkage compiled there could be the copy the linker keeps for the whole program.
namespace {

// The span advanced by `offset` elements and shortened to `count`.
AdamwSpan sub_span(const AdamwSpan& s, std::int64_t offset, std::int64_t count) {
  AdamwSpan r = s;
  r.params += offset;
  if (r.grads) r.grads += offset;
  if (r.grads_bf16) r.grads_bf16 += offset;
  if (r.grads_fp16) r.grads_fp16 += offset;
  r.exp_avg += offset;
  r.exp_avg_sq += offset;
  if (r.params_half) r.params_half += offset;
  r.count = count;
  return r;
}

}  // namespace

}  // namespace zeroplan::exec::offload::detail
