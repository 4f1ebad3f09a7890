#include "exec/cuda/tensor_ops.cuh"

#include <algorithm>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {

constexpr int kThreads = 256;
// Grid of a grid-stride loop over n elements (at most 65,535 x 8 blocks of kThreads: beyond, threads loop).
unsigned blocks_for(i64 n) { return static_cast<unsigned>(std::min<i64>((n + kThreads - 1) / kThreads, 65535 * 8)); }

template <typename T>
__global__ void relu_forward_kernel(T* out, const T* x, i64 n) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(fmaxf(to_f(x[i]), 0.0f));
}

template <typename T>
__global__ void relu_backward_kernel(T* dx, const T* out, const T* dout, i64 n, bool accumulate) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const float g = to_f(out[i]) > 0.0f ? to_f(dout[i]) : 0.0f;
    dx[i] = from_f<T>(accumulate ? to_f(dx[i]) + g : g);
  }
}

template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, i64 n) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

template <typename T>
__global__ void channel_bias_kernel(T* y, const T* bias, i64 n, i64 C) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    y[i] = from_f<T>(to_f(y[i]) + to_f(bias[i % C]));
}

template <typename T>
__global__ void copy_or_accumulate_kernel(T* dst, const T* src, i64 n, bool accumulate) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    dst[i] = accumulate ? from_f<T>(to_f(dst[i]) + to_f(src[i])) : src[i];
}

// Per (row block, channel): the block's sum of dy, into scratch row `blockIdx.y`.
template <typename T>
__global__ void bias_partial_kernel(float* scratch, const T* dy, i64 M, i64 C) {
  __shared__ float part[8][33];
  const i64 c = static_cast<i64>(blockIdx.x) * 32 + threadIdx.x;
  const i64 block_rows = kBiasGradRows;  // a copy: the constant itself cannot be bound to std::min's reference here
  const i64 row0 = static_cast<i64>(blockIdx.y) * block_rows, rows = std::min<i64>(block_rows, M - row0);
  float s = 0.0f;
  if (c < C)
    for (i64 r = threadIdx.y; r < rows; r += 8) s += to_f(dy[(row0 + r) * C + c]);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int k = 1; k < 8; ++k) s += part[k][threadIdx.x];
  scratch[static_cast<i64>(blockIdx.y) * C + c] = s;
}

template <typename T>
__global__ void bias_finish_kernel(T* dbias, const float* scratch, i64 blocks, i64 C, bool accumulate) {
  const i64 c = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (i64 b = 0; b < blocks; ++b) s += scratch[b * C + c];
  dbias[c] = from_f<T>(accumulate ? to_f(dbias[c]) + s : s);
}

// One thread per NHWC element (i = ((n*H + h)*W + w)*C + c), reading its NCHW source.
template <typename T>
__global__ void images_to_nhwc_kernel(T* out, const float* x, i64 N, i64 C, i64 H, i64 W) {
  const i64 total = N * C * H * W;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = i % C, w = i / C % W, h = i / (C * W) % H, n = i / (C * W * H);
    out[i] = from_f<T>(x[((n * C + c) * H + h) * W + w]);
  }
}

// One thread per flat element j = c*H*W + h*W + w of sample n; backward the inverse map.
template <typename T>
__global__ void flatten_kernel(T* out, const T* x, i64 N, i64 C, i64 H, i64 W, bool backward, bool accumulate) {
  const i64 total = N * C * H * W, hw = H * W;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 n = i / (C * hw), j = i % (C * hw), c = j / hw, p = j % hw;
    const i64 nhwc = (n * hw + p) * C + c;
    if (!backward) out[i] = x[nhwc];
    else out[nhwc] = accumulate ? from_f<T>(to_f(out[nhwc]) + to_f(x[i])) : x[i];
  }
}

// One thread per (k, r, s, c) element of the channels-last filter.
template <typename T>
__global__ void filter_kernel(T* kcrs, T* krsc, i64 K, i64 C, i64 R, i64 S, bool to_kcrs, bool accumulate) {
  const i64 total = K * C * R * S;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total; i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 c = i % C, s = i / C % S, r = i / (C * S) % R, k = i / (C * S * R);
    const i64 j = ((k * C + c) * R + r) * S + s;
    if (!to_kcrs) krsc[i] = kcrs[j];
    else kcrs[j] = accumulate ? from_f<T>(to_f(kcrs[j]) + to_f(krsc[i])) : krsc[i];
  }
}

}  // namespace

