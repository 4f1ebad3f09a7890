// Pooling of the layer-list networks on the GPU, channels-last (NHWC): max pooling with its argmax indices and the
// global average pooling of torchvision's ResNet head (AdaptiveAvgPool2d((1, 1))). Semantics of the CPU reference
// (exec/cpu/cnn_ops.h: max_pool2d_forward, adaptive_avg_pool2d_forward), which the GPU tests compare against.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

using i64 = std::int64_t;

// out (N, OH, OW, C) and indices (N, OH, OW, C) int32: the flat position h*W + w of each window's maximum in its
// input plane (MaxPool2d(return_indices=True)'s value); padded positions never win; ties keep the first maximum in
// scan order (kh outer, kw inner) and a NaN wins, as PyTorch's kernels do.
template <typename T>
void max_pool2d_forward(T* out, int* indices, const T* x, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW, i64 kernel,
                        i64 stride, i64 padding, cudaStream_t stream);
// dx (N, H, W, C): each input position gathers the gradients of the outputs whose index names it (a gather, so
// the sums are in a fixed order); written, or added when accumulate.
template <typename T>
void max_pool2d_backward(T* dx, const T* dout, const int* indices, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW,
                         i64 kernel, i64 stride, i64 padding, bool accumulate, cudaStream_t stream);
// out (N, C) = the mean of each (n, c) plane over H*W; backward dx = dout / (H*W) at every position.
template <typename T>
void global_avg_pool_forward(T* out, const T* x, i64 N, i64 C, i64 HW, cudaStream_t stream);
template <typename T>
void global_avg_pool_backward(T* dx, const T* dout, i64 N, i64 C, i64 HW, bool accumulate, cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
