#include "exec/cuda/swiglu.cuh"

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {
using i64 = std::int64_t;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// V consecutive output columns per thread: the 16-byte pack when F is a multiple of it and the buffers are
// 16-byte aligned, otherwise 1. No __restrict__: the backward may run in place (dgate_up == gate_up).
template <typename T, int V>
__global__ void swiglu_forward_kernel(T* out, const T* gate_up, i64 N, i64 F) {
  const i64 idx = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * V;  // over N x F
  if (idx >= N * F) return;
  const i64 n = idx / F, j = idx % F;
  const T* g = gate_up + n * 2 * F + j;
  const T* u = g + F;
  if constexpr (V == 1) {
    const float gv = to_f(*g);
    out[idx] = from_f<T>(gv * sigmoid(gv) * to_f(*u));
  } else {
    const Pack<T> pg = Pack<T>::load(g), pu = Pack<T>::load(u);
    Pack<T> o;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gv = to_f(pg.v[k]);
      o.v[k] = from_f<T>(gv * sigmoid(gv) * to_f(pu.v[k]));
    }
    o.store(out + idx);
  }
}

// out = silu(g) u: d up = dout silu(g); d gate = dout u silu'(g), silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <typename T, int V>
__global__ void swiglu_backward_kernel(T* dgate_up, const T* gate_up, const T* dout, i64 N, i64 F) {
  const i64 idx = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (idx >= N * F) return;
  const i64 n = idx / F, j = idx % F;
  const i64 gi = n * 2 * F + j, ui = gi + F;
  if constexpr (V == 1) {
    const float gv = to_f(gate_up[gi]), uv = to_f(gate_up[ui]), d = to_f(dout[idx]);
    const float sg = sigmoid(gv);
    dgate_up[gi] = from_f<T>(d * uv * sg * (1.0f + gv * (1.0f - sg)));
    dgate_up[ui] = from_f<T>(d * gv * sg);
  } else {
    const Pack<T> pg = Pack<T>::load(gate_up + gi), pu = Pack<T>::load(gate_up + ui), pd = Pack<T>::load(dout + idx);
    Pack<T> dg, du;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gv = to_f(pg.v[k]), uv = to_f(pu.v[k]), d = to_f(pd.v[k]);
      const float sg = sigmoid(gv);
      dg.v[k] = from_f<T>(d * uv * sg * (1.0f + gv * (1.0f - sg)));
      du.v[k] = from_f<T>(d * gv * sg);
    }
    dg.store(dgate_up + gi);
    du.store(dgate_up + ui);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* gate_up, i64 N, i64 F, cudaStream_t stream) {
  constexpr int kPack = Pack<T>::kSize;
  if (N * F == 0) return;
  if (F % kPack == 0 && aligned16(out) && aligned16(gate_up)) {
    swiglu_forward_kernel<T, kPack><<<ceil_div(N * F / kPack, 256), 256, 0, stream>>>(out, gate_up, N, F);
  } else {
    swiglu_forward_kernel<T, 1><<<ceil_div(N * F, 256), 256, 0, stream>>>(out, gate_up, N, F);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void swiglu_backward(T* dgate_up, const T* gate_up, const T* dout, i64 N, i64 F, cudaStream_t stream) {
  constexpr int kPack = Pack<T>::kSize;
  if (N * F == 0) return;
  if (F % kPack == 0 && aligned16(dgate_up) && aligned16(gate_up) && aligned16(dout)) {
    swiglu_backward_kernel<T, kPack><<<ceil_div(N * F / kPack, 256), 256, 0, stream>>>(dgate_up, gate_up, dout, N, F);
  } else {
    swiglu_backward_kernel<T, 1><<<ceil_div(N * F, 256), 256, 0, stream>>>(dgate_up, gate_up, dout, N, F);
  }
  CUDA_CHECK_LAUNCH();
}

#define ZP_INSTANTIATE(T)                                                                      \
  template void swiglu_forward<T>(T*, const T*, i64, i64, cudaStream_t);                       \
  template void swiglu_backward<T>(T*, const T*, const T*, i64, i64, cudaStream_t);
ZP_INSTANTIATE(float)
ZP_INSTANTIATE(__half)
ZP_INSTANTIATE(__nv_bfloat16)
#undef ZP_INSTANTIATE

}  // namespace zeroplan::exec::cuda
