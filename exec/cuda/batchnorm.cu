#include "exec/cuda/batchnorm.cuh"

#include <algorithm>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {

constexpr int kColumns = 32, kRowThreads = 8;  // a block: 32 channels x 8 row lanes

__host__ __device__ i64 row_blocks(i64 M) { return (M + kBatchNormRows - 1) / kBatchNormRows; }

// Per row block and channel: the block's count-weighted mean and M2 (forward), or sum(dy) and sum(dy xhat)
// (backward), into scratch rows [2*rb] and [2*rb + 1].
template <typename T>
__global__ void column_partials_kernel(float* scratch, const T* x, const T* dy, const float* mean, const float* rstd,
                                       i64 M, i64 C) {
  __shared__ float a_sh[kRowThreads][kColumns + 1], b_sh[kRowThreads][kColumns + 1];
  const i64 c = static_cast<i64>(blockIdx.x) * kColumns + threadIdx.x;
  const i64 row0 = static_cast<i64>(blockIdx.y) * kBatchNormRows;
  const i64 rows = min(kBatchNormRows, M - row0);
  float a = 0.0f, b = 0.0f;
  if (c < C) {
    if (!dy) {
      // Deviations from the block's first value keep the float sums small; the block mean and M2 follow exactly.
      const float shift = to_f(x[row0 * C + c]);
      for (i64 r = threadIdx.y; r < rows; r += kRowThreads) {
        const float d = to_f(x[(row0 + r) * C + c]) - shift;
        a += d;
        b += d * d;
      }
    } else {
      const float m = mean[c], s = rstd[c];
      for (i64 r = threadIdx.y; r < rows; r += kRowThreads) {
        const i64 i = (row0 + r) * C + c;
        const float g = to_f(dy[i]);
        a += g;
        b += g * (to_f(x[i]) - m) * s;
      }
    }
  }
  a_sh[threadIdx.y][threadIdx.x] = a;
  b_sh[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int k = 1; k < kRowThreads; ++k) {
    a += a_sh[k][threadIdx.x];
    b += b_sh[k][threadIdx.x];
  }
  float* out = scratch + 2 * static_cast<i64>(blockIdx.y) * C;
  if (!dy) {
    const float n = static_cast<float>(rows), shift = to_f(x[row0 * C + c]);
    out[c] = shift + a / n;             // the block's mean
    out[C + c] = fmaxf(b - a * a / n, 0.0f);  // the block's M2
  } else {
    out[c] = a;
    out[C + c] = b;
  }
}

// One thread per channel: the row blocks combined in order (Chan et al.'s update), the running statistics.
__global__ void forward_finish_kernel(float* mean, float* rstd, float* running_mean, float* running_var,
                                      const float* scratch, i64 M, i64 C, float momentum, float eps) {
  const i64 c = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double n = 0, mu = 0, m2 = 0;
  for (i64 rb = 0; rb < row_blocks(M); ++rb) {
    const double nb = static_cast<double>(min(kBatchNormRows, M - rb * kBatchNormRows));
    const double mb = scratch[2 * rb * C + c], m2b = scratch[(2 * rb + 1) * C + c];
    const double delta = mb - mu, total = n + nb;
    mu += delta * nb / total;
    m2 += m2b + delta * delta * n * nb / total;
    n = total;
  }
  const double var = m2 / n;
  mean[c] = static_cast<float>(mu);
  rstd[c] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  if (running_mean) {
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * static_cast<float>(mu);
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * static_cast<float>(m2 / (n - 1.0));
  }
}

// One thread per channel: sum(dy) and sum(dy xhat) over the row blocks in order, into the parameter gradients
// and into scratch row 0 / 1 for the input gradient.
template <typename T>
__global__ void backward_finish_kernel(T* dgamma, T* dbeta, float* scratch, i64 M, i64 C, bool accumulate) {
  const i64 c = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sdy = 0.0f, sdyx = 0.0f;
  for (i64 rb = 0; rb < row_blocks(M); ++rb) {
    sdy += scratch[2 * rb * C + c];
    sdyx += scratch[(2 * rb + 1) * C + c];
  }
  scratch[c] = sdy;
  scratch[C + c] = sdyx;
  if (dgamma) dgamma[c] = from_f<T>(sdyx + (accumulate ? to_f(dgamma[c]) : 0.0f));
  if (dbeta) dbeta[c] = from_f<T>(sdy + (accumulate ? to_f(dbeta[c]) : 0.0f));
}

