#include "exec/cuda/crossentropy.cuh"

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {
using i64 = std::int64_t;
constexpr int kThreadsCe = 1024;

template <typename T>
__global__ void __launch_bounds__(kThreadsCe) crossentropy_kernel(float* losses, T* logits, const int* targets, i64 V,
                                                                  i64 Vp, float dloss, bool write_grad) {
  using P = Pack<T>;
  const i64 row = blockIdx.x;
  T* x = logits + row * Vp;
  const int target = targets[row];
  const float target_logit = to_f(x[target]);  // read before any thread overwrites the row
  float m = -INFINITY, s = 0.0f;
  for (i64 c = static_cast<i64>(threadIdx.x) * P::kSize; c < Vp; c += static_cast<i64>(blockDim.x) * P::kSize) {
    const P p = P::load(x + c);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) {
      if (c + j >= V) break;
      const float v = to_f(p.v[j]);
      if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
      } else {
        s += expf(v - m);
      }
    }
  }
  const float gm = block_max(m);
  const float gs = block_sum(m == -INFINITY ? 0.0f : s * expf(m - gm));
  const float lse = gm + logf(gs);
  if (threadIdx.x == 0) losses[row] = lse - target_logit;
  if (!write_grad) return;
  for (i64 c = static_cast<i64>(threadIdx.x) * P::kSize; c < Vp; c += static_cast<i64>(blockDim.x) * P::kSize) {
    P p = P::load(x + c);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) {
      const i64 col = c + j;
      const float prob = col < V ? expf(to_f(p.v[j]) - lse) : 0.0f;
      p.v[j] = from_f<T>((prob - (col == target ? 1.0f : 0.0f)) * dloss);
    }
    p.store(x + c);
  }
}

// One warp per sample of an image classifier: the loss over its `classes` logits, whether its first largest logit
// is the label (std::max_element's and torch.argmax's first maximum), and the scaled gradient in place.
template <typename T>
__global__ void class_crossentropy_kernel(float* losses, int* correct, T* logits, const int* labels, i64 N, i64 classes,
                                          const float* dloss_scale, bool write_grad) {
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  T* x = logits + row * classes;
  const int label = labels[row];
  float m = -INFINITY;
  i64 arg = classes;
  for (i64 c = lane; c < classes; c += 32) {
    const float v = to_f(x[c]);
    if (v > m || arg == classes) {
      m = v;
      arg = c;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, o);
    const i64 oa = __shfl_xor_sync(0xffffffffu, arg, o);
    if (om > m || (om == m && oa < arg)) {
      m = om;
      arg = oa;
    }
  }
  float s = 0.0f;
  for (i64 c = lane; c < classes; c += 32) s += expf(to_f(x[c]) - m);
  const float lse = m + logf(warp_sum(s));
  const float target_logit = to_f(x[label]);
  __syncwarp();
  if (lane == 0) {
    losses[row] = lse - target_logit;
    correct[row] = arg == label;
  }
  if (!write_grad) return;
  const float dloss = *dloss_scale;
  for (i64 c = lane; c < classes; c += 32)
    x[c] = from_f<T>((expf(to_f(x[c]) - lse) - (c == label ? 1.0f : 0.0f)) * dloss);
}
}  // namespace

template <typename T>
void class_crossentropy_forward_backward(float* losses, int* correct, T* logits, const int* labels, i64 N, i64 classes,
                                         const float* dloss, bool write_grad, cudaStream_t stream) {
  constexpr int kWarps = 4;
  class_crossentropy_kernel<T><<<ceil_div(N, kWarps), 32 * kWarps, 0, stream>>>(losses, correct, logits, labels, N,
                                                                                classes, dloss, write_grad);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void crossentropy_forward_backward(float* losses, T* logits, const int* targets, i64 N, i64 V, i64 Vp, float dloss,
                                   bool write_grad, cudaStream_t stream) {
  if (Vp % Pack<T>::kSize != 0) throw CudaError("crossentropy: padded vocabulary must be a multiple of the pack");
  crossentropy_kernel<T><<<static_cast<unsigned>(N), kThreadsCe, 0, stream>>>(losses, logits, targets, V, Vp, dloss,
                                                                              write_grad);
  CUDA_CHECK_LAUNCH();
}

template void class_crossentropy_forward_backward<float>(float*, int*, float*, const int*, i64, i64, const float*,
                                                        bool, cudaStream_t);
template void class_crossentropy_forward_backward<__half>(float*, int*, __half*, const int*, i64, i64, const float*,
                                                         bool, cudaStream_t);
template void class_crossentropy_forward_backward<__nv_bfloat16>(float*, int*, __nv_bfloat16*, const int*, i64, i64,
                                                                const float*, bool, cudaStream_t);
template void crossentropy_forward_backward<float>(float*, float*, const int*, i64, i64, i64, float, bool, cudaStream_t);
template void crossentropy_forward_backward<__half>(float*, __half*, const int*, i64, i64, i64, float, bool, cudaStream_t);
template void crossentropy_forward_backward<__nv_bfloat16>(float*, __nv_bfloat16*, const int*, i64, i64, i64, float,
                                                           bool, cudaStream_t);

}  // namespace zeroplan::exec::cuda
