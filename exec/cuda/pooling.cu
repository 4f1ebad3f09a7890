#include "exec/cuda/pooling.cuh"

#include <algorithm>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {

constexpr int kThreads = 256;
unsigned blocks_for(i64 n) { return static_cast<unsigned>(std::min<i64>((n + kThreads - 1) / kThreads, 65535 * 8)); }

template <typename T>
__global__ void max_pool_forward_kernel(T* out, int* indices, const T* x, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW,
                                        i64 K, i64 S, i64 P) {
  const i64 total = N * OH * OW * C;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = i % C, ow = i / C % OW, oh = i / (C * OW) % OH, n = i / (C * OW * OH);
    float best = -INFINITY;
    int where = -1;
    for (i64 kh = 0; kh < K; ++kh) {
      const i64 h = oh * S - P + kh;
      if (h < 0 || h >= H) continue;
      for (i64 kw = 0; kw < K; ++kw) {
        const i64 w = ow * S - P + kw;
        if (w < 0 || w >= W) continue;
        const float v = to_f(x[((n * H + h) * W + w) * C + c]);
        if (where < 0) where = static_cast<int>(h * W + w);  // PyTorch's initial maxindex: the first valid position
        if (v > best || isnan(v)) {  // PyTorch's test: a later NaN replaces an earlier one too
          best = v;
          where = static_cast<int>(h * W + w);
        }
      }
    }
    out[i] = from_f<T>(best);
    indices[i] = where;
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(T* dx, const T* dout, const int* indices, i64 N, i64 C, i64 H, i64 W, i64 OH,
                                         i64 OW, i64 K, i64 S, i64 P, bool accumulate) {
  const i64 total = N * H * W * C;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = i % C, w = i / C % W, h = i / (C * W) % H, n = i / (C * W * H);
    // Windows containing (h, w): oh*S - P <= h <= oh*S - P + K - 1.
    const i64 oh_lo = std::max<i64>(0, (h + P - K + S) / S), oh_hi = std::min<i64>(OH - 1, (h + P) / S);
    const i64 ow_lo = std::max<i64>(0, (w + P - K + S) / S), ow_hi = std::min<i64>(OW - 1, (w + P) / S);
    const int me = static_cast<int>(h * W + w);
    float g = 0.0f;
    for (i64 oh = oh_lo; oh <= oh_hi; ++oh)
      for (i64 ow = ow_lo; ow <= ow_hi; ++ow) {
        const i64 o = ((n * OH + oh) * OW + ow) * C + c;
        if (indices[o] == me) g += to_f(dout[o]);
      }
    dx[i] = from_f<T>(accumulate ? to_f(dx[i]) + g : g);
  }
}

template <typename T>
__global__ void avg_pool_forward_kernel(T* out, const T* x, i64 N, i64 C, i64 HW) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < N * C; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = i % C, n = i / C;
    float s = 0.0f;
    for (i64 p = 0; p < HW; ++p) s += to_f(x[(n * HW + p) * C + c]);
    out[i] = from_f<T>(s / static_cast<float>(HW));
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(T* dx, const T* dout, i64 N, i64 C, i64 HW, bool accumulate) {
  const i64 total = N * HW * C;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = i % C, n = i / (C * HW);
    const float g = to_f(dout[n * C + c]) / static_cast<float>(HW);
    dx[i] = from_f<T>(accumulate ? to_f(dx[i]) + g : g);
  }
}

}  // namespace

template <typename T>
void max_pool2d_forward(T* out, int* indices, const T* x, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW, i64 kernel,
                        i64 stride, i64 padding, cudaStream_t stream) {
  max_pool_forward_kernel<T><<<blocks_for(N * OH * OW * C), kThreads, 0, stream>>>(out, indices, x, N, C, H, W, OH, OW,
                                                                                  kernel, stride, padding);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void max_pool2d_backward(T* dx, const T* dout, const int* indices, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW,
                         i64 kernel, i64 stride, i64 padding, bool accumulate, cudaStream_t stream) {
  max_pool_backward_kernel<T><<<blocks_for(N * H * W * C), kThreads, 0, stream>>>(dx, dout, indices, N, C, H, W, OH, OW,
                                                                                 kernel, stride, padding, accumulate);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void global_avg_pool_forward(T* out, const T* x, i64 N, i64 C, i64 HW, cudaStream_t stream) {
  avg_pool_forward_kernel<T><<<blocks_for(N * C), kThreads, 0, stream>>>(out, x, N, C, HW);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void global_avg_pool_backward(T* dx, const T* dout, i64 N, i64 C, i64 HW, bool accumulate, cudaStream_t stream) {
  avg_pool_backward_kernel<T><<<blocks_for(N * HW * C), kThreads, 0, stream>>>(dx, dout, N, C, HW, accumulate);
  CUDA_CHECK_LAUNCH();
}

#define ZP_POOLING(T)                                                                                              \
  template void max_pool2d_forward<T>(T*, int*, const T*, i64, i64, i64, i64, i64, i64, i64, i64, i64, cudaStream_t); \
  template void max_pool2d_backward<T>(T*, const T*, const int*, i64, i64, i64, i64, i64, i64, i64, i64, i64, bool,  \
                                       cudaStream_t);                                                             \
  template void global_avg_pool_forward<T>(T*, const T*, i64, i64, i64, cudaStream_t);                            \
  template void global_avg_pool_backward<T>(T*, const T*, i64, i64, i64, bool, cudaStream_t);
ZP_POOLING(float)
ZP_POOLING(__half)
ZP_POOLING(__nv_bfloat16)
#undef ZP_POOLING

}  // namespace zeroplan::exec::cuda
