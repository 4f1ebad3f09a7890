// LayerNorm (eps 1e-5) forward saving fp32 mean and rstd per row, and backward. One warp per row.
// The residual adds are fused into the GEMM epilogues (matmul.cuh: out = inp W^T + bias + residual), so the
// LayerNorm reads the already-summed residual stream.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, std::int64_t N, int C,
                       cudaStream_t stream);
// dinp += LN backward (the residual gradient flows through); dw/db (+)= their gradients, column sums over the N
// rows into `sums` (cuda_common.cuh: column_sum_scratch_floats(N, 2C, deterministic) floats). dw and db null (a
// frozen norm, LoRA's base): dinp only.
template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, const ColumnSums& sums, const T* dout, const T* inp, const T* w,
                        const float* mean, const float* rstd, std::int64_t N, int C, bool accumulate,
                        cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
