// Token + position embedding: out[b,t,:] = wte[token[b,t],:] + wpe[t,:], and its backward (dwte by atomic adds
// of 16-byte-aligned pairs, dwpe by a per-position sum over the batch).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

template <typename T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C, cudaStream_t stream);
// dwte accumulates (the logits GEMM wrote it first); dwpe accumulates when `accumulate`, else is overwritten.
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C, bool accumulate,
                      cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
