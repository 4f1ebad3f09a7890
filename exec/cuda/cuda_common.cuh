// Shared device helpers: the three storage types (float, half, bfloat16) and their conversions, 16-byte vector
// access, warp and block reductions.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "exec/activation_accounting.h"
#include "exec/cuda/cuda_check.h"

namespace zeroplan::exec::cuda {

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// 16 bytes of T: 4 floats or 8 half/bf16.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
  __device__ __forceinline__ static Pack load(const T* p) { return *reinterpret_cast<const Pack*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Pack*>(p) = *this; }
};

// Eight elements of T at p (16-byte aligned for 16-bit T, 32-byte for float) as floats, and back, with the
// evict-first hint (ld.global.cs / st.global.cs): for streams each value of which is read and written once.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float* out) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = __ldcs(reinterpret_cast<const float4*>(p)), b = __ldcs(reinterpret_cast<const float4*>(p) + 1);
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
  } else {
    const float4 raw = __ldcs(reinterpret_cast<const float4*>(p));
    const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = to_f(h[j]);
  }
}

template <typename T>
__device__ __forceinline__ void store8(T* p, const float* in) {
  if constexpr (sizeof(T) == 4) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(in[0], in[1], in[2], in[3]));
    __stcs(reinterpret_cast<float4*>(p) + 1, make_float4(in[4], in[5], in[6], in[7]));
  } else {
    float4 raw;
    T* h = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = from_f<T>(in[j]);
    __stcs(reinterpret_cast<float4*>(p), raw);
  }
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float x) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float r = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(r);
}
__device__ __forceinline__ float block_max(float x) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float r = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(r);
}

// Column-sum reductions (bias and LayerNorm parameter gradients): a grid of column blocks x row blocks of
// kColumnSumRowsPerBlock rows. By default each row block adds its column sums into row 0 of `partial` with
// atomics; the last block to finish (a grid-wide counter) writes out = (accumulate ? out : 0) + partial for the
// n (or 2n, with out_b) columns and leaves that row and the counter zeroed for the next call, so no memset or
// second kernel is launched (~600 fewer launches per GPT-2 1.5B step). Deterministic (--deterministic): each
// row block stores its sums in its own row of `partial` and the last block adds the rows in order 0, 1, ...,
// so the float additions happen in the same order on every run.
struct ColumnSums {
  float* partial = nullptr;     // column_sum_scratch_floats(...) floats (activation_accounting.h), zero at first
  unsigned* counter = nullptr;  // one zero
  bool deterministic = false;
};

__device__ __forceinline__ void add_column_partial(const ColumnSums& sums, std::int64_t total, std::int64_t c, float s) {
  if (sums.deterministic) sums.partial[static_cast<std::int64_t>(blockIdx.y) * total + c] = s;
  else atomicAdd(sums.partial + c, s);
}

template <typename T>
__device__ __forceinline__ void last_block_finish(T* out_a, T* out_b, const ColumnSums& sums, std::int64_t n,
                                                  bool accumulate) {
  __shared__ bool last;
  __threadfence();  // this block's partials are visible before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(sums.counter, 1u) == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const std::int64_t total = out_b ? 2 * n : n;
  for (std::int64_t c = threadIdx.x; c < total; c += blockDim.x) {
    float v;
    if (sums.deterministic) {
      v = 0.0f;
      for (unsigned y = 0; y < gridDim.y; ++y) v += __ldcg(sums.partial + static_cast<std::int64_t>(y) * total + c);
    } else {
      v = __ldcg(sums.partial + c);  // from L2, where the atomics landed
      sums.partial[c] = 0.0f;
    }
    T* o = c < n ? out_a + c : out_b + (c - n);
    *o = from_f<T>(v + (accumulate ? to_f(*o) : 0.0f));
  }
  if (threadIdx.x == 0) *sums.counter = 0;
}

inline int ceil_div(std::int64_t a, std::int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace zeroplan::exec::cuda
