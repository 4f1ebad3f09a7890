// SwiGLU (Shazeer 2020, arXiv 2002.05202; Llama's MLP: act_fn(gate_proj(x)) * up_proj(x) with act_fn = SiLU):
// gate_up rows are N x 2F, the gate in columns [0, F) and the up projection in [F, 2F) (one fused GEMM writes
// both); out (N x F) = silu(gate) * up, silu(x) = x * sigmoid(x). fp32 arithmetic, rounded once to T. The CPU
// reference is cpu::swiglu_forward / swiglu_backward.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

template <typename T>
void swiglu_forward(T* out, const T* gate_up, std::int64_t N, std::int64_t F, cudaStream_t stream);
// dgate_up (N x 2F) overwritten: d gate = dout * up * silu'(gate), d up = dout * silu(gate). May alias gate_up
// (in place): each thread reads its gate, up and dout elements before writing the same two positions.
template <typename T>
void swiglu_backward(T* dgate_up, const T* gate_up, const T* dout, std::int64_t N, std::int64_t F,
                     cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
