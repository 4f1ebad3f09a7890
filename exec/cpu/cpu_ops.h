// Reference operators of the GPT-2 and Llama steps in fp32 on the CPU (Eigen for the matrix products). The CPU
// trainer is built from them, and the GPU kernel tests compare each CUDA launcher with the operator of the same
// name.
// Layouts follow llm.c: activations (B, T, C) row-major; linear weights (OC, C) row-major (PyTorch's Linear);
// logsumexp (B, NH, T). qkv rows (B*T) x (NH + 2*NKV)*HS: the NH query heads at column h*HS, then the NKV key
// heads at NH*HS + g*HS, then the NKV value heads at (NH + NKV)*HS + g*HS (GPT-2: NKV == NH, i.e. (B, T, 3C)).
#pragma once

#include <cstdint>

namespace zeroplan::exec::cpu {

using i64 = std::int64_t;

// wpe null (rotary models): out is the token rows alone; dwpe null likewise.
void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, i64 B, i64 T, i64 C);
// dwte, dwpe accumulate.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, i64 B, i64 T, i64 C);

// eps 1e-5 (PyTorch/GPT-2). mean and rstd are fp32 per row.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       i64 N, i64 C);
// dinp, dw, db accumulate; dw and db may be null (a frozen norm: LoRA's base, which autograd gives no gradient).
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, i64 N, i64 C);

// out(N, OC) = inp(N, C) W(OC, C)^T + bias (bias may be null).
void matmul_forward(float* out, const float* inp, const float* W, const float* bias, i64 N, i64 C, i64 OC);
// dinp = dout W (overwritten); dW += dout^T inp; dbias += column sums of dout (dW and dbias may be null: frozen).
void matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp, const float* W,
                     i64 N, i64 C, i64 OC);

// GELU, tanh approximation (GPT-2; Hendrycks & Gimpel 2016 eq. for the approximation).
void gelu_forward(float* out, const float* inp, i64 n);
void gelu_backward(float* dinp, const float* inp, const float* dout, i64 n);  // dinp overwritten

// RMSNorm (Zhang & Sennrich 2019, arXiv 1910.07467; transformers' LlamaRMSNorm):
// LoRA (PEFT 0.21 peft/tuners/lora/layer.py Linear.forward, lora_dropout 0): out[:, row_offset + o] +=
// (xa B^T)[:, o] * scaling with xa = inp A^T saved (N x r), for o < out_rows; out has OC columns per row. A is
// (r, C), B (out_rows, r).
void lora_forward(float* out, float* xa, const float* inp, const float* A, const float* B, float scaling, i64 N,
                  i64 C, i64 r, i64 OC, i64 row_offset, i64 out_rows);
// Its backward from dout (N x OC): with g = scaling * dout[:, row_offset : row_offset + out_rows],
// dB += g^T xa, dA += (g B)^T inp, dinp += (g B) A (dinp accumulates: the base matmul's input gradient is there).
void lora_backward(float* dinp, float* dA, float* dB, const float* dout, const float* inp, const float* xa,
                   const float* A, const float* B, float scaling, i64 N, i64 C, i64 r, i64 OC, i64 row_offset,
                   i64 out_rows);

// out = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps) per row, in fp32; rstd saved per row.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, i64 N, i64 C, float eps);
// dinp, dw accumulate (like layernorm_backward): dinp += rstd * (w*dout - xhat * mean(w*dout*xhat)), xhat = x*rstd;
// dw += sum over rows of dout * xhat (dw may be null: frozen).
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      i64 N, i64 C);

// Rotary position embeddings (Su et al. 2021, arXiv 2104.09864) in the rotate-half convention of transformers'
// Llama (apply_rotary_pos_emb: x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x2, x1)): element i of a head
// pairs with element i + HS/2 and the pair turns by angle(t, i):
//   y[i] = x[i] cos - x[i + HS/2] sin,   y[i + HS/2] = x[i + HS/2] cos + x[i] sin.
// Applied in place to the NH query heads and the NKV key heads of each qkv row (the values are untouched).
// cos, sin: (T, HS/2) tables from rope_tables; the row of token (b, t) uses table row t.
void rope_forward(float* qkv, const float* cos, const float* sin, i64 B, i64 T, i64 NH, i64 NKV, i64 HS);
// The transpose (a rotation by -angle), in place on dqkv's query and key parts.
void rope_backward(float* dqkv, const float* cos, const float* sin, i64 B, i64 T, i64 NH, i64 NKV, i64 HS);

// Llama 3's "llama3" rope_scaling (transformers modeling_rope_utils.py, _compute_llama3_parameters).
struct RopeScalingLlama3 {
  double factor;                 // 8 for Llama 3.1
  double low_freq_factor;        // 1
  double high_freq_factor;       // 4
  i64 original_max_position;     // original_max_position_embeddings, 8192
};
// cos, sin: T x (HS/2) floats each. inv_freq[i] = theta^(-2i/HS) (in double, rescaled by llama3 when not null,
// then rounded to float as transformers holds inv_freq in fp32); angle = float(t) * inv_freq as an fp32 product
// (transformers' fp32 inv_freq @ position_ids); cos and sin of that fp32 angle, rounded to float.
void rope_tables(float* cos, float* sin, i64 T, i64 HS, double theta, const RopeScalingLlama3* llama3);

// SwiGLU (Shazeer 2020, arXiv 2002.05202; Llama's MLP act_fn(gate_proj(x)) * up_proj(x)): gate_up rows are
// N x 2F with the gate in columns [0, F) and the up projection in [F, 2F); out (N x F) = silu(gate) * up,
// silu(x) = x * sigmoid(x).
void swiglu_forward(float* out, const float* gate_up, i64 N, i64 F);
// dgate_up (N x 2F) overwritten; may alias gate_up (each element pair reads its gate, up and dout before writing).
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, i64 N, i64 F);

// Causal self-attention with grouped-query attention (Ainslie et al. 2023, arXiv 2305.13245): query head h uses
// key/value head h / (NH / NKV) (transformers' repeat_kv); NH % NKV == 0. Softmax scale 1/sqrt(HS); out rows
// (B*T) x NH*HS; lse (B, NH, T) natural-log logsumexp of the scaled, masked scores of each query row.
void attention_forward(float* out, float* lse, const float* qkv, i64 B, i64 T, i64 NH, i64 NKV, i64 HS);
// dqkv overwritten; dK, dV of a key/value head are summed over the query heads of its group.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, i64 B,
                        i64 T, i64 NH, i64 NKV, i64 HS);

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
