// RMSNorm (Zhang & Sennrich 2019, arXiv 1910.07467; transformers' LlamaRMSNorm): out = x * rstd * w with
// rstd = 1 / sqrt(mean(x^2) + eps) per row, all in fp32 and rounded once to T; rstd saved in fp32 per row.
// One warp per row, like layernorm.cuh (whose structure this follows, without the mean and the bias).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

// C a multiple of the 16-byte pack (4 fp32 or 8 16-bit elements).
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, std::int64_t N, int C, float eps,
                     cudaStream_t stream);
// dinp += RMSNorm backward (the residual gradient flows through): rstd * (w*dout - xhat * mean(w*dout*xhat)),
// xhat = x * rstd. dw (+)= sum over the N rows of dout * xhat, column sums into `sums` (cuda_common.cuh:
// column_sum_scratch_floats(N, C, deterministic) floats and a zero counter, left zeroed); `accumulate` adds to dw,
// otherwise overwrites it. dw null (a frozen norm, LoRA's base): dinp only.
template <typename T>
void rmsnorm_backward(T* dinp, T* dw, const ColumnSums& sums, const T* dout, const T* inp, const T* w,
                      const float* rstd, std::int64_t N, int C, bool accumulate, cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
