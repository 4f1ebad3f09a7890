// Rotary position embeddings (Su et al. 2021, arXiv 2104.09864) in the rotate-half convention of transformers'
// Llama (apply_rotary_pos_emb: x*cos + rotate_half(x)*sin): element i of a head pairs with element i + HS/2,
//   y[i] = x[i] cos - x[i + HS/2] sin,   y[i + HS/2] = x[i + HS/2] cos + x[i] sin,
// applied in place to the NH query heads and the NKV key heads of each qkv row ((B*T) x (NH + 2*NKV)*HS, q heads
// first, then k, then v, which is untouched). cos, sin: fp32 (T, HS/2) tables (cpu::rope_tables); row (b, t) uses
// table row t. fp32 arithmetic, rounded once to T. The CPU reference is cpu::rope_forward / rope_backward.
#pragma once

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

template <typename T>
void rope_forward(T* qkv, const float* cos, const float* sin, int B, int T_, int NH, int NKV, int HS,
                  cudaStream_t stream);
// The transpose (rotation by -angle), in place on dqkv's query and key parts.
template <typename T>
void rope_backward(T* dqkv, const float* cos, const float* sin, int B, int T_, int NH, int NKV, int HS,
                   cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
