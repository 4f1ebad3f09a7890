#include "exec/cpu/cnn_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace zeroplan::exec::cpu {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using ConstMapMat = Eigen::Map<const RowMat>;

// Column matrices of one chunk of images stay near this many floats (32 MiB); a chunk holds at least one image.
constexpr i64 kColBudget = i64{1} << 23;

void check_geom(const Conv2dGeom& g) {
  if (g.N < 0 || g.C <= 0 || g.H <= 0 || g.W <= 0 || g.OC <= 0 || g.KH <= 0 || g.KW <= 0 || g.stride_h <= 0 ||
      g.stride_w <= 0 || g.pad_h < 0 || g.pad_w < 0 || g.dil_h <= 0 || g.dil_w <= 0 || g.groups <= 0)
    throw std::invalid_argument("conv2d: non-positive size, stride, dilation or groups, or negative padding");
  if (g.C % g.groups != 0 || g.OC % g.groups != 0)
    throw std::invalid_argument("conv2d: C = " + std::to_string(g.C) + " and OC = " + std::to_string(g.OC) +
                                " must be multiples of groups = " + std::to_string(g.groups));
  if (g.OH() <= 0 || g.OW() <= 0) throw std::invalid_argument("conv2d: kernel larger than the padded input");
}

i64 images_per_chunk(const Conv2dGeom& g, i64 K) {
  return std::clamp<i64>(kColBudget / std::max<i64>(1, K * g.OH() * g.OW()), 1, std::max<i64>(1, g.N));
}

// col (K x nb*OHW), K = Cg*KH*KW, row (c*KH + kh)*KW + kw, column (n - n0)*OHW + oh*OW + ow: the input of images
// [n0, n0 + nb), channels [c0, c0 + Cg), at the tap (kh, kw) of output (oh, ow); 0 in the padding.
void im2col(float* col, const float* inp, const Conv2dGeom& g, i64 n0, i64 nb, i64 c0, i64 Cg) {
  const i64 OH = g.OH(), OW = g.OW(), OHW = OH * OW, L = nb * OHW;
  for (i64 c = 0; c < Cg; ++c)
    for (i64 kh = 0; kh < g.KH; ++kh)
      for (i64 kw = 0; kw < g.KW; ++kw) {
        float* row = col + ((c * g.KH + kh) * g.KW + kw) * L;
        for (i64 j = 0; j < nb; ++j) {
          const float* plane = inp + ((n0 + j) * g.C + c0 + c) * g.H * g.W;
          float* dst = row + j * OHW;
          for (i64 oh = 0; oh < OH; ++oh) {
            const i64 ih = oh * g.stride_h - g.pad_h + kh * g.dil_h;
            float* d = dst + oh * OW;
            if (ih < 0 || ih >= g.H) {
              std::fill(d, d + OW, 0.0f);
              continue;
            }
            const float* src = plane + ih * g.W;
            for (i64 ow = 0; ow < OW; ++ow) {
              const i64 iw = ow * g.stride_w - g.pad_w + kw * g.dil_w;
              d[ow] = (iw >= 0 && iw < g.W) ? src[iw] : 0.0f;
            }
          }
        }
      }
}

// The transpose of im2col: dinp(images [n0, n0+nb), channels [c0, c0+Cg)) += scatter of dcol.
void col2im_add(float* dinp, const float* dcol, const Conv2dGeom& g, i64 n0, i64 nb, i64 c0, i64 Cg) {
  const i64 OH = g.OH(), OW = g.OW(), OHW = OH * OW, L = nb * OHW;
  for (i64 c = 0; c < Cg; ++c)
    for (i64 kh = 0; kh < g.KH; ++kh)
      for (i64 kw = 0; kw < g.KW; ++kw) {
        const float* row = dcol + ((c * g.KH + kh) * g.KW + kw) * L;
        for (i64 j = 0; j < nb; ++j) {
          float* plane = dinp + ((n0 + j) * g.C + c0 + c) * g.H * g.W;
          const float* s = row + j * OHW;
          for (i64 oh = 0; oh < OH; ++oh) {
            const i64 ih = oh * g.stride_h - g.pad_h + kh * g.dil_h;
            if (ih < 0 || ih >= g.H) continue;
            float* dst = plane + ih * g.W;
            const float* sr = s + oh * OW;
            for (i64 ow = 0; ow < OW; ++ow) {
              const i64 iw = ow * g.stride_w - g.pad_w + kw * g.dil_w;
              if (iw >= 0 && iw < g.W) dst[iw] += sr[ow];
            }
          }
        }
      }
}
}  // namespace

