#include "exec/cuda/rmsnorm.cuh"

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {
using i64 = std::int64_t;
constexpr int kWarps = 8;

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* w, i64 N, int C, float eps) {
  using P = Pack<T>;
  const i64 row = static_cast<i64>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float ss = 0.0f;
  for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
    const P p = P::load(x + c);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) ss += to_f(p.v[j]) * to_f(p.v[j]);
  }
  // LlamaRMSNorm: variance = mean(x^2) in fp32; x * rsqrt(variance + eps) * w
  const float r = rsqrtf(warp_sum(ss) / C + eps);
  for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
    const P p = P::load(x + c), pw = P::load(w + c);
    P o;
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) o.v[j] = from_f<T>(to_f(p.v[j]) * r * to_f(pw.v[j]));
    o.store(out + row * C + c);
  }
  if (lane == 0) rstd[row] = r;
}

// The backward in two memory-bound passes, as layernorm_backward (layernorm.cu says why it is not fused):
// (1) one warp per row: dinp += rstd * (w*dout - xhat * mean(w*dout*xhat)), from y = w x r with
//     dr/dx_j = -r^3 x_j / C;
// (2) a column reduction: dw += sum_rows xhat * dout.
template <typename T>
__global__ void rmsnorm_backward_input_kernel(T* dinp, const T* dout, const T* inp, const T* w, const float* rstd,
                                              i64 N, int C) {
  using P = Pack<T>;
  const i64 row = static_cast<i64>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* d = dout + row * C;
  const float r = rstd[row];
  float a = 0.0f;
  for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
    const P px = P::load(x + c), pd = P::load(d + c), pw = P::load(w + c);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) a += to_f(pw.v[j]) * to_f(pd.v[j]) * (to_f(px.v[j]) * r);
  }
  const float m = warp_sum(a) / C;
  for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
    const P px = P::load(x + c), pd = P::load(d + c), pw = P::load(w + c);
    P pi = P::load(dinp + row * C + c);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) {
      const float xhat = to_f(px.v[j]) * r;
      pi.v[j] = from_f<T>(to_f(pi.v[j]) + (to_f(pw.v[j]) * to_f(pd.v[j]) - xhat * m) * r);
    }
    pi.store(dinp + row * C + c);
  }
}

constexpr int kParamRowGroups = 8;
constexpr int kParamRowsPerBlock = kColumnSumRowsPerBlock;

// layernorm_backward_params_kernel with the one column sum dw (ColumnSums of width C, no second output).
template <typename T>
__global__ void rmsnorm_backward_weight_kernel(T* dw, ColumnSums sums, const T* dout, const T* inp,
                                               const float* rstd, i64 N, int C, bool accumulate) {
  using P = Pack<T>;
  const i64 col = (static_cast<i64>(blockIdx.x) * 32 + threadIdx.x % 32) * P::kSize;
  const int group = threadIdx.x / 32;
  float dw_acc[P::kSize] = {};
  if (col < C) {
    const i64 r0 = static_cast<i64>(blockIdx.y) * kParamRowsPerBlock;
    const i64 r1 = min(r0 + kParamRowsPerBlock, N);
#pragma unroll 8  // several 16-byte loads in flight per thread
    for (i64 r = r0 + group; r < r1; r += kParamRowGroups) {
      const P px = P::load(inp + r * C + col), pd = P::load(dout + r * C + col);
      const float rs = rstd[r];
#pragma unroll
      for (int j = 0; j < P::kSize; ++j) dw_acc[j] += to_f(px.v[j]) * rs * to_f(pd.v[j]);
    }
  }
  __shared__ float sm[kParamRowGroups][32 * P::kSize];
#pragma unroll
  for (int j = 0; j < P::kSize; ++j) sm[group][(threadIdx.x % 32) * P::kSize + j] = dw_acc[j];
  __syncthreads();
  for (int c = threadIdx.x; c < 32 * P::kSize; c += blockDim.x) {
    float s = 0;
#pragma unroll
    for (int g = 0; g < kParamRowGroups; ++g) s += sm[g][c];  // fixed order: deterministic within the block
    const i64 gc = static_cast<i64>(blockIdx.x) * 32 * P::kSize + c;
    if (gc < C) add_column_partial(sums, static_cast<i64>(C), gc, s);
  }
  last_block_finish<T>(dw, nullptr, sums, C, accumulate);
}

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, i64 N, int C, float eps, cudaStream_t stream) {
  if (C % Pack<T>::kSize != 0) throw CudaError("rmsnorm_forward: C must be a multiple of the 16-byte pack");
  rmsnorm_forward_kernel<T><<<ceil_div(N, kWarps), 32 * kWarps, 0, stream>>>(out, rstd, inp, w, N, C, eps);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dw, const ColumnSums& sums, const T* dout, const T* inp, const T* w,
                      const float* rstd, i64 N, int C, bool accumulate, cudaStream_t stream) {
  if (C % Pack<T>::kSize != 0) throw CudaError("rmsnorm_backward: C must be a multiple of the 16-byte pack");
  rmsnorm_backward_input_kernel<T><<<ceil_div(N, kWarps), 32 * kWarps, 0, stream>>>(dinp, dout, inp, w, rstd, N, C);
  CUDA_CHECK_LAUNCH();
  if (!dw) return;  // a frozen norm (LoRA's base): no weight gradient
  dim3 grid(ceil_div(C, 32 * Pack<T>::kSize), ceil_div(N, kParamRowsPerBlock));
  rmsnorm_backward_weight_kernel<T><<<grid, 32 * kParamRowGroups, 0, stream>>>(dw, sums, dout, inp, rstd, N, C,
                                                                              accumulate);
  CUDA_CHECK_LAUNCH();
}

#define ZP_INSTANTIATE(T)                                                                                       \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, i64, int, float, cudaStream_t);              \
  template void rmsnorm_backward<T>(T*, T*, const ColumnSums&, const T*, const T*, const T*, const float*, i64, \
                                    int, bool, cudaStream_t);
ZP_INSTANTIATE(float)
ZP_INSTANTIATE(__half)
ZP_INSTANTIATE(__nv_bfloat16)
#undef ZP_INSTANTIATE

}  // namespace zeroplan::exec::cuda
