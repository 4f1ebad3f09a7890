#include "exec/cuda/layernorm.cuh"

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {
using i64 = std::int64_t;
constexpr float kEps = 1e-5f;
constexpr int kWarps = 8;

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b,
                                         i64 N, int C) {
  using P = Pack<T>;
  const i64 row = static_cast<i64>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float s = 0.0f;
  for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
    const P p = P::load(x + c);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) s += to_f(p.v[j]);
  }
  const float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
    const P p = P::load(x + c);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) {
      const float d = to_f(p.v[j]) - m;
      v += d * d;
    }
  }
  const float r = rsqrtf(warp_sum(v) / C + kEps);
  for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
    const P p = P::load(x + c), pw = P::load(w + c), pb = P::load(b + c);
    P o;
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) o.v[j] = from_f<T>((to_f(p.v[j]) - m) * r * to_f(pw.v[j]) + to_f(pb.v[j]));
    o.store(out + row * C + c);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename T>
__global__ void layernorm_backward_kernel(T* dinp, float* scratch, const T* dout, const T* inp, const T* w,
                                          const float* mean, const float* rstd, i64 N, int C) {
  using P = Pack<T>;
  extern __shared__ float sh[];  // dw[C], db[C]
  float* sdw = sh;
  float* sdb = sh + C;
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) sh[c] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  for (i64 row = static_cast<i64>(blockIdx.x) * kWarps + threadIdx.x / 32; row < N; row += static_cast<i64>(gridDim.x) * kWarps) {
    const T* x = inp + row * C;
    const T* d = dout + row * C;
    const float m = mean[row], r = rstd[row];
    float a = 0.0f, bsum = 0.0f;
    for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
      const P px = P::load(x + c), pd = P::load(d + c), pw = P::load(w + c);
#pragma unroll
      for (int j = 0; j < P::kSize; ++j) {
        const float xhat = (to_f(px.v[j]) - m) * r;
        const float dn = to_f(pw.v[j]) * to_f(pd.v[j]);
        a += dn;
        bsum += dn * xhat;
      }
    }
    const float dnorm_mean = warp_sum(a) / C, dnorm_norm_mean = warp_sum(bsum) / C;
    for (int c = lane * P::kSize; c < C; c += 32 * P::kSize) {
      const P px = P::load(x + c), pd = P::load(d + c), pw = P::load(w + c);
      P pi = P::load(dinp + row * C + c);
#pragma unroll
      for (int j = 0; j < P::kSize; ++j) {
        const float xhat = (to_f(px.v[j]) - m) * r;
        const float dv = to_f(pd.v[j]);
        const float dn = to_f(pw.v[j]) * dv;
        atomicAdd(&sdw[c + j], xhat * dv);
        atomicAdd(&sdb[c + j], dv);
        pi.v[j] = from_f<T>(to_f(pi.v[j]) + (dn - dnorm_mean - xhat * dnorm_norm_mean) * r);
      }
      pi.store(dinp + row * C + c);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) atomicAdd(&scratch[c], sh[c]);
}

template <typename T>
__global__ void layernorm_param_finish_kernel(T* dw, T* db, const float* scratch, int C, bool accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  dw[c] = from_f<T>(scratch[c] + (accumulate ? to_f(dw[c]) : 0.0f));
  db[c] = from_f<T>(scratch[C + c] + (accumulate ? to_f(db[c]) : 0.0f));
}
}  // namespace

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, i64 N, int C,
                       cudaStream_t stream) {
  layernorm_forward_kernel<T><<<ceil_div(N, kWarps), 32 * kWarps, 0, stream>>>(out, mean, rstd, inp, w, b, N, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_backward(T* dinp, T* dw, T* db, float* scratch, const T* dout, const T* inp, const T* w,
                        const float* mean, const float* rstd, i64 N, int C, bool accumulate, cudaStream_t stream) {
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  }
  const std::size_t smem = 2 * static_cast<std::size_t>(C) * sizeof(float);
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  CUDA_CHECK(cudaMemsetAsync(scratch, 0, smem, stream));
  const int blocks = static_cast<int>(std::min<i64>(2 * sms, ceil_div(N, kWarps)));
  layernorm_backward_kernel<T><<<blocks, 32 * kWarps, smem, stream>>>(dinp, scratch, dout, inp, w, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
  layernorm_param_finish_kernel<T><<<ceil_div(C, 256), 256, 0, stream>>>(dw, db, scratch, C, accumulate);
  CUDA_CHECK_LAUNCH();
}

#define ZP_INSTANTIATE(T)                                                                                          \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, i64, int, cudaStream_t);    \
  template void layernorm_backward<T>(T*, T*, T*, float*, const T*, const T*, const T*, const float*, const float*, \
                                      i64, int, bool, cudaStream_t);
ZP_INSTANTIATE(float)
ZP_INSTANTIATE(__half)
ZP_INSTANTIATE(__nv_bfloat16)
#undef ZP_INSTANTIATE

}  // namespace zeroplan::exec::cuda