template <typename T>
void relu_forward(T* out, const T* x, i64 n, cudaStream_t stream) {
  relu_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(out, x, n);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void relu_backward(T* dx, const T* out, const T* dout, i64 n, bool accumulate, cudaStream_t stream) {
  relu_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(dx, out, dout, n, accumulate);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void add_forward(T* out, const T* a, const T* b, i64 n, cudaStream_t stream) {
  add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void add_channel_bias(T* y, const T* bias, i64 M, i64 C, cudaStream_t stream) {
  channel_bias_kernel<T><<<blocks_for(M * C), kThreads, 0, stream>>>(y, bias, M * C, C);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void bias_grad(T* dbias, const T* dy, i64 M, i64 C, bool accumulate, float* scratch, cudaStream_t stream) {
  const i64 blocks = (M + kBiasGradRows - 1) / kBiasGradRows;
  bias_partial_kernel<T><<<dim3(static_cast<unsigned>(ceil_div(C, 32)), static_cast<unsigned>(blocks)), dim3(32, 8), 0,
                           stream>>>(scratch, dy, M, C);
  CUDA_CHECK_LAUNCH();
  bias_finish_kernel<T><<<ceil_div(C, 128), 128, 0, stream>>>(dbias, scratch, blocks, C, accumulate);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void copy_or_accumulate(T* dst, const T* src, i64 n, bool accumulate, cudaStream_t stream) {
  copy_or_accumulate_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(dst, src, n, accumulate);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void images_to_nhwc(T* out, const float* nchw, i64 N, i64 C, i64 H, i64 W, cudaStream_t stream) {
  images_to_nhwc_kernel<T><<<blocks_for(N * C * H * W), kThreads, 0, stream>>>(out, nchw, N, C, H, W);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void flatten_nhwc_forward(T* out, const T* x, i64 N, i64 C, i64 H, i64 W, cudaStream_t stream) {
  flatten_kernel<T><<<blocks_for(N * C * H * W), kThreads, 0, stream>>>(out, x, N, C, H, W, false, false);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void flatten_nhwc_backward(T* dx, const T* dout, i64 N, i64 C, i64 H, i64 W, bool accumulate, cudaStream_t stream) {
  flatten_kernel<T><<<blocks_for(N * C * H * W), kThreads, 0, stream>>>(dx, dout, N, C, H, W, true, accumulate);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void filter_to_krsc(T* out, const T* kcrs, i64 K, i64 C, i64 R, i64 S, cudaStream_t stream) {
  filter_kernel<T><<<blocks_for(K * C * R * S), kThreads, 0, stream>>>(const_cast<T*>(kcrs), out, K, C, R, S, false,
                                                                       false);
  CUDA_CHECK_LAUNCH();
}
template <typename T>
void filter_grad_to_kcrs(T* kcrs, const T* krsc, i64 K, i64 C, i64 R, i64 S, bool accumulate, cudaStream_t stream) {
  filter_kernel<T><<<blocks_for(K * C * R * S), kThreads, 0, stream>>>(kcrs, const_cast<T*>(krsc), K, C, R, S, true,
                                                                       accumulate);
  CUDA_CHECK_LAUNCH();
}

#define ZP_TENSOR_OPS(T)                                                                                  \
  template void relu_forward<T>(T*, const T*, i64, cudaStream_t);                                         \
  template void relu_backward<T>(T*, const T*, const T*, i64, bool, cudaStream_t);                        \
  template void add_forward<T>(T*, const T*, const T*, i64, cudaStream_t);                                \
  template void add_channel_bias<T>(T*, const T*, i64, i64, cudaStream_t);                                \
  template void bias_grad<T>(T*, const T*, i64, i64, bool, float*, cudaStream_t);                         \
  template void copy_or_accumulate<T>(T*, const T*, i64, bool, cudaStream_t);                             \
  template void images_to_nhwc<T>(T*, const float*, i64, i64, i64, i64, cudaStream_t);                    \
  template void flatten_nhwc_forward<T>(T*, const T*, i64, i64, i64, i64, cudaStream_t);                  \
  template void flatten_nhwc_backward<T>(T*, const T*, i64, i64, i64, i64, bool, cudaStream_t);           \
  template void filter_to_krsc<T>(T*, const T*, i64, i64, i64, i64, cudaStream_t);                        \
  template void filter_grad_to_kcrs<T>(T*, const T*, i64, i64, i64, i64, bool, cudaStream_t);
ZP_TENSOR_OPS(float)
ZP_TENSOR_OPS(__half)
ZP_TENSOR_OPS(__nv_bfloat16)
#undef ZP_TENSOR_OPS

}  // namespace zeroplan::exec::cuda
