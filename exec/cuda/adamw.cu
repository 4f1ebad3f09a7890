#include "exec/cuda/adamw.cuh"

#include <cmath>

#include "exec/activation_accounting.h"
#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {
using i64 = std::int64_t;

template <typename T>
__global__ void init_kernel(T* params, float* master, i64 count, i64 hash_first, i64 live, InitKind kind,
                            std::uint64_t seed, float residual_std) {
  const i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float v = i < live ? init_value(kind, seed, static_cast<std::uint64_t>(hash_first + i), residual_std) : 0.0f;
  if (params) params[i] = from_f<T>(v);
  if (master) master[i] = v;
}

template <typename T>
__global__ void set_kernel(T* params, float* master, const float* src, i64 n) {
  const i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (params) params[i] = from_f<T>(src[i]);
  if (master) master[i] = src[i];
}

template <typename T>
__global__ void norm_partial_kernel(float* partials, const T* g, i64 n) {
  using P = Pack<T>;
  float s = 0.0f;
  for (i64 i = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * P::kSize; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x * P::kSize) {
    const P p = P::load(g + i);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) {
      const float v = to_f(p.v[j]);
      s += v * v;
    }
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void norm_final_kernel(float* out, const float* partials, int count) {
  float s = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = block_sum(s);
  if (threadIdx.x == 0) out[0] = s;
}

__device__ __forceinline__ bool is_decayed(i64 i, const DecayGeometry& d) {
  if (i < d.blocks_begin) return true;
  if (i >= d.blocks_end) return false;
  return (i - d.blocks_begin) % d.block_stride < d.block_decay;
}

// 4 elements per thread (n and base are multiples of 4: every tensor size is a multiple of hidden, itself of 8).
template <typename T, typename G>
__global__ void adamw_kernel(T* params, float* master, const G* grads, float* m, float* v, i64 n, float lr,
                             float beta1, float beta2, float bc1, float bc2, float eps, float weight_decay,
                             float grad_scale, DecayGeometry decay) {
  const i64 i = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  float4 mm = *reinterpret_cast<float4*>(m + i);
  float4 vv = *reinterpret_cast<float4*>(v + i);
  float* mp = &mm.x;
  float* vp = &vv.x;
  float w[4];
  if (master) {
    const float4 w4 = *reinterpret_cast<const float4*>(master + i);
    w[0] = w4.x; w[1] = w4.y; w[2] = w4.z; w[3] = w4.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = to_f(params[i + j]);
  }
  // the four elements share one tensor (tensor sizes are multiples of 8), so one decay test serves them
  const float wd = is_decayed(decay.base + i, decay) ? weight_decay : 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float g = to_f(grads[i + j]) * grad_scale;
    mp[j] = beta1 * mp[j] + (1.0f - beta1) * g;
    vp[j] = beta2 * vp[j] + (1.0f - beta2) * g * g;
    const float mhat = mp[j] / bc1, vhat = vp[j] / bc2;
    w[j] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * w[j]);
    params[i + j] = from_f<T>(w[j]);
  }
  *reinterpret_cast<float4*>(m + i) = mm;
  *reinterpret_cast<float4*>(v + i) = vv;
  if (master) *reinterpret_cast<float4*>(master + i) = make_float4(w[0], w[1], w[2], w[3]);
}
}  // namespace

template <typename T>
void init_tensor(T* params, float* master, i64 count, i64 hash_first, i64 live, InitKind kind, std::uint64_t seed,
                 float residual_std, cudaStream_t stream) {
  if (count <= 0) return;
  init_kernel<T><<<ceil_div(count, 256), 256, 0, stream>>>(params, master, count, hash_first, live, kind, seed,
                                                           residual_std);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void set_from_fp32(T* params, float* master, const float* src, i64 n, cudaStream_t stream) {
  set_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(params, master, src, n);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void grad_norm_squared(float* out, float* partials, const T* g, i64 n, cudaStream_t stream) {
  if (n % Pack<T>::kSize != 0) throw CudaError("grad_norm_squared: size must be a multiple of the 16-byte pack");
  norm_partial_kernel<T><<<static_cast<int>(kNormPartials), 256, 0, stream>>>(partials, g, n);
  CUDA_CHECK_LAUNCH();
  norm_final_kernel<<<1, 1024, 0, stream>>>(out, partials, static_cast<int>(kNormPartials));
  CUDA_CHECK_LAUNCH();
}

template <typename T, typename G>
void adamw_update(T* params, float* master, const G* grads, float* m, float* v, i64 n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int t, DecayGeometry decay,
                  cudaStream_t stream) {
  if (n % 4 != 0 || decay.base % 4 != 0) throw CudaError("adamw_update: size and base must be multiples of 4");
  const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  adamw_kernel<T, G><<<ceil_div(n / 4, 256), 256, 0, stream>>>(params, master, grads, m, v, n, lr, beta1, beta2, bc1, bc2,
                                                           eps, weight_decay, grad_scale, decay);
  CUDA_CHECK_LAUNCH();
}

#define ZP_INSTANTIATE(T)                                                                                        \
  template void init_tensor<T>(T*, float*, i64, i64, i64, InitKind, std::uint64_t, float, cudaStream_t);\
  template void set_from_fp32<T>(T*, float*, const float*, i64, cudaStream_t);                                    \
  template void grad_norm_squared<T>(float*, float*, const T*, i64, cudaStream_t);                                \
  template void adamw_update<T, T>(T*, float*, const T*, float*, float*, i64, float, float, float, float, float,   \
                                   float, int, DecayGeometry, cudaStream_t);
ZP_INSTANTIATE(float)
ZP_INSTANTIATE(__half)
ZP_INSTANTIATE(__nv_bfloat16)
#undef ZP_INSTANTIATE
// 16-bit parameters with fp32 gradients (fp32 gradient accumulation).
template void adamw_update<__half, float>(__half*, float*, const float*, float*, float*, i64, float, float, float,
                                          float, float, float, int, DecayGeometry, cudaStream_t);
template void adamw_update<__nv_bfloat16, float>(__nv_bfloat16*, float*, const float*, float*, float*, i64, float,
                                                 float, float, float, float, float, int, DecayGeometry, cudaStream_t);

}  // namespace zeroplan::exec::cuda
