// Reference operators of a convolutional network (torchvision's ResNet family) in fp32 on the CPU: conv2d,
// batch_norm, relu, max_pool2d and adaptive_avg_pool2d, with their backward passes. Like cpu_ops.h they are the
// ground truth the GPU kernels are compared with, and the CPU trainer is built from them.
//
// Layout: every activation is NCHW (PyTorch's default contiguous layout), row-major, fp32: element (n, c, h, w)
// of an (N, C, H, W) tensor is at ((n*C + c)*H + h)*W + w. Conv weights are (OC, C/groups, KH, KW) row-major
// (PyTorch's Conv2d.weight); per-channel vectors (bias, gamma, beta, running statistics) have C entries.
// The semantics are PyTorch's, so that torchvision's weights give torchvision's results.
//
// Gradient convention (the trainer's, as matmul_backward): the input gradient dinp is WRITTEN (overwritten) by
// every backward here; parameter gradients (dweight, dbias, dgamma, dbeta) ACCUMULATE (+=).
#pragma once

#include <cstdint>

namespace zeroplan::exec::cpu {

using i64 = std::int64_t;

// ---------------------------------------------------------------------------------------------------------------
// conv2d (PyTorch docs, torch.nn.Conv2d, https://pytorch.org/docs/stable/generated/torch.nn.Conv2d.html):
//   out(n, oc, oh, ow) = bias(oc) + sum_{c in group(oc), kh, kw}
//       weight(oc, c - g*C/groups, kh, kw) * inp(n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw)
// with zero padding (positions outside the input contribute 0), g = oc / (OC/groups) the group of oc, whose input
// channels are [g*C/groups, (g+1)*C/groups). Output size (Conv2d's "Shape" section, floor division):
//   OH = (H + 2*ph - dh*(KH - 1) - 1) / sh + 1,   OW likewise.
// Implementation: im2col of a chunk of images into a (C/groups*KH*KW) x (images*OH*OW) matrix and one Eigen GEMM
// per group and chunk (the chunk keeps the column matrix near 8M floats).
struct Conv2dGeom {
  i64 N = 0, C = 0, H = 0, W = 0;  // input (N, C, H, W)
  i64 OC = 0, KH = 1, KW = 1;      // weight (OC, C/groups, KH, KW)
  i64 stride_h = 1, stride_w = 1;
  i64 pad_h = 0, pad_w = 0;
  i64 dil_h = 1, dil_w = 1;
  i64 groups = 1;
  i64 OH() const { return (H + 2 * pad_h - dil_h * (KH - 1) - 1) / stride_h + 1; }
  i64 OW() const { return (W + 2 * pad_w - dil_w * (KW - 1) - 1) / stride_w + 1; }
};
// Square kernel, symmetric stride/padding/dilation (every conv in torchvision's ResNet).
Conv2dGeom conv2d_geom(i64 N, i64 C, i64 H, i64 W, i64 OC, i64 K, i64 stride, i64 padding, i64 dilation = 1,
                       i64 groups = 1);
// out (N, OC, OH, OW) written; bias (OC) may be null (torchvision's ResNet convs have bias=False).
// Throws std::invalid_argument when C or OC is not a multiple of groups or the output would be empty.
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias, const Conv2dGeom& g);
// dinp (N, C, H, W) written (may be null: skipped, e.g. the stem's image input); dweight (OC, C/groups, KH, KW)
// accumulates; dbias (OC) accumulates (may be null).
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const Conv2dGeom& g);

// ---------------------------------------------------------------------------------------------------------------
// batch_norm (PyTorch docs, torch.nn.BatchNorm2d, https://pytorch.org/docs/stable/generated/torch.nn.BatchNorm2d.html;
// Ioffe & Szegedy 2015, arXiv 1502.03167). Input (N, C, HW) with HW = H*W; statistics per channel over (N, H, W),
// m = N*HW elements:
//   mean = sum x / m,  var = sum (x - mean)^2 / m (biased, used to normalise),  rstd = 1 / sqrt(var + eps)
//   out = (x - mean) * rstd * gamma + beta
// Training mode also updates the running statistics as _BatchNorm does in train mode (momentum 0.1 by default):
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * m / (m - 1)   (UNBIASED variance)
// mean and rstd (C floats each) are saved for the backward. running_mean/running_var may be null (not tracked;
// both or neither). gamma/beta may be null (affine=False: 1 and 0). Statistics are summed in double.
// Throws std::invalid_argument when m < 2 (PyTorch: "Expected more than 1 value per channel when training").
void batch_norm_forward_train(float* out, float* mean, float* rstd, float* running_mean, float* running_var,
                              const float* inp, const float* gamma, const float* beta, i64 N, i64 C, i64 HW,
                              float momentum = 0.1f, float eps = 1e-5f);
