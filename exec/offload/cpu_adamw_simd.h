// Internal to cpu_adamw_avx2.cpp and cpu_adamw_avx512.cpp: the vector loop of the CPU AdamW written once over a
// vector type V (Avx2 or Avx512 in those files), which supplies kWidth fp32 lanes and the operations below. Each
// step is the scalar update's operation (adamw_element in cpu_adamw.cpp) in the same order, with separate
// multiplies and adds (no fused multiply-add, the library is built with -ffp-contract=off), so the lanes give
// the scalar path's bits. Everything here has internal linkage: the files that include it are compiled for
// instruction sets the rest of the program must not pick up.
#pragma once

#include <cstdint>

#include "exec/offload/cpu_adamw_kernels.h"

namespace zeroplan::exec::offload::detail {
namespace {

enum class HalfCopy { none, bf16, fp16 };
enum class GradFormat { f32, bf16, fp16 };

template <class V, GradFormat kGrads, HalfCopy kCopy>
void adamw_vectors(const AdamwSpan& s, const AdamwCoefficients& c, std::int64_t vector_end) {
  using F = typename V::F;
  const F lr = V::set1(c.lr), beta1 = V::set1(c.beta1), one_minus_beta1 = V::set1(c.one_minus_beta1);
  const F beta2 = V::set1(c.beta2), one_minus_beta2 = V::set1(c.one_minus_beta2);
  const F bias_correction1 = V::set1(c.bias_correction1), bias_correction2 = V::set1(c.bias_correction2);
  const F eps = V::set1(c.eps), grad_scale = V::set1(c.grad_scale), weight_decay = V::set1(s.weight_decay);
  for (std::int64_t i = 0; i < vector_end; i += V::kWidth) {
    F grad;
    if constexpr (kGrads == GradFormat::bf16) {
      grad = V::load_bf16(s.grads_bf16 + i);
    } else if constexpr (kGrads == GradFormat::fp16) {
      grad = V::load_fp16(s.grads_fp16 + i);
    } else {
      grad = V::load(s.grads + i);
    }
    const F g = V::mul(grad, grad_scale);
    const F m = V::add(V::mul(beta1, V::load(s.exp_avg + i)), V::mul(one_minus_beta1, g));
    const F v = V::add(V::mul(beta2, V::load(s.exp_avg_sq + i)), V::mul(V::mul(one_minus_beta2, g), g));
    const F mhat = V::div(m, bias_correction1);
    const F vhat = V::div(v, bias_correction2);
    const F p_old = V::load(s.params + i);
    const F step = V::add(V::div(mhat, V::add(V::sqrt(vhat), eps)), V::mul(weight_decay, p_old));
    const F p = V::sub(p_old, V::mul(lr, step));
    V::store(s.exp_avg + i, m);
    V::store(s.exp_avg_sq + i, v);
    V::store(s.params + i, p);
    if constexpr (kCopy == HalfCopy::bf16) V::store_bf16(s.params_half + i, p);
    if constexpr (kCopy == HalfCopy::fp16) V::store_fp16(s.params_half + i, p);
  }
  // The 16-bit copy goes out with non-temporal stores (V::store_half): without them each of its cache lines is
  // read before it is written, 2 bytes per parameter beside the 28 the update moves. The fence orders them before
  // whatever this thread does next (the pool's completion, which the host-to-device copy waits for).
  if constexpr (kCopy != HalfCopy::none) V::fence();
}

template <class V, GradFormat kGrads>
void adamw_vectors_copy(const AdamwSpan& s, const AdamwCoefficients& c, std::int64_t vector_end) {
  if (!s.params_half) {
    adamw_vectors<V, kGrads, HalfCopy::none>(s, c, vector_end);
  } else if (s.half_format == HalfFormat::bf16) {
    adamw_vectors<V, kGrads, HalfCopy::bf16>(s, c, vector_end);
  } else {
    adamw_vectors<V, kGrads, HalfCopy::fp16>(s, c, vector_end);
  }
}

// The whole span: full vectors here, the last count % kWidth elements on the scalar path.
template <class V>
void adamw_span_vectorized(const AdamwSpan& s, const AdamwCoefficients& c) {
  const std::int64_t vector_end = s.count - s.count % V::kWidth;
  if (s.grads) {
    adamw_vectors_copy<V, GradFormat::f32>(s, c, vector_end);
  } else if (s.grads_bf16) {
    adamw_vectors_copy<V, GradFormat::bf16>(s, c, vector_end);
  } else {
    adamw_vectors_copy<V, GradFormat::fp16>(s, c, vector_end);
  }
  if (vector_end < s.count) adamw_span_scalar(sub_span(s, vector_end, s.count - vector_end), c);
}

}  // namespace
}  // namespace zeroplan::exec::offload::detail
