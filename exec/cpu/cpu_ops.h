// Reference operators of the GPT-2 step in fp32 on the CPU (Eigen for the matrix products). The CPU trainer
// is built from them, and the GPU kernel tests compare each CUDA launcher with the operator of the same name.
// Layouts follow llm.c: activations (B, T, C) row-major; linear weights (OC, C) row-major (PyTorch's Linear);
// qkv (B, T, 3C) with q, k, v each (NH, HS) inside C; logsumexp (B, NH, T).
#pragma once

#include <cstdint>

namespace zeroplan::exec::cpu {

using i64 = std::int64_t;

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, i64 B, i64 T, i64 C);
// dwte, dwpe accumulate.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, i64 B, i64 T, i64 C);

// eps 1e-5 (PyTorch/GPT-2). mean and rstd are fp32 per row.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       i64 N, i64 C);
// dinp, dw, db accumulate.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, i64 N, i64 C);

// out(N, OC) = inp(N, C) W(OC, C)^T + bias (bias may be null).
void matmul_forward(float* out, const float* inp, const float* W, const float* bias, i64 N, i64 C, i64 OC);
// dinp = dout W (overwritten); dW += dout^T inp; dbias += column sums of dout (dbias may be null).
void matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp, const float* W,
                     i64 N, i64 C, i64 OC);

// GELU, tanh approximation (GPT-2; Hendrycks & Gimpel 2016 eq. for the approximation).
void gelu_forward(float* out, const float* inp, i64 n);
void gelu_backward(float* dinp, const float* inp, const float* dout, i64 n);  // dinp overwritten

// Causal self-attention with softmax scale 1/sqrt(HS); out (B, T, C); lse (B, NH, T) natural-log logsumexp of
// the scaled, masked scores of each query row.
void attention_forward(float* out, float* lse, const float* qkv, i64 B, i64 T, i64 C, i64 NH);
// dqkv overwritten.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        i64 B, i64 T, i64 C, i64 NH);

// Softmax cross-entropy over the first V of Vp columns: losses[i] = logsumexp - logit[target];
// dlogits (may alias logits, may be null) = (softmax - onehot) * dloss, 0 in the padded columns.
void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits, const int* targets, i64 N,
                                   i64 V, i64 Vp, float dloss);

// AdamW (Loshchilov & Hutter 2019, decoupled decay; PyTorch's torch.optim.AdamW update order):
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * p),
// with g = grad * grad_scale (unscale and clip folded into one factor). wd applies where decay[i] is set.
void adamw(float* params, const float* grads, float* m, float* v, const bool* decay, i64 n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float grad_scale, int t);

}  // namespace zeroplan::exec::cpu
