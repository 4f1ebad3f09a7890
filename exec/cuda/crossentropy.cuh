// Fused softmax + cross-entropy over the vocabulary: one block per token row computes the logsumexp over the
// first V of Vp columns (padded columns excluded), the loss lse - logit[target], and, when asked, writes
// dlogits = (softmax - onehot) * dloss in place over the logits (0 in the padded columns), so no second
// B*T*Vp buffer exists (activation_accounting.h: logits component).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

template <typename T>
void crossentropy_forward_backward(float* losses, T* logits, const int* targets, std::int64_t N, std::int64_t V,
                                   std::int64_t Vp, float dloss, bool write_grad, cudaStream_t stream);

// An image classifier's loss (layer-list networks: N samples of `classes` unpadded logits), one warp per sample:
// losses[n] = logsumexp - logit[label], correct[n] = 1 when the first largest logit is the label, and, when asked,
// dlogits = (softmax - onehot) * dloss in place, dloss read from the device (one fp32: a CUDA graph of the training
// micro-step replays with whatever loss scale the step has).
template <typename T>
void class_crossentropy_forward_backward(float* losses, int* correct, T* logits, const int* labels, std::int64_t N,
                                         std::int64_t classes, const float* dloss, bool write_grad, cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