template <typename T>
__global__ void normalize_kernel(T* y, const T* x, const float* mean, const float* rstd, const float* var, const T* gamma,
                                 const T* beta, i64 total, i64 C, float eps) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = i % C;
    const float s = var ? rsqrtf(var[c] + eps) : rstd[c];
    const float g = gamma ? to_f(gamma[c]) : 1.0f, b = beta ? to_f(beta[c]) : 0.0f;
    y[i] = from_f<T>((to_f(x[i]) - mean[c]) * s * g + b);
  }
}

template <typename T>
__global__ void input_grad_kernel(T* dx, const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd,
                                  const float* sums, i64 total, i64 M, i64 C, bool accumulate) {
  const float inv_m = 1.0f / static_cast<float>(M);
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = i % C;
    const float s = rstd[c], g = gamma ? to_f(gamma[c]) : 1.0f;
    const float xhat = (to_f(x[i]) - mean[c]) * s;
    const float d = s * g * (to_f(dy[i]) - sums[c] * inv_m - xhat * sums[C + c] * inv_m);
    dx[i] = from_f<T>(accumulate ? to_f(dx[i]) + d : d);
  }
}

unsigned elementwise_blocks(i64 n) { return static_cast<unsigned>(std::min<i64>((n + 255) / 256, 65535 * 8)); }

}  // namespace

template <typename T>
void batchnorm_forward_train(T* y, float* mean, float* rstd, float* running_mean, float* running_var, const T* x,
                             const T* gamma, const T* beta, i64 M, i64 C, float momentum, float eps, float* scratch,
                             cudaStream_t stream) {
  if (M < 2) throw CudaError("batch_norm: expected more than 1 value per channel when training (PyTorch's check)");
  const dim3 grid(static_cast<unsigned>(ceil_div(C, kColumns)), static_cast<unsigned>(row_blocks(M)));
  column_partials_kernel<T><<<grid, dim3(kColumns, kRowThreads), 0, stream>>>(scratch, x, nullptr, nullptr, nullptr, M, C);
  CUDA_CHECK_LAUNCH();
  forward_finish_kernel<<<ceil_div(C, 128), 128, 0, stream>>>(mean, rstd, running_mean, running_var, scratch, M, C,
                                                              momentum, eps);
  CUDA_CHECK_LAUNCH();
  normalize_kernel<T><<<elementwise_blocks(M * C), 256, 0, stream>>>(y, x, mean, rstd, nullptr, gamma, beta, M * C, C,
                                                                      eps);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void batchnorm_forward_eval(T* y, const T* x, const float* running_mean, const float* running_var, const T* gamma,
                            const T* beta, i64 M, i64 C, float eps, cudaStream_t stream) {
  normalize_kernel<T><<<elementwise_blocks(M * C), 256, 0, stream>>>(y, x, running_mean, nullptr, running_var, gamma,
                                                                      beta, M * C, C, eps);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void batchnorm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* gamma, const float* mean,
                        const float* rstd, i64 M, i64 C, bool accumulate_dx, bool accumulate_params, float* scratch,
                        cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(C, kColumns)), static_cast<unsigned>(row_blocks(M)));
  column_partials_kernel<T><<<grid, dim3(kColumns, kRowThreads), 0, stream>>>(scratch, x, dy, mean, rstd, M, C);
  CUDA_CHECK_LAUNCH();
  backward_finish_kernel<T><<<ceil_div(C, 128), 128, 0, stream>>>(dgamma, dbeta, scratch, M, C, accumulate_params);
  CUDA_CHECK_LAUNCH();
  input_grad_kernel<T><<<elementwise_blocks(M * C), 256, 0, stream>>>(dx, dy, x, gamma, mean, rstd, scratch, M * C, M,
                                                                       C, accumulate_dx);
  CUDA_CHECK_LAUNCH();
}

#define ZP_BATCHNORM(T)                                                                                              \
  template void batchnorm_forward_train<T>(T*, float*, float*, float*, float*, const T*, const T*, const T*, i64, i64, \
                                           float, float, float*, cudaStream_t);                                     \
  template void batchnorm_forward_eval<T>(T*, const T*, const float*, const float*, const T*, const T*, i64, i64,     \
                                          float, cudaStream_t);                                                      \
  template void batchnorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, i64, i64,  \
                                      bool, bool, float*, cudaStream_t);
ZP_BATCHNORM(float)
ZP_BATCHNORM(__half)
ZP_BATCHNORM(__nv_bfloat16)
#undef ZP_BATCHNORM

}  // namespace zeroplan::exec::cuda
