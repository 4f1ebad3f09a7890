#include "exec/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

namespace zeroplan::exec::cpu {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using ConstMapMat = Eigen::Map<const RowMat>;
constexpr float kLnEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
}  // namespace

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, i64 B, i64 T, i64 C) {
  for (i64 b = 0; b < B; ++b)
    for (i64 t = 0; t < T; ++t) {
      const float* e = wte + static_cast<i64>(tokens[b * T + t]) * C;
      float* o = out + (b * T + t) * C;
      if (!wpe) {  // rotary models: the token row alone
        for (i64 c = 0; c < C; ++c) o[c] = e[c];
        continue;
      }
      const float* p = wpe + t * C;
      for (i64 c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, i64 B, i64 T, i64 C) {
  for (i64 b = 0; b < B; ++b)
    for (i64 t = 0; t < T; ++t) {
      float* de = dwte + static_cast<i64>(tokens[b * T + t]) * C;
      const float* d = dout + (b * T + t) * C;
      for (i64 c = 0; c < C; ++c) de[c] += d[c];
      if (!dwpe) continue;  // rotary models have no position embedding
      float* dp = dwpe + t * C;
      for (i64 c = 0; c < C; ++c) dp[c] += d[c];
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, i64 N,
                       i64 C) {
  for (i64 i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    double s = 0;
    for (i64 c = 0; c < C; ++c) s += x[c];
    const float m = static_cast<float>(s / C);
    double v = 0;
    for (i64 c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / std::sqrt(static_cast<float>(v / C) + kLnEps);
    for (i64 c = 0; c < C; ++c) out[i * C + c] = (x[c] - m) * r * w[c] + b[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, i64 N, i64 C) {
  for (i64 i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* d = dout + i * C;
    double dnorm_mean = 0, dnorm_norm_mean = 0;
    for (i64 c = 0; c < C; ++c) {
      const float xhat = (x[c] - mean[i]) * rstd[i];
      const float dnorm = w[c] * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * xhat;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (i64 c = 0; c < C; ++c) {
      const float xhat = (x[c] - mean[i]) * rstd[i];
      const float dnorm = w[c] * d[c];
      if (db) db[c] += d[c];
      if (dw) dw[c] += xhat * d[c];
      dinp[i * C + c] += (dnorm - static_cast<float>(dnorm_mean) - xhat * static_cast<float>(dnorm_norm_mean)) * rstd[i];
    }
  }
}

void matmul_forward(float* out, const float* inp, const float* W, const float* bias, i64 N, i64 C, i64 OC) {
  MapMat o(out, N, OC);
  o.noalias() = ConstMapMat(inp, N, C) * ConstMapMat(W, OC, C).transpose();
  if (bias) o.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, OC);
}

void matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp, const float* W, i64 N,
                     i64 C, i64 OC) {
  ConstMapMat d(dout, N, OC);
  MapMat(dinp, N, C).noalias() = d * ConstMapMat(W, OC, C);
  if (dW) MapMat(dW, OC, C).noalias() += d.transpose() * ConstMapMat(inp, N, C);
  if (dbias) Eigen::Map<Eigen::RowVectorXf>(dbias, OC) += d.colwise().sum();
}

void lora_forward(float* out, float* xa, const float* inp, const float* A, const float* B, float scaling, i64 N,
                  i64 C, i64 r, i64 OC, i64 row_offset, i64 out_rows) {
  MapMat x(xa, N, r);
  x.noalias() = ConstMapMat(inp, N, C) * ConstMapMat(A, r, C).transpose();
  const Eigen::MatrixXf lora = (x * ConstMapMat(B, out_rows, r).transpose()) * scaling;
  MapMat(out, N, OC).middleCols(row_offset, out_rows) += lora;
}

void lora_backward(float* dinp, float* dA, float* dB, const float* dout, const float* inp, const float* xa,
                   const float* A, const float* B, float scaling, i64 N, i64 C, i64 r, i64 OC, i64 row_offset,
                   i64 out_rows) {
  const Eigen::MatrixXf g = ConstMapMat(dout, N, OC).middleCols(row_offset, out_rows) * scaling;
  MapMat(dB, out_rows, r).noalias() += g.transpose() * ConstMapMat(xa, N, r);
  const Eigen::MatrixXf dxa = g * ConstMapMat(B, out_rows, r);
  MapMat(dA, r, C).noalias() += dxa.transpose() * ConstMapMat(inp, N, C);
  MapMat(dinp, N, C).noalias() += dxa * ConstMapMat(A, r, C);
}

void gelu_forward(float* out, const float* inp, i64 n) {
  for (i64 i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, i64 n) {
  for (i64 i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = std::tanh(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
  }
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, i64 N, i64 C, float eps) {
  // transformers LlamaRMSNorm: variance = mean(x^2) in fp32, x * rsqrt(variance + eps), times the weight
  for (i64 i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    double ss = 0;
    for (i64 c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * x[c];
    const float r = 1.0f / std::sqrt(static_cast<float>(ss / C) + eps);
    for (i64 c = 0; c < C; ++c) out[i * C + c] = x[c] * r * w[c];
    rstd[i] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      i64 N, i64 C) {
  // y_c = w_c x_c r with r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / C:
  // dL/dx_j = r w_j dout_j - r^3 x_j / C * sum_c w_c dout_c x_c = r (w_j dout_j - xhat_j mean(w dout xhat)).
  for (i64 i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* d = dout + i * C;
    const float r = rstd[i];
    double dot = 0;
    for (i64 c = 0; c < C; ++c) dot += static_cast<double>(w[c] * d[c]) * (x[c] * r);
    const float m = static_cast<float>(dot / C);
    for (i64 c = 0; c < C; ++c) {
      const float xhat = x[c] * r;
      if (dw) dw[c] += xhat * d[c];
      dinp[i * C + c] += (w[c] * d[c] - xhat * m) * r;
    }
  }
}

namespace {
// Turns each query and key head of every qkv row by +angle (sign 1) or -angle (sign -1), rotate-half pairing.
void rope_rotate(float* qkv, const float* cos, const float* sin, i64 B, i64 T, i64 NH, i64 NKV, i64 HS, float sign) {
  const i64 half = HS / 2, stride = (NH + 2 * NKV) * HS;
  for (i64 b = 0; b < B; ++b)
    for (i64 t = 0; t < T; ++t) {
      const float* c = cos + t * half;
      const float* s = sin + t * half;
      float* row = qkv + (b * T + t) * stride;
      for (i64 h = 0; h < NH + NKV; ++h) {  // the NH query heads, then the NKV key heads right after them
        float* x = row + h * HS;
        for (i64 i = 0; i < half; ++i) {
          const float x1 = x[i], x2 = x[i + half], sn = sign * s[i];
          x[i] = x1 * c[i] - x2 * sn;
          x[i + half] = x2 * c[i] + x1 * sn;
        }
      }
    }
}
}  // namespace

void rope_forward(float* qkv, const float* cos, const float* sin, i64 B, i64 T, i64 NH, i64 NKV, i64 HS) {
  rope_rotate(qkv, cos, sin, B, T, NH, NKV, HS, 1.0f);
}

void rope_backward(float* dqkv, const float* cos, const float* sin, i64 B, i64 T, i64 NH, i64 NKV, i64 HS) {
  // The forward is y = R x per pair with R = [[c, -s], [s, c]]; the gradient is dx = R^T dy, the turn by -angle.
  rope_rotate(dqkv, cos, sin, B, T, NH, NKV, HS, -1.0f);
}

void rope_tables(float* cos, float* sin, i64 T, i64 HS, double theta, const RopeScalingLlama3* llama3) {
  const i64 half = HS / 2;
  std::vector<float> inv_freq(half);
  for (i64 i = 0; i < half; ++i) {
    // transformers _compute_default_rope_parameters: 1 / base^(arange(0, dim, 2) / dim)
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(HS));
    if (llama3) {
      // transformers modeling_rope_utils.py _compute_llama3_parameters (Llama 3.1): wavelengths shorter than
      // old_context_len / high_freq_factor keep their frequency, longer than old_context_len / low_freq_factor
      // are slowed by `factor`, and those in between interpolate with
      // smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor),
      // inv_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq.
      const double pi = 3.14159265358979323846;
      const double old_len = static_cast<double>(llama3->original_max_position);
      const double low_freq_wavelen = old_len / llama3->low_freq_factor;
      const double high_freq_wavelen = old_len / llama3->high_freq_factor;
      const double wavelen = 2 * pi / f;
      if (wavelen > low_freq_wavelen) {
        f = f / llama3->factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const double smooth =
            (old_len / wavelen - llama3->low_freq_factor) / (llama3->high_freq_factor - llama3->low_freq_factor);
        f = (1 - smooth) * f / llama3->factor + smooth * f;
      }
    }
    inv_freq[i] = static_cast<float>(f);
  }
  for (i64 t = 0; t < T; ++t)
    for (i64 i = 0; i < half; ++i) {
      // transformers LlamaRotaryEmbedding.forward: freqs = inv_freq.float() @ position_ids.float() (one fp32
      // product per element), then cos() and sin() of the fp32 angle
      const float angle = static_cast<float>(t) * inv_freq[i];
      cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
}

void swiglu_forward(float* out, const float* gate_up, i64 N, i64 F) {
  for (i64 n = 0; n < N; ++n)
    for (i64 j = 0; j < F; ++j) {
      const float g = gate_up[n * 2 * F + j], u = gate_up[n * 2 * F + F + j];
      out[n * F + j] = g / (1.0f + std::exp(-g)) * u;
    }
}

void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, i64 N, i64 F) {
  // out = silu(g) u: d/du = silu(g); d/dg = u * silu'(g), silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
  for (i64 n = 0; n < N; ++n)
    for (i64 j = 0; j < F; ++j) {
      const float g = gate_up[n * 2 * F + j], u = gate_up[n * 2 * F + F + j], d = dout[n * F + j];
      const float sg = 1.0f / (1.0f + std::exp(-g));
      dgate_up[n * 2 * F + j] = d * u * sg * (1.0f + g * (1.0f - sg));
      dgate_up[n * 2 * F + F + j] = d * g * sg;
    }
}

void attention_forward(float* out, float* lse, const float* qkv, i64 B, i64 T, i64 NH, i64 NKV, i64 HS) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const i64 stride = (NH + 2 * NKV) * HS, group = NH / NKV;
  std::vector<float> s(T);
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < NH; ++h) {
      const i64 k_col = (NH + h / group) * HS, v_col = (NH + NKV + h / group) * HS;  // repeat_kv
      for (i64 t = 0; t < T; ++t) {
        const float* q = qkv + (b * T + t) * stride + h * HS;
        float mx = -std::numeric_limits<float>::infinity();
        for (i64 u = 0; u <= t; ++u) {
          const float* k = qkv + (b * T + u) * stride + k_col;
          float dot = 0;
          for (i64 d = 0; d < HS; ++d) dot += q[d] * k[d];
          s[u] = dot * scale;
          mx = std::max(mx, s[u]);
        }
        double sum = 0;
        for (i64 u = 0; u <= t; ++u) sum += std::exp(s[u] - mx);
        const float l = mx + static_cast<float>(std::log(sum));
        lse[(b * NH + h) * T + t] = l;
        float* o = out + (b * T + t) * NH * HS + h * HS;
        for (i64 d = 0; d < HS; ++d) o[d] = 0;
        for (i64 u = 0; u <= t; ++u) {
          const float p = std::exp(s[u] - l);
          const float* v = qkv + (b * T + u) * stride + v_col;
          for (i64 d = 0; d < HS; ++d) o[d] += p * v[d];
        }
      }
    }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, i64 B,
                        i64 T, i64 NH, i64 NKV, i64 HS) {
  // FlashAttention-2 (Dao 2023) Algorithm 2's math without the tiling: D = rowsum(dO * O); P = exp(S - lse);
  // dV = P^T dO; dP = dO V^T; dS = P (dP - D); dQ = dS K * scale; dK = dS^T Q * scale. Under grouped-query
  // attention a key/value head feeds every query head of its group, so its dK and dV add over them.
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const i64 stride = (NH + 2 * NKV) * HS, group = NH / NKV, C = NH * HS;
  std::fill(dqkv, dqkv + B * T * stride, 0.0f);
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < NH; ++h) {
      const i64 k_col = (NH + h / group) * HS, v_col = (NH + NKV + h / group) * HS;
      for (i64 t = 0; t < T; ++t) {
        const float* q = qkv + (b * T + t) * stride + h * HS;
        const float* o = out + (b * T + t) * C + h * HS;
        const float* dO = dout + (b * T + t) * C + h * HS;
        float* dq = dqkv + (b * T + t) * stride + h * HS;
        float D = 0;
        for (i64 d = 0; d < HS; ++d) D += dO[d] * o[d];
        const float l = lse[(b * NH + h) * T + t];
        for (i64 u = 0; u <= t; ++u) {
          const float* k = qkv + (b * T + u) * stride + k_col;
          const float* v = qkv + (b * T + u) * stride + v_col;
          float* dk = dqkv + (b * T + u) * stride + k_col;
          float* dv = dqkv + (b * T + u) * stride + v_col;
          float sdot = 0, dp = 0;
          for (i64 d = 0; d < HS; ++d) {
            sdot += q[d] * k[d];
            dp += dO[d] * v[d];
          }
          const float p = std::exp(sdot * scale - l);
          const float ds = p * (dp - D) * scale;
          for (i64 d = 0; d < HS; ++d) {
            dv[d] += p * dO[d];
            dq[d] += ds * k[d];
            dk[d] += ds * q[d];
          }
        }
      }
    }
}

void crossentropy_forward_backward(float* losses, float* dlogits, const float* logits, const int* targets, i64 N,
                                   i64 V, i64 Vp, float dloss) {
  for (i64 i = 0; i < N; ++i) {
    const float* x = logits + i * Vp;
    float mx = -std::numeric_limits<float>::infinity();
    for (i64 j = 0; j < V; ++j) mx = std::max(mx, x[j]);
    double sum = 0;
    for (i64 j = 0; j < V; ++j) sum += std::exp(static_cast<double>(x[j] - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    losses[i] = lse - x[targets[i]];
    if (dlogits) {
      float* d = dlogits + i * Vp;
      for (i64 j = 0; j < Vp; ++j) {
        const float p = j < V ? std::exp(x[j] - lse) : 0.0f;
        d[j] = (p - (j == targets[i] ? 1.0f : 0.0f)) * dloss;
      }
    }
  }
}

void adamw(float* params, const float* grads, float* m, float* v, const bool* decay, i64 n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float grad_scale, int t) {
  const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  for (i64 i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float mhat = m[i] / bc1;
    const float vhat = v[i] / bc2;
    const float wd = decay[i] ? weight_decay : 0.0f;
    params[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * params[i]);
  }
}

}  // namespace zeroplan::exec::cpu
