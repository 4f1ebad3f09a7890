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
      const float* p = wpe + t * C;
      float* o = out + (b * T + t) * C;
      for (i64 c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, i64 B, i64 T, i64 C) {
  for (i64 b = 0; b < B; ++b)
    for (i64 t = 0; t < T; ++t) {
      float* de = dwte + static_cast<i64>(tokens[b * T + t]) * C;
      float* dp = dwpe + t * C;
      const float* d = dout + (b * T + t) * C;
      for (i64 c = 0; c < C; ++c) {
        de[c] += d[c];
        dp[c] += d[c];
      }
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
      db[c] += d[c];
      dw[c] += xhat * d[c];
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
  MapMat(dW, OC, C).noalias() += d.transpose() * ConstMapMat(inp, N, C);
  if (dbias) Eigen::Map<Eigen::RowVectorXf>(dbias, OC) += d.colwise().sum();
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

void attention_forward(float* out, float* lse, const float* qkv, i64 B, i64 T, i64 C, i64 NH) {
  const i64 HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  std::vector<float> s(T);
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < NH; ++h)
      for (i64 t = 0; t < T; ++t) {
        const float* q = qkv + (b * T + t) * 3 * C + h * HS;
        float mx = -std::numeric_limits<float>::infinity();
        for (i64 u = 0; u <= t; ++u) {
          const float* k = qkv + (b * T + u) * 3 * C + C + h * HS;
          float dot = 0;
          for (i64 d = 0; d < HS; ++d) dot += q[d] * k[d];
          s[u] = dot * scale;
          mx = std::max(mx, s[u]);
        }
        double sum = 0;
        for (i64 u = 0; u <= t; ++u) sum += std::exp(s[u] - mx);
        const float l = mx + static_cast<float>(std::log(sum));
        lse[(b * NH + h) * T + t] = l;
        float* o = out + (b * T + t) * C + h * HS;
        for (i64 d = 0; d < HS; ++d) o[d] = 0;
        for (i64 u = 0; u <= t; ++u) {
          const float p = std::exp(s[u] - l);
          const float* v = qkv + (b * T + u) * 3 * C + 2 * C + h * HS;
          for (i64 d = 0; d < HS; ++d) o[d] += p * v[d];
        }
      }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, i64 B,
                        i64 T, i64 C, i64 NH) {
  // FlashAttention-2 (Dao 2023) Algorithm 2's math without the tiling: D = rowsum(dO * O); P = exp(S - lse);
  // dV = P^T dO; dP = dO V^T; dS = P (dP - D); dQ = dS K * scale; dK = dS^T Q * scale.
  const i64 HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  std::fill(dqkv, dqkv + B * T * 3 * C, 0.0f);
  for (i64 b = 0; b < B; ++b)
    for (i64 h = 0; h < NH; ++h)
      for (i64 t = 0; t < T; ++t) {
        const float* q = qkv + (b * T + t) * 3 * C + h * HS;
        const float* o = out + (b * T + t) * C + h * HS;
        const float* dO = dout + (b * T + t) * C + h * HS;
        float* dq = dqkv + (b * T + t) * 3 * C + h * HS;
        float D = 0;
        for (i64 d = 0; d < HS; ++d) D += dO[d] * o[d];
        const float l = lse[(b * NH + h) * T + t];
        for (i64 u = 0; u <= t; ++u) {
          const float* k = qkv + (b * T + u) * 3 * C + C + h * HS;
          const float* v = qkv + (b * T + u) * 3 * C + 2 * C + h * HS;
          float* dk = dqkv + (b * T + u) * 3 * C + C + h * HS;
          float* dv = dqkv + (b * T + u) * 3 * C + 2 * C + h * HS;
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
