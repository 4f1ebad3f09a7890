#include "exec/cuda/encoder.cuh"

#include <algorithm>
#include <utility>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {
using i64 = std::int64_t;

// kPositions: GPT-2's learned position embedding is added; rotary models (wpe null) copy the token rows.
template <typename T, bool kPositions>
__global__ void encoder_forward_kernel(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
  using P = Pack<T>;
  const i64 idx = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * P::kSize;
  if (idx >= static_cast<i64>(B) * Tn * C) return;
  const i64 bt = idx / C, c = idx % C, t = bt % Tn;
  const P e = P::load(wte + static_cast<i64>(tokens[bt]) * C + c);
  if constexpr (kPositions) {
    const P p = P::load(wpe + t * C + c);
    P o;
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) o.v[j] = from_f<T>(to_f(e.v[j]) + to_f(p.v[j]));
    o.store(out + idx);
  } else {
    e.store(out + idx);
  }
}

__device__ __forceinline__ void atomic_add_pair(float* p, float a, float b) {
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
}
__device__ __forceinline__ void atomic_add_pair(__half* p, float a, float b) {
  atomicAdd(reinterpret_cast<__half2*>(p), __floats2half2_rn(a, b));
}
__device__ __forceinline__ void atomic_add_pair(__nv_bfloat16* p, float a, float b) {
  atomicAdd(reinterpret_cast<__nv_bfloat162*>(p), __floats2bfloat162_rn(a, b));
}

template <typename T>
__global__ void encoder_backward_wte_kernel(T* dwte, const T* dout, const int* tokens, int B, int Tn, int C) {
  const i64 idx = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * 2;
  if (idx >= static_cast<i64>(B) * Tn * C) return;
  const i64 bt = idx / C, c = idx % C;
  atomic_add_pair(dwte + static_cast<i64>(tokens[bt]) * C + c, to_f(dout[idx]), to_f(dout[idx + 1]));
}

// One block per distinct token; threads over the channels; positions summed in increasing order.
template <typename T>
__global__ void encoder_backward_wte_ordered_kernel(T* dwte, const T* dout, const int* tokens, const int* offsets,
                                                    const int* positions, int C) {
  const int i = blockIdx.x;
  const int begin = offsets[i], end = offsets[i + 1];
  T* row = dwte + static_cast<i64>(tokens[i]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.0f;
    for (int k = begin; k < end; ++k) s += to_f(dout[static_cast<i64>(positions[k]) * C + c]);
    row[c] = from_f<T>(to_f(row[c]) + s);
  }
}

template <typename T>
__global__ void encoder_backward_wpe_kernel(T* dwpe, const T* dout, int B, int Tn, int C, bool accumulate) {
  const i64 idx = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;  // over T*C
  if (idx >= static_cast<i64>(Tn) * C) return;
  float s = accumulate ? to_f(dwpe[idx]) : 0.0f;
  for (int b = 0; b < B; ++b) s += to_f(dout[static_cast<i64>(b) * Tn * C + idx]);
  dwpe[idx] = from_f<T>(s);
}
}  // namespace

template <typename T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C, cudaStream_t stream) {
  const i64 packs = static_cast<i64>(B) * Tn * C / Pack<T>::kSize;
  if (wpe) encoder_forward_kernel<T, true><<<ceil_div(packs, 256), 256, 0, stream>>>(out, tokens, wte, wpe, B, Tn, C);
  else encoder_forward_kernel<T, false><<<ceil_div(packs, 256), 256, 0, stream>>>(out, tokens, wte, wpe, B, Tn, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C, bool accumulate,
                      const DeviceTokenPositions* ordered, cudaStream_t stream) {
  if (ordered) {
    if (ordered->distinct > 0) {
      encoder_backward_wte_ordered_kernel<T><<<ordered->distinct, 256, 0, stream>>>(
          dwte, dout, ordered->tokens, ordered->offsets, ordered->positions, C);
      CUDA_CHECK_LAUNCH();
    }
  } else {
    const i64 pairs = static_cast<i64>(B) * Tn * C / 2;
    encoder_backward_wte_kernel<T><<<ceil_div(pairs, 256), 256, 0, stream>>>(dwte, dout, tokens, B, Tn, C);
    CUDA_CHECK_LAUNCH();
  }
  if (!dwpe) return;  // rotary models have no position embedding
  encoder_backward_wpe_kernel<T><<<ceil_div(static_cast<i64>(Tn) * C, 256), 256, 0, stream>>>(dwpe, dout, B, Tn, C,
                                                                                              accumulate);
  CUDA_CHECK_LAUNCH();
}

void TokenPositions::build(const int* ids, std::int64_t count) {
  // counting sort by token id, stable: positions of a token stay increasing
  std::vector<std::pair<int, int>> order(static_cast<std::size_t>(count));
  for (std::int64_t p = 0; p < count; ++p) order[p] = {ids[p], static_cast<int>(p)};
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  tokens.clear();
  offsets.clear();
  positions.resize(static_cast<std::size_t>(count));
  for (std::int64_t k = 0; k < count; ++k) {
    if (k == 0 || order[k].first != order[k - 1].first) {
      tokens.push_back(order[k].first);
      offsets.push_back(static_cast<int>(k));
    }
    positions[k] = order[k].second;
  }
  offsets.push_back(static_cast<int>(count));
}

#define ZP_INSTANTIATE(T)                                                                            \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int, cudaStream_t); \
  template void encoder_backward<T>(T*, T*, const T*, const int*, int, int, int, bool, const DeviceTokenPositions*, \
                                    cudaStream_t);
ZP_INSTANTIATE(float)
ZP_INSTANTIATE(__half)
ZP_INSTANTIATE(__nv_bfloat16)
#undef ZP_INSTANTIATE

}  // namespace zeroplan::exec::cuda
