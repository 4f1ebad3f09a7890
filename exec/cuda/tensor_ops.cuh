// Elementwise and layout ops of the layer-list networks on the GPU (exec/cuda/cuda_network_trainer.cu): ReLU, the
// residual add, gradient copies and sums, and the layout changes between PyTorch's NCHW (the images as the data
// loader gives them, a flatten's order, a convolution weight's (OC, C, KH, KW) in the parameter layout) and the
// channels-last NHWC the GPU computes in (cuDNN's fast tensor-core convolutions take NHWC data and KRSC filters).
// The semantics are those of the CPU reference (exec/cpu/cnn_ops.h), which the GPU tests compare against.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

using i64 = std::int64_t;

// out = max(x, 0) (out may alias x: torchvision's ReLU(inplace=True)).
template <typename T>
void relu_forward(T* out, const T* x, i64 n, cudaStream_t stream);
// From the output, as torch's threshold_backward after an in-place ReLU: dx = out > 0 ? dout : 0, written, or
// added to dx when accumulate; dx may alias dout (written only).
template <typename T>
void relu_backward(T* dx, const T* out, const T* dout, i64 n, bool accumulate, cudaStream_t stream);
// out = a + b (out may alias a).
template <typename T>
void add_forward(T* out, const T* a, const T* b, i64 n, cudaStream_t stream);
// y(m, c) += bias(c) over M rows of C channels (a convolution's bias, NHWC).
template <typename T>
void add_channel_bias(T* y, const T* bias, i64 M, i64 C, cudaStream_t stream);
// A bias's gradient: dbias(c) = sum over M rows of dy(m, c) (NHWC rows of a convolution, or a linear layer's
// samples), written or added when accumulate. Row blocks of kBiasGradRows rows summed per channel, then the blocks in
// order (exec/activation_accounting.h bias_grad_scratch_floats): deterministic, and no vector loads, so any width.
template <typename T>
void bias_grad(T* dbias, const T* dy, i64 M, i64 C, bool accumulate, float* scratch, cudaStream_t stream);
// dst = src, or dst += src when accumulate (an add's gradient handed to an input that has a gradient of its own).
template <typename T>
void copy_or_accumulate(T* dst, const T* src, i64 n, bool accumulate, cudaStream_t stream);

// Images of the data loader, (N, C, H, W) fp32, into (N, H, W, C) of the model's element type.
template <typename T>
void images_to_nhwc(T* out, const float* nchw, i64 N, i64 C, i64 H, i64 W, cudaStream_t stream);
// torch.flatten of an (N, C, H, W) tensor kept as NHWC: out(n, c*H*W + h*W + w) = x(n, h, w, c); and back for the
// gradient (dx written, or added when accumulate).
template <typename T>
void flatten_nhwc_forward(T* out, const T* x, i64 N, i64 C, i64 H, i64 W, cudaStream_t stream);
template <typename T>
void flatten_nhwc_backward(T* dx, const T* dout, i64 N, i64 C, i64 H, i64 W, bool accumulate, cudaStream_t stream);

// A convolution weight from the parameter layout's (K, C, R, S) to cuDNN's channels-last filter (K, R, S, C); and
// a channels-last weight gradient into the parameter layout's (K, C, R, S) gradient, written or accumulated.
template <typename T>
void filter_to_krsc(T* out, const T* kcrs, i64 K, i64 C, i64 R, i64 S, cudaStream_t stream);
template <typename T>
void filter_grad_to_kcrs(T* kcrs, const T* krsc, i64 K, i64 C, i64 R, i64 S, bool accumulate, cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
