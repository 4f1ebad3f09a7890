// Causal self-attention that never stores the T x T score matrix (FlashAttention-2, Dao 2023, arXiv 2307.08691):
// the forward saves only the output and the per-row logsumexp; the backward recomputes the probabilities tile by
// tile. For 16-bit types and head sizes 64 and 128 the kernels run on the tensor cores (mma.sync m16n8k16, fp32
// accumulation, 64x64 tiles, K/V or Q/dO double-buffered with cp.async); other cases (fp32, other head sizes)
// use a plain fp32-arithmetic kernel with the same inputs and outputs.
// Layouts: qkv (B, T, 3C) with q, k, v at column offsets 0, C, 2C and head h at h*HS inside each; out (B, T, C);
// lse (B, NH, T) natural-log logsumexp of the scaled scores; dqkv like qkv.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, cudaStream_t stream);

// d_rowsum: fp32 scratch of B*NH*T floats (D = rowsum(dO * O)). The tensor-core path runs a dQ kernel and then a
// dK/dV kernel (no atomics; every element of dqkv is written once).
template <typename T>
void attention_backward(T* dqkv, float* d_rowsum, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                        int T_, int C, int NH, cudaStream_t stream);

// Whether the tensor-core path serves this type and head size (tests check both paths).
template <typename T>
bool attention_uses_tensor_cores(int head_size);

}  // namespace zeroplan::exec::cuda
