// GELU, tanh approximation (GPT-2): forward for the fallback when cuBLASLt offers no GELU epilogue, and the
// backward dinp = gelu'(inp) * dout (dinp may alias dout).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

template <typename T>
void gelu_forward(T* out, const T* inp, std::int64_t n, cudaStream_t stream);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n, cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
