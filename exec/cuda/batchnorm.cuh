// BatchNorm2d in training mode on the GPU, channels-last (NHWC: M = N*H*W rows of C channels), fp32 statistics
// whatever the element type (as PyTorch's cuDNN and native kernels keep them), with the semantics of the CPU
// reference (exec/cpu/cnn_ops.h batch_norm_*; torch.nn.BatchNorm2d; Ioffe & Szegedy 2015, arXiv 1502.03167):
//   mean = sum x / M,  var = sum (x - mean)^2 / M (biased, normalises),  rstd = 1 / sqrt(var + eps)
//   y = (x - mean) * rstd * gamma + beta
//   running_mean = (1 - momentum) running_mean + momentum mean,  running_var likewise with var * M / (M - 1)
//   backward: dx = rstd * gamma * (dy - sum(dy)/M - xhat * sum(dy xhat)/M), dgamma += sum(dy xhat), dbeta += sum(dy)
// Every reduction is a fixed-order two-level sum (row blocks of kBatchNormRows rows, exec/activation_accounting.h, then the blocks in order), so
// results are bitwise repeatable. The forward combines each row block's mean and M2 (its sum of squared deviations
// from its own mean) by Chan et al.'s parallel formula (Chan, Golub & LeVeque 1979) in double, which keeps the
// variance exact where sum x^2 / M - mean^2 would cancel.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

using i64 = std::int64_t;

// mean and rstd (C floats each) are written for the backward; the running statistics (fp32 buffers) updated.
template <typename T>
void batchnorm_forward_train(T* y, float* mean, float* rstd, float* running_mean, float* running_var, const T* x,
                             const T* gamma, const T* beta, i64 M, i64 C, float momentum, float eps, float* scratch,
                             cudaStream_t stream);  // scratch: batchnorm_scratch_floats(M, C)
// model.eval(): y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta.
template <typename T>
void batchnorm_forward_eval(T* y, const T* x, const float* running_mean, const float* running_var, const T* gamma,
                            const T* beta, i64 M, i64 C, float eps, cudaStream_t stream);
// dx written (or added when accumulate_dx; it may alias dy only when written); dgamma and dbeta written, or added
// when accumulate_params (later micro-steps).
template <typename T>
void batchnorm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma, const float* mean,
                        const float* rstd, i64 M, i64 C, bool accumulate_dx, bool accumulate_params, float* scratch,
                        cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