Conv2dGeom conv2d_geom(i64 N, i64 C, i64 H, i64 W, i64 OC, i64 K, i64 stride, i64 padding, i64 dilation,
                       i64 groups) {
  Conv2dGeom g;
  g.N = N, g.C = C, g.H = H, g.W = W, g.OC = OC, g.KH = K, g.KW = K;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = padding;
  g.dil_h = g.dil_w = dilation;
  g.groups = groups;
  return g;
}

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias, const Conv2dGeom& g) {
  check_geom(g);
  const i64 Cg = g.C / g.groups, OCg = g.OC / g.groups, K = Cg * g.KH * g.KW;
  const i64 OHW = g.OH() * g.OW(), chunk = images_per_chunk(g, K);
  std::vector<float> col, res;
  for (i64 n0 = 0; n0 < g.N; n0 += chunk) {
    const i64 nb = std::min(chunk, g.N - n0), L = nb * OHW;
    col.resize(static_cast<std::size_t>(K * L));
    res.resize(static_cast<std::size_t>(OCg * L));
    for (i64 gr = 0; gr < g.groups; ++gr) {
      im2col(col.data(), inp, g, n0, nb, gr * Cg, Cg);
      MapMat(res.data(), OCg, L).noalias() =
          ConstMapMat(weight + gr * OCg * K, OCg, K) * ConstMapMat(col.data(), K, L);
      for (i64 j = 0; j < nb; ++j)
        for (i64 oc = 0; oc < OCg; ++oc) {
          const i64 ch = gr * OCg + oc;
          const float b = bias ? bias[ch] : 0.0f;
          const float* s = res.data() + oc * L + j * OHW;
          float* d = out + ((n0 + j) * g.OC + ch) * OHW;
          for (i64 p = 0; p < OHW; ++p) d[p] = s[p] + b;
        }
    }
  }
}

void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, const Conv2dGeom& g) {
  check_geom(g);
  const i64 Cg = g.C / g.groups, OCg = g.OC / g.groups, K = Cg * g.KH * g.KW;
  const i64 OHW = g.OH() * g.OW(), chunk = images_per_chunk(g, K);
  if (dbias)
    for (i64 n = 0; n < g.N; ++n)
      for (i64 oc = 0; oc < g.OC; ++oc) {
        const float* d = dout + (n * g.OC + oc) * OHW;
        double s = 0;
        for (i64 p = 0; p < OHW; ++p) s += d[p];
        dbias[oc] += static_cast<float>(s);
      }
  if (dinp) std::fill(dinp, dinp + g.N * g.C * g.H * g.W, 0.0f);
  std::vector<float> col, dcol, dmat;
  for (i64 n0 = 0; n0 < g.N; n0 += chunk) {
    const i64 nb = std::min(chunk, g.N - n0), L = nb * OHW;
    col.resize(static_cast<std::size_t>(K * L));
    dmat.resize(static_cast<std::size_t>(OCg * L));
    if (dinp) dcol.resize(static_cast<std::size_t>(K * L));
    for (i64 gr = 0; gr < g.groups; ++gr) {
      // dout of this group's output channels as an (OCg x L) matrix, images side by side like col's columns
      for (i64 j = 0; j < nb; ++j)
        for (i64 oc = 0; oc < OCg; ++oc)
          std::copy_n(dout + ((n0 + j) * g.OC + gr * OCg + oc) * OHW, OHW, dmat.data() + oc * L + j * OHW);
      ConstMapMat D(dmat.data(), OCg, L);
      im2col(col.data(), inp, g, n0, nb, gr * Cg, Cg);
      MapMat(dweight + gr * OCg * K, OCg, K).noalias() += D * ConstMapMat(col.data(), K, L).transpose();
      if (!dinp) continue;
      MapMat(dcol.data(), K, L).noalias() = ConstMapMat(weight + gr * OCg * K, OCg, K).transpose() * D;
      col2im_add(dinp, dcol.data(), g, n0, nb, gr * Cg, Cg);
    }
  }
}

