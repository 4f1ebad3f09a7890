#include "exec/cuda/rope.cuh"

#include <cstdint>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {
using i64 = std::int64_t;

// One thread turns V consecutive pairs (i, i + HS/2) of one head of one row, i = chunk*V .. chunk*V + V-1:
// V = the 16-byte pack (4 fp32 or 8 16-bit elements) when HS/2 is a multiple of it and the buffer is 16-byte
// aligned, otherwise 1. Threads of consecutive chunks and heads touch consecutive addresses of a row.
// sign = +1 rotates by +angle (forward), -1 by -angle (the backward: the transpose of [[c, -s], [s, c]]).
template <typename T, int V>
__global__ void rope_kernel(T* qkv, const float* cos, const float* sin, i64 rows, int Tn, int NH, int NKV, int HS,
                            float sign) {
  const int half = HS / 2, chunks = half / V, heads = NH + NKV;
  const i64 idx = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * heads * chunks) return;
  const int chunk = static_cast<int>(idx % chunks);
  const int head = static_cast<int>((idx / chunks) % heads);  // NH query heads, then the NKV key heads
  const i64 row = idx / (static_cast<i64>(chunks) * heads);
  const int t = static_cast<int>(row % Tn), i0 = chunk * V;
  T* x1 = qkv + row * (NH + 2 * NKV) * HS + static_cast<i64>(head) * HS + i0;
  T* x2 = x1 + half;
  const float* c = cos + static_cast<i64>(t) * half + i0;
  const float* s = sin + static_cast<i64>(t) * half + i0;
  if constexpr (V == 1) {
    const float a = to_f(*x1), b = to_f(*x2), cv = *c, sv = sign * *s;
    *x1 = from_f<T>(a * cv - b * sv);
    *x2 = from_f<T>(b * cv + a * sv);
  } else {
    static_assert(V == Pack<T>::kSize && V % 4 == 0, "vector path: one 16-byte pack per half");
    const Pack<T> pa = Pack<T>::load(x1), pb = Pack<T>::load(x2);
    float cv[V], sv[V];
#pragma unroll
    for (int j = 0; j < V; j += 4) {  // the tables' offsets are multiples of V floats: 16-byte aligned
      const float4 c4 = *reinterpret_cast<const float4*>(c + j), s4 = *reinterpret_cast<const float4*>(s + j);
      cv[j] = c4.x, cv[j + 1] = c4.y, cv[j + 2] = c4.z, cv[j + 3] = c4.w;
      sv[j] = s4.x, sv[j + 1] = s4.y, sv[j + 2] = s4.z, sv[j + 3] = s4.w;
    }
    Pack<T> ya, yb;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float a = to_f(pa.v[j]), b = to_f(pb.v[j]), sn = sign * sv[j];
      ya.v[j] = from_f<T>(a * cv[j] - b * sn);
      yb.v[j] = from_f<T>(b * cv[j] + a * sn);
    }
    ya.store(x1);
    yb.store(x2);
  }
}

template <typename T>
void rope_launch(T* qkv, const float* cos, const float* sin, int B, int Tn, int NH, int NKV, int HS, float sign,
                 cudaStream_t stream) {
  if (HS % 2 != 0) throw CudaError("rope: the head size must be even");
  constexpr int kPack = Pack<T>::kSize;
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool vec = (HS / 2) % kPack == 0 && aligned(qkv) && aligned(cos) && aligned(sin);
  const i64 rows = static_cast<i64>(B) * Tn;
  const i64 threads = rows * (NH + NKV) * (HS / 2) / (vec ? kPack : 1);
  if (threads == 0) return;
  if (vec)
    rope_kernel<T, kPack><<<ceil_div(threads, 256), 256, 0, stream>>>(qkv, cos, sin, rows, Tn, NH, NKV, HS, sign);
  else
    rope_kernel<T, 1><<<ceil_div(threads, 256), 256, 0, stream>>>(qkv, cos, sin, rows, Tn, NH, NKV, HS, sign);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

template <typename T>
void rope_forward(T* qkv, const float* cos, const float* sin, int B, int Tn, int NH, int NKV, int HS,
                  cudaStream_t stream) {
  rope_launch<T>(qkv, cos, sin, B, Tn, NH, NKV, HS, 1.0f, stream);
}

template <typename T>
void rope_backward(T* dqkv, const float* cos, const float* sin, int B, int Tn, int NH, int NKV, int HS,
                   cudaStream_t stream) {
  rope_launch<T>(dqkv, cos, sin, B, Tn, NH, NKV, HS, -1.0f, stream);
}

#define ZP_INSTANTIATE(T)                                                                              \
  template void rope_forward<T>(T*, const float*, const float*, int, int, int, int, int, cudaStream_t); \
  template void rope_backward<T>(T*, const float*, const float*, int, int, int, int, int, cudaStream_t);
ZP_INSTANTIATE(float)
ZP_INSTANTIATE(__half)
ZP_INSTANTIATE(__nv_bfloat16)
#undef ZP_INSTANTIATE

}  // namespace zeroplan::exec::cuda