// Eval mode (model.eval()): out = (x - running_mean) / sqrt(running_var + eps) * gamma + beta.
void batch_norm_forward_eval(float* out, const float* inp, const float* running_mean, const float* running_var,
                             const float* gamma, const float* beta, i64 N, i64 C, i64 HW, float eps = 1e-5f);
// Backward of the training-mode forward, with xhat = (x - mean) * rstd and the sums over the channel's m elements:
//   dinp = rstd * (gamma*dout - sum(gamma*dout)/m - xhat * sum(gamma*dout*xhat)/m)   (written; may alias dout)
//   dgamma += sum(dout * xhat),   dbeta += sum(dout)   (accumulate; either may be null)
void batch_norm_backward(float* dinp, float* dgamma, float* dbeta, const float* dout, const float* inp,
                         const float* gamma, const float* mean, const float* rstd, i64 N, i64 C, i64 HW);

// ---------------------------------------------------------------------------------------------------------------
// ReLU (torch.nn.ReLU): out = max(x, 0). out may alias inp (torchvision's ReLU(inplace=True)).
void relu_forward(float* out, const float* inp, i64 n);
// From the OUTPUT, as PyTorch's threshold_backward after an in-place ReLU: dinp = out > 0 ? dout : 0
// (written; may alias dout).
void relu_backward(float* dinp, const float* out, const float* dout, i64 n);

// ---------------------------------------------------------------------------------------------------------------
// max_pool2d (PyTorch docs, torch.nn.MaxPool2d, https://pytorch.org/docs/stable/generated/torch.nn.MaxPool2d.html),
// ceil_mode=False: out(n, c, oh, ow) = max over kh, kw < K of inp(n, c, oh*s - p + kh*d, ow*s - p + kw*d), where
// padded positions count as -inf (they are never chosen). OH = (H + 2p - d(K-1) - 1) / s + 1, OW likewise.
// indices (N, C, OH, OW) int32: the flat position h*W + w of the maximum within its (H, W) input plane (the value
// MaxPool2d(return_indices=True) returns). Ties: the FIRST maximum in scan order (kh outer, kw inner), since
// PyTorch's CPU kernel (aten/src/ATen/native/cpu/MaxPoolKernel.cpp) replaces only on val > maxval; a NaN wins
// and propagates as there. Requires p <= K/2 (PyTorch's check), so no window is all padding.
void max_pool2d_forward(float* out, int* indices, const float* inp, i64 N, i64 C, i64 H, i64 W, i64 kernel,
                        i64 stride, i64 padding, i64 dilation = 1);
// dinp (N, C, H, W) written: zeroed, then dinp(n, c, indices(n, c, oh, ow)) += dout(n, c, oh, ow).
void max_pool2d_backward(float* dinp, const float* dout, const int* indices, i64 N, i64 C, i64 H, i64 W, i64 OH,
                         i64 OW);
i64 pool_out_size(i64 in, i64 kernel, i64 stride, i64 padding, i64 dilation = 1);

// ---------------------------------------------------------------------------------------------------------------
// adaptive_avg_pool2d (torch.nn.AdaptiveAvgPool2d, PyTorch's AdaptiveAvgPoolKernel.cpp): output cell (oh, ow)
// averages input rows [floor(oh*H/OH), ceil((oh+1)*H/OH)) and columns [floor(ow*W/OW), ceil((ow+1)*W/OW)).
// OH = OW = 1 is torchvision ResNet's head (global average: out (N, C) = mean over H*W).
void adaptive_avg_pool2d_forward(float* out, const float* inp, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW);
// dinp (N, C, H, W) written: each output cell's gradient divided by its window size, added to every cell of it.
void adaptive_avg_pool2d_backward(float* dinp, const float* dout, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW);

}  // namespace zeroplan::exec::cpu
