// Causal self-attention that never stores the T x T score matrix (FlashAttention-2, Dao 2023, arXiv 2307.08691):
// the forward saves only the output and the per-row logsumexp; the backward recomputes the probabilities tile by
// tile. For 16-bit types and head sizes 64 and 128 the kernels run on the tensor cores (mma.sync m16n8k16, fp32
// accumulation, 64x64 tiles, K/V or Q/dO double-buffered with cp.async); other cases (fp32, other head sizes)
// use a plain fp32-arithmetic kernel with the same inputs and outputs.
// Grouped-query attention (Ainslie et al. 2023, arXiv 2305.13245): NKV key/value heads, each shared by NH/NKV
// consecutive query heads (query head h reads key/value head h / (NH/NKV), transformers' repeat_kv); NKV == NH is
// multi-head attention (GPT-2). NH % NKV == 0.
// Layouts: qkv rows (B*T) x (NH + 2*NKV)*HS: the NH query heads at column h*HS, the NKV key heads at
// NH*HS + g*HS, the NKV value heads at (NH + NKV)*HS + g*HS; out rows (B*T) x NH*HS; lse (B, NH, T) natural-log
// logsumexp of the scaled scores; dqkv like qkv. The CPU reference is cpu::attention_forward / attention_backward.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int NH, int NKV, int HS, cudaStream_t stream);

// d_rowsum: fp32 scratch of B*NH*T floats (D = rowsum(dO * O)). Both paths run a dQ kernel (a block or warp per
// query head) and then a dK/dV kernel (one per key/value head, summing over its group's query heads in a fixed
// order): no atomics, every element of dqkv is written once, and dq, dk, dv are bit-reproducible.
template <typename T>
void attention_backward(T* dqkv, float* d_rowsum, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                        int T_, int NH, int NKV, int HS, cudaStream_t stream);

// Whether the tensor-core path serves this type and head size (tests check both paths).
template <typename T>
bool attention_uses_tensor_cores(int head_size);

}  // namespace zeroplan::exec::cuda
