#include "exec/cuda/gelu.cuh"

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, std::int64_t n) {
  using P = Pack<T>;
  const std::int64_t i = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * P::kSize;
  if (i >= n) return;
  const P x = P::load(inp + i);
  P y;
#pragma unroll
  for (int j = 0; j < P::kSize; ++j) {
    const float v = to_f(x.v[j]);
    y.v[j] = from_f<T>(0.5f * v * (1.0f + tanhf(kGeluScale * (v + 0.044715f * v * v * v))));
  }
  y.store(out + i);
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, std::int64_t n) {
  using P = Pack<T>;
  const std::int64_t i = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * P::kSize;
  if (i >= n) return;
  const P x = P::load(inp + i), d = P::load(dout + i);
  P y;
#pragma unroll
  for (int j = 0; j < P::kSize; ++j) {
    const float v = to_f(x.v[j]);
    const float th = tanhf(kGeluScale * (v + 0.044715f * v * v * v));
    const float grad = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * v * v);
    y.v[j] = from_f<T>(grad * to_f(d.v[j]));
  }
  y.store(dinp + i);
}
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, std::int64_t n, cudaStream_t stream) {
  if (n % Pack<T>::kSize != 0) throw CudaError("gelu_forward: element count must be a multiple of the 16-byte pack");
  gelu_forward_kernel<T><<<ceil_div(n / Pack<T>::kSize, 256), 256, 0, stream>>>(out, inp, n);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n, cudaStream_t stream) {
  if (n % Pack<T>::kSize != 0) throw CudaError("gelu_backward: element count must be a multiple of the 16-byte pack");
  gelu_backward_kernel<T><<<ceil_div(n / Pack<T>::kSize, 256), 256, 0, stream>>>(dinp, inp, dout, n);
  CUDA_CHECK_LAUNCH();
}

template void gelu_forward<float>(float*, const float*, std::int64_t, cudaStream_t);
template void gelu_forward<__half>(__half*, const __half*, std::int64_t, cudaStream_t);
template void gelu_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, std::int64_t, cudaStream_t);
template void gelu_backward<float>(float*, const float*, const float*, std::int64_t, cudaStream_t);
template void gelu_backward<__half>(__half*, const __half*, const __half*, std::int64_t, cudaStream_t);
template void gelu_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, std::int64_t,
                                           cudaStream_t);

}  // namespace zeroplan::exec::cuda