void batch_norm_forward_train(float* out, float* mean, float* rstd, float* running_mean, float* running_var,
                              const float* inp, const float* gamma, const float* beta, i64 N, i64 C, i64 HW,
                              float momentum, float eps) {
  const i64 m = N * HW;
  if (m < 2) throw std::invalid_argument("batch_norm: expected more than 1 value per channel when training");
  for (i64 c = 0; c < C; ++c) {
    double s = 0;
    for (i64 n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
      for (i64 p = 0; p < HW; ++p) s += x[p];
    }
    const double mu = s / static_cast<double>(m);
    double ss = 0;
    for (i64 n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
      for (i64 p = 0; p < HW; ++p) ss += (x[p] - mu) * (x[p] - mu);
    }
    const double var = ss / static_cast<double>(m);
    const float mf = static_cast<float>(mu);
    const float r = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    mean[c] = mf;
    rstd[c] = r;
    const float w = gamma ? gamma[c] : 1.0f, b = beta ? beta[c] : 0.0f;
    for (i64 n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
      float* o = out + (n * C + c) * HW;
      for (i64 p = 0; p < HW; ++p) o[p] = (x[p] - mf) * r * w + b;
    }
    if (running_mean && running_var) {
      const double unbiased = ss / static_cast<double>(m - 1);
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mu);
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
}

void batch_norm_forward_eval(float* out, const float* inp, const float* running_mean, const float* running_var,
                             const float* gamma, const float* beta, i64 N, i64 C, i64 HW, float eps) {
  for (i64 c = 0; c < C; ++c) {
    const float r = 1.0f / std::sqrt(running_var[c] + eps);
    const float w = gamma ? gamma[c] : 1.0f, b = beta ? beta[c] : 0.0f, mu = running_mean[c];
    for (i64 n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
      float* o = out + (n * C + c) * HW;
      for (i64 p = 0; p < HW; ++p) o[p] = (x[p] - mu) * r * w + b;
    }
  }
}

void batch_norm_backward(float* dinp, float* dgamma, float* dbeta, const float* dout, const float* inp,
                         const float* gamma, const float* mean, const float* rstd, i64 N, i64 C, i64 HW) {
  const double m = static_cast<double>(N * HW);
  for (i64 c = 0; c < C; ++c) {
    const float mu = mean[c], r = rstd[c], w = gamma ? gamma[c] : 1.0f;
    double sd = 0, sdx = 0;  // sum(dout), sum(dout * xhat)
    for (i64 n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
      const float* d = dout + (n * C + c) * HW;
      for (i64 p = 0; p < HW; ++p) {
        sd += d[p];
        sdx += static_cast<double>(d[p]) * ((x[p] - mu) * r);
      }
    }
    if (dgamma) dgamma[c] += static_cast<float>(sdx);
    if (dbeta) dbeta[c] += static_cast<float>(sd);
    const float a = static_cast<float>(sd / m), bcoef = static_cast<float>(sdx / m), k = w * r;
    for (i64 n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
      const float* d = dout + (n * C + c) * HW;
      float* o = dinp + (n * C + c) * HW;
      for (i64 p = 0; p < HW; ++p) o[p] = k * (d[p] - a - (x[p] - mu) * r * bcoef);
    }
  }
}

void relu_forward(float* out, const float* inp, i64 n) {
  for (i64 i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* out, const float* dout, i64 n) {
  for (i64 i = 0; i < n; ++i) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

i64 pool_out_size(i64 in, i64 kernel, i64 stride, i64 padding, i64 dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

void max_pool2d_forward(float* out, int* indices, const float* inp, i64 N, i64 C, i64 H, i64 W, i64 kernel,
                        i64 stride, i64 padding, i64 dilation) {
  if (kernel <= 0 || stride <= 0 || dilation <= 0 || padding < 0 || padding > kernel / 2)
    throw std::invalid_argument("max_pool2d: padding must be at most half the kernel (PyTorch's check)");
  const i64 OH = pool_out_size(H, kernel, stride, padding, dilation);
  const i64 OW = pool_out_size(W, kernel, stride, padding, dilation);
  if (OH <= 0 || OW <= 0) throw std::invalid_argument("max_pool2d: empty output");
  for (i64 nc = 0; nc < N * C; ++nc) {
    const float* x = inp + nc * H * W;
    float* o = out + nc * OH * OW;
    int* ind = indices + nc * OH * OW;
    for (i64 oh = 0; oh < OH; ++oh)
      for (i64 ow = 0; ow < OW; ++ow) {
        const i64 h0 = oh * stride - padding, w0 = ow * stride - padding;
        float best = -std::numeric_limits<float>::infinity();
        i64 arg = -1;
        for (i64 kh = 0; kh < kernel; ++kh) {
          const i64 ih = h0 + kh * dilation;
          if (ih < 0 || ih >= H) continue;
          for (i64 kw = 0; kw < kernel; ++kw) {
            const i64 iw = w0 + kw * dilation;
            if (iw < 0 || iw >= W) continue;
            const float v = x[ih * W + iw];
            if (arg < 0) arg = ih * W + iw;  // PyTorch's initial maxindex: the first valid position
            if (v > best || std::isnan(v)) {  // PyTorch's test: a later NaN replaces an earlier one too
              best = v;
              arg = ih * W + iw;
            }
          }
        }
        o[oh * OW + ow] = best;
        ind[oh * OW + ow] = static_cast<int>(arg);
      }
  }
}

void max_pool2d_backward(float* dinp, const float* dout, const int* indices, i64 N, i64 C, i64 H, i64 W, i64 OH,
                         i64 OW) {
  std::fill(dinp, dinp + N * C * H * W, 0.0f);
  for (i64 nc = 0; nc < N * C; ++nc) {
    float* dx = dinp + nc * H * W;
    const float* d = dout + nc * OH * OW;
    const int* ind = indices + nc * OH * OW;
    for (i64 p = 0; p < OH * OW; ++p) dx[ind[p]] += d[p];
  }
}

void adaptive_avg_pool2d_forward(float* out, const float* inp, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW) {
  for (i64 nc = 0; nc < N * C; ++nc) {
    const float* x = inp + nc * H * W;
    for (i64 oh = 0; oh < OH; ++oh) {
      const i64 h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
      for (i64 ow = 0; ow < OW; ++ow) {
        const i64 w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
        double s = 0;
        for (i64 ih = h0; ih < h1; ++ih)
          for (i64 iw = w0; iw < w1; ++iw) s += x[ih * W + iw];
        out[nc * OH * OW + oh * OW + ow] = static_cast<float>(s / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
    }
  }
}

void adaptive_avg_pool2d_backward(float* dinp, const float* dout, i64 N, i64 C, i64 H, i64 W, i64 OH, i64 OW) {
  std::fill(dinp, dinp + N * C * H * W, 0.0f);
  for (i64 nc = 0; nc < N * C; ++nc) {
    float* dx = dinp + nc * H * W;
    for (i64 oh = 0; oh < OH; ++oh) {
      const i64 h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
      for (i64 ow = 0; ow < OW; ++ow) {
        const i64 w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
        const float g = dout[nc * OH * OW + oh * OW + ow] / static_cast<float>((h1 - h0) * (w1 - w0));
        for (i64 ih = h0; ih < h1; ++ih)
          for (i64 iw = w0; iw < w1; ++iw) dx[ih * W + iw] += g;
      }
    }
  }
}

}  // namespace zeroplan::exec::cpu
