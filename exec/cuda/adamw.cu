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
  if (i >= d.blocks_end) return i < d.tail_decay_end;
  return (i - d.blocks_begin) % d.block_stride < d.block_decay;
}

// Eight elements per thread. kVector (every pointer 16-byte aligned, base and the decay geometry multiples of 8):
// 16-byte loads and stores, one decay test per eight (tensor sizes are multiples of 8, so eight aligned elements
// share a tensor); otherwise, and for the tail of n, element by element (ZeRO chunks need not be aligned). Each value
// is read and written once, so the accesses carry the evict-first hint (ld.global.cs / st.global.cs). 28 bytes move
// per parameter (bf16: fp32 master, m and v read and written, the gradient read, the 16-bit copy written). Against
// the 4-wide kernel with scalar 16-bit accesses it replaced, GPT-2 1.5B's optimizer phase on one H200: 12.4 -> 12.0
// ms, alternating builds in one call (bench/exec/results/2026-11-26-adamw-kernel-deferral-nccl/). load8/store8:
// exec/cuda/cuda_common.cuh.
constexpr int kAdamwPerThread = 8;

struct AdamwScalars {
  float lr, beta1, beta2, bc1, bc2, eps, weight_decay, grad_scale;
};

__device__ __forceinline__ void adamw_element(float& w, float& m, float& v, float g, float wd, const AdamwScalars& s) {
  g *= s.grad_scale;
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  const float mhat = m / s.bc1, vhat = v / s.bc2;
  w -= s.lr * (mhat / (sqrtf(vhat) + s.eps) + wd * w);
}

template <typename T, typename G, bool kVector>
__global__ void adamw_kernel(T* params, float* master, const G* grads, float* m, float* v, i64 n, AdamwScalars s,
                             DecayGeometry decay) {
  const i64 i = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * kAdamwPerThread;
  if (i >= n) return;
  if (kVector && i + kAdamwPerThread <= n) {
    float w[8], g[8], mm[8], vv[8];
    if (master) load8(master + i, w);
    else load8(params + i, w);
    load8(grads + i, g);
    load8(m + i, mm);
    load8(v + i, vv);
    const float wd = is_decayed(decay.base + i, decay) ? s.weight_decay : 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) adamw_element(w[j], mm[j], vv[j], to_f(g[j]), wd, s);
    store8(m + i, mm);
    store8(v + i, vv);
    if (master) store8(master + i, w);
    if (params) store8(params + i, w);  // (stage 3 without a 16-bit partition: none)
    return;
  }
  const i64 last = i + kAdamwPerThread < n ? i + kAdamwPerThread : n;
  for (i64 k = i; k < last; ++k) {
    float w = master ? master[k] : to_f(params[k]);
    const float wd = is_decayed(decay.base + k, decay) ? s.weight_decay : 0.0f;
    adamw_element(w, m[k], v[k], to_f(grads[k]), wd, s);
    if (master) master[k] = w;
    if (params) params[k] = from_f<T>(w);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
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
  if (n <= 0) return;
  const AdamwScalars s{lr, beta1, beta2, 1.0f - std::pow(beta1, static_cast<float>(t)),
                       1.0f - std::pow(beta2, static_cast<float>(t)), eps, weight_decay, grad_scale};
  const bool vector = aligned16(params) && (!master || aligned16(master)) && aligned16(grads) && aligned16(m) &&
                      aligned16(v) && decay.base % kAdamwPerThread == 0 && decay.blocks_begin % 8 == 0 &&
                      decay.block_stride % 8 == 0 && decay.block_decay % 8 == 0 && decay.blocks_end % 8 == 0 &&
                      decay.tail_decay_end % 8 == 0;
  const auto blocks = ceil_div(ceil_div(n, kAdamwPerThread), 256);
  if (vector) adamw_kernel<T, G, true><<<blocks, 256, 0, stream>>>(params, master, grads, m, v, n, s, decay);
  else adamw_kernel<T, G, false><<<blocks, 256, 0, stream>>>(params, master, grads, m, v, n, s, decay);
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
