// The CNN reference operators (exec/cpu/cnn_ops.h) against naive definitions written here and against finite
// differences. Finite differences: central, in double, of a scalar loss sum(out * R) (R a fixed random tensor)
// computed from the fp32 forward. Conv, pooling and the affine parts of batch_norm are (piecewise) linear in what
// is perturbed, so their differences are exact up to fp32 rounding of the loss; batch_norm's input gradient also
// carries the O(h^2) truncation of a nonlinear function. Tolerance: |analytic - fd| <= abs + rel * |fd| as stated at
// each check (abs 5e-3, rel 1e-2 unless said otherwise).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "exec/cpu/cnn_ops.h"

using namespace zeroplan::exec;
using cpu::Conv2dGeom;
using cpu::i64;

namespace {

std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Central difference of objective in every `every`-th coordinate of x against grad; returns the largest
// |grad - fd| / (1 + |fd|) seen (reported by the callers' traces).
template <typename Objective>
double expect_gradient(const std::vector<float>& x, const std::vector<float>& grad, Objective objective, int every,
                       float h, double abs_tol, double rel_tol, const std::string& what) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); i += every) {
    auto p = x, m = x;
    p[i] += h;
    m[i] -= h;
    const double fd = (objective(p) - objective(m)) / (static_cast<double>(p[i]) - m[i]);
    EXPECT_NEAR(grad[i], fd, abs_tol + rel_tol * std::fabs(fd)) << what << " element " << i;
    worst = std::max(worst, std::fabs(grad[i] - fd) / (1.0 + std::fabs(fd)));
  }
  return worst;
}

// The direct 7-loop convolution of the Conv2d docs' formula, in double: zero padding, groups, dilation.
std::vector<double> naive_conv(const std::vector<float>& x, const std::vector<float>& w, const float* bias,
                               const Conv2dGeom& g) {
  const i64 OH = g.OH(), OW = g.OW(), Cg = g.C / g.groups, OCg = g.OC / g.groups;
  std::vector<double> out(static_cast<std::size_t>(g.N * g.OC * OH * OW));
  for (i64 n = 0; n < g.N; ++n)
    for (i64 oc = 0; oc < g.OC; ++oc)
      for (i64 oh = 0; oh < OH; ++oh)
        for (i64 ow = 0; ow < OW; ++ow) {
          double s = bias ? bias[oc] : 0.0;
          const i64 grp = oc / OCg;
          for (i64 c = 0; c < Cg; ++c)
            for (i64 kh = 0; kh < g.KH; ++kh)
              for (i64 kw = 0; kw < g.KW; ++kw) {
                const i64 ih = oh * g.stride_h - g.pad_h + kh * g.dil_h;
                const i64 iw = ow * g.stride_w - g.pad_w + kw * g.dil_w;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                s += static_cast<double>(w[((oc * Cg + c) * g.KH + kh) * g.KW + kw]) *
                     x[((n * g.C + grp * Cg + c) * g.H + ih) * g.W + iw];
              }
          out[((n * g.OC + oc) * OH + oh) * OW + ow] = s;
        }
  return out;
}

// The adjoint of naive_conv in double: dx and dw of sum(out * d).
void naive_conv_backward(std::vector<double>& dx, std::vector<double>& dw, const std::vector<float>& d,
                         const std::vector<float>& x, const std::vector<float>& w, const Conv2dGeom& g) {
  const i64 OH = g.OH(), OW = g.OW(), Cg = g.C / g.groups, OCg = g.OC / g.groups;
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  for (i64 n = 0; n < g.N; ++n)
    for (i64 oc = 0; oc < g.OC; ++oc)
      for (i64 oh = 0; oh < OH; ++oh)
        for (i64 ow = 0; ow < OW; ++ow) {
          const double dv = d[((n * g.OC + oc) * OH + oh) * OW + ow];
          const i64 grp = oc / OCg;
          for (i64 c = 0; c < Cg; ++c)
            for (i64 kh = 0; kh < g.KH; ++kh)
              for (i64 kw = 0; kw < g.KW; ++kw) {
                const i64 ih = oh * g.stride_h - g.pad_h + kh * g.dil_h;
                const i64 iw = ow * g.stride_w - g.pad_w + kw * g.dil_w;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                const i64 wi = ((oc * Cg + c) * g.KH + kh) * g.KW + kw;
                const i64 xi = ((n * g.C + grp * Cg + c) * g.H + ih) * g.W + iw;
                dw[wi] += dv * x[xi];
                dx[xi] += dv * w[wi];
              }
        }
}

struct ConvCase {
  const char* name;
  Conv2dGeom g;
  bool bias;
};

std::vector<ConvCase> conv_cases() {
  Conv2dGeom rect;  // non-square kernel with distinct h/w stride, padding and dilation
  rect.N = 2, rect.C = 3, rect.H = 7, rect.W = 9, rect.OC = 4, rect.KH = 3, rect.KW = 2;
  rect.stride_h = 2, rect.stride_w = 1, rect.pad_h = 1, rect.pad_w = 0, rect.dil_h = 1, rect.dil_w = 2;
  return {
      {"stem 7x7 s2 p3", cpu::conv2d_geom(2, 3, 15, 14, 4, 7, 2, 3), false},
      {"3x3 s1 p1", cpu::conv2d_geom(2, 4, 6, 6, 5, 3, 1, 1), true},
      {"3x3 s2 p1", cpu::conv2d_geom(2, 4, 7, 6, 3, 3, 2, 1), false},
      {"1x1 s2 (downsample)", cpu::conv2d_geom(2, 6, 7, 7, 4, 1, 2, 0), false},
      {"1x1 s1", cpu::conv2d_geom(3, 5, 4, 3, 7, 1, 1, 0), true},
      {"3x3 dilation 2 p2", cpu::conv2d_geom(2, 3, 8, 8, 4, 3, 1, 2, 2), true},
      {"3x3 groups 2", cpu::conv2d_geom(2, 4, 6, 5, 6, 3, 1, 1, 1, 2), true},
      {"3x3 depthwise", cpu::conv2d_geom(2, 4, 6, 6, 4, 3, 1, 1, 1, 4), false},
      {"3x3 depthwise x2 s2", cpu::conv2d_geom(2, 3, 7, 7, 6, 3, 2, 1, 1, 3), true},
      {"rect kernel/stride/dilation", rect, true},
  };
}

}  // namespace

TEST(CnnOps, Conv2dOutputSizeFollowsTheConv2dFormula) {
  EXPECT_EQ(cpu::conv2d_geom(1, 3, 224, 224, 64, 7, 2, 3).OH(), 112);  // ResNet stem at ImageNet size
  EXPECT_EQ(cpu::conv2d_geom(1, 3, 32, 32, 64, 7, 2, 3).OH(), 16);     // ...and at CIFAR size
  EXPECT_EQ(cpu::conv2d_geom(1, 64, 8, 8, 64, 3, 2, 1).OH(), 4);
  EXPECT_EQ(cpu::conv2d_geom(1, 64, 7, 7, 64, 1, 2, 0).OH(), 4);
  EXPECT_EQ(cpu::conv2d_geom(1, 1, 8, 8, 1, 3, 1, 2, 2).OH(), 8);
  EXPECT_EQ(cpu::pool_out_size(16, 3, 2, 1), 8);  // ResNet's max pool
  std::vector<float> dummy(1000);
  EXPECT_THROW(cpu::conv2d_forward(dummy.data(), dummy.data(), dummy.data(), nullptr,
                                   cpu::conv2d_geom(1, 3, 4, 4, 4, 3, 1, 1, 1, 2)),
               std::invalid_argument);
}

// Forward against the naive direct convolution, in each configuration. Tolerance 1e-5 * (1 + sum |w x|).
TEST(CnnOps, Conv2dForwardMatchesNaiveDirectConvolution) {
  unsigned seed = 100;
  for (const auto& cc : conv_cases()) {
    const Conv2dGeom& g = cc.g;
    const auto x = randn(g.N * g.C * g.H * g.W, ++seed);
    const auto w = randn(g.OC * (g.C / g.groups) * g.KH * g.KW, ++seed, 0.5f);
    const auto b = randn(g.OC, ++seed);
    std::vector<float> out(g.N * g.OC * g.OH() * g.OW(), std::nanf(""));
    cpu::conv2d_forward(out.data(), x.data(), w.data(), cc.bias ? b.data() : nullptr, g);
    const auto ref = naive_conv(x, w, cc.bias ? b.data() : nullptr, g);
    std::vector<float> absw(w.size()), absx(x.size());
    std::transform(w.begin(), w.end(), absw.begin(), [](float v) { return std::fabs(v); });
    std::transform(x.begin(), x.end(), absx.begin(), [](float v) { return std::fabs(v); });
    const auto mag = naive_conv(absx, absw, nullptr, g);
    double worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      EXPECT_NEAR(out[i], ref[i], 1e-5 * (1 + mag[i])) << cc.name << " output " << i;
      worst = std::max(worst, std::fabs(out[i] - ref[i]) / (1 + mag[i]));
    }
    std::printf("conv2d forward %-30s max |out - naive| / (1 + sum|w x|) = %.2e\n", cc.name, worst);
  }
}

// Backward by finite differences of sum(out * R) with respect to the input, the weight and the bias. Also checks
// the documented conventions: dinp written (prefilled with garbage), dweight and dbias accumulated (prefilled 1).
TEST(CnnOps, Conv2dBackwardMatchesFiniteDifferences) {
  unsigned seed = 200;
  for (const auto& cc : conv_cases()) {
    const Conv2dGeom& g = cc.g;
    const auto x = randn(g.N * g.C * g.H * g.W, ++seed);
    const auto w = randn(g.OC * (g.C / g.groups) * g.KH * g.KW, ++seed, 0.5f);
    const auto b = randn(g.OC, ++seed);
    const auto R = randn(g.N * g.OC * g.OH() * g.OW(), ++seed);
    auto loss = [&](const std::vector<float>& xx, const std::vector<float>& ww, const std::vector<float>& bb) {
      std::vector<float> o(R.size());
      cpu::conv2d_forward(o.data(), xx.data(), ww.data(), cc.bias ? bb.data() : nullptr, g);
      return dot(o, R);
    };
    std::vector<float> dx(x.size(), 123.0f), dw(w.size(), 1.0f), db(b.size(), 1.0f);
    cpu::conv2d_backward(dx.data(), dw.data(), cc.bias ? db.data() : nullptr, R.data(), x.data(), w.data(), g);
    for (auto& v : dw) v -= 1.0f;
    for (auto& v : db) v -= 1.0f;
    const std::string name = cc.name;
    const double ex = expect_gradient(x, dx, [&](const std::vector<float>& p) { return loss(p, w, b); }, 1, 5e-2f,
                                      5e-3, 1e-2, name + " dinp");
    const double ew = expect_gradient(w, dw, [&](const std::vector<float>& p) { return loss(x, p, b); }, 1, 5e-2f,
                                      5e-3, 1e-2, name + " dweight");
    std::printf("conv2d backward %-30s max |grad - fd| / (1 + |fd|): dinp %.2e dweight %.2e\n", cc.name, ex, ew);
    if (cc.bias)
      expect_gradient(b, db, [&](const std::vector<float>& p) { return loss(x, w, p); }, 1, 5e-2f, 5e-3, 1e-2,
                      name + " dbias");
    // dinp may be null (the stem's image): dweight still accumulates the same
    std::vector<float> dw2(w.size(), 0.0f);
    cpu::conv2d_backward(nullptr, dw2.data(), nullptr, R.data(), x.data(), w.data(), g);
    for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(dw2[i], dw[i], 1e-4 * (1 + std::fabs(dw[i]))) << name;
  }
}

// The backward against the naive adjoint, including a batch large enough that the column matrix is split into
// chunks of one image (K*OH*OW = 576*8100 > half the 8M-float budget).
TEST(CnnOps, Conv2dBackwardMatchesNaiveAdjointAcrossImageChunks) {
  std::vector<ConvCase> cases = conv_cases();
  cases.push_back({"64ch 90x90 one image per chunk", cpu::conv2d_geom(3, 64, 90, 90, 2, 3, 1, 1), true});
  unsigned seed = 300;
  for (const auto& cc : cases) {
    const Conv2dGeom& g = cc.g;
    const auto x = randn(g.N * g.C * g.H * g.W, ++seed);
    const auto w = randn(g.OC * (g.C / g.groups) * g.KH * g.KW, ++seed, 0.5f);
    const auto b = randn(g.OC, ++seed);
    const auto R = randn(g.N * g.OC * g.OH() * g.OW(), ++seed);
    std::vector<float> out(R.size());
    cpu::conv2d_forward(out.data(), x.data(), w.data(), cc.bias ? b.data() : nullptr, g);
    const auto ref = naive_conv(x, w, cc.bias ? b.data() : nullptr, g);
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-3 * (1 + std::fabs(ref[i]))) << cc.name;
    std::vector<float> dx(x.size(), -7.0f), dw(w.size(), 0.0f), db(g.OC, 0.0f);
    cpu::conv2d_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), g);
    std::vector<double> rdx, rdw;
    naive_conv_backward(rdx, rdw, R, x, w, g);
    for (std::size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(dx[i], rdx[i], 1e-4 * (1 + std::fabs(rdx[i]))) << cc.name;
    for (std::size_t i = 0; i < dw.size(); ++i) ASSERT_NEAR(dw[i], rdw[i], 1e-3 * (1 + std::fabs(rdw[i]))) << cc.name;
    const i64 OHW = g.OH() * g.OW();
    for (i64 oc = 0; oc < g.OC; ++oc) {
      double s = 0;
      for (i64 n = 0; n < g.N; ++n)
        for (i64 p = 0; p < OHW; ++p) s += R[(n * g.OC + oc) * OHW + p];
      EXPECT_NEAR(db[oc], s, 1e-4 * (1 + std::fabs(s))) << cc.name;
    }
  }
}

// Forward against BatchNorm2d's definition (biased variance), the eval forward, and the explicit PyTorch example
// x = [1, 2, 3, 4] in one channel: mean 2.5, biased var 1.25, unbiased var 5/3.
TEST(CnnOps, BatchNormForwardMatchesItsDefinition) {
  const i64 N = 3, C = 4, HW = 5, m = N * HW;
  const auto x = randn(N * C * HW, 400, 2.0f), gamma = randn(C, 401), beta = randn(C, 402);
  std::vector<float> x2 = x;
  for (i64 i = 0; i < N * C * HW; ++i) x2[i] += static_cast<float>((i / HW) % C);  // distinct channel means
  std::vector<float> out(x.size()), mean(C), rstd(C), rm(C, 0.0f), rv(C, 1.0f);
  cpu::batch_norm_forward_train(out.data(), mean.data(), rstd.data(), rm.data(), rv.data(), x2.data(), gamma.data(),
                                beta.data(), N, C, HW);
  for (i64 c = 0; c < C; ++c) {
    double s = 0, ss = 0;
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) s += x2[(n * C + c) * HW + p];
    const double mu = s / m;
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) ss += std::pow(x2[(n * C + c) * HW + p] - mu, 2);
    const double r = 1.0 / std::sqrt(ss / m + 1e-5);
    EXPECT_NEAR(mean[c], mu, 1e-6 * (1 + std::fabs(mu)));
    EXPECT_NEAR(rstd[c], r, 1e-6 * r);
    for (i64 n = 0; n < N; ++n)
      for (i64 p = 0; p < HW; ++p) {
        const i64 i = (n * C + c) * HW + p;
        EXPECT_NEAR(out[i], (x2[i] - mu) * r * gamma[c] + beta[c], 1e-5 * (1 + std::fabs(gamma[c])));
      }
  }
  // the eval forward from given running statistics
  const std::vector<float> erm = {0.5f, -1.0f, 0.0f, 2.0f}, erv = {1.0f, 4.0f, 0.25f, 2.0f};
  cpu::batch_norm_forward_eval(out.data(), x.data(), erm.data(), erv.data(), gamma.data(), beta.data(), N, C, HW);
  for (i64 i = 0; i < N * C * HW; ++i) {
    const i64 c = (i / HW) % C;
    EXPECT_NEAR(out[i], (x[i] - erm[c]) / std::sqrt(erv[c] + 1e-5) * gamma[c] + beta[c], 1e-5 * (1 + std::fabs(x[i])));
  }
  // PyTorch: bn = BatchNorm2d(1); bn(torch.tensor([1., 2, 3, 4]).view(4, 1, 1, 1)) gives running_mean 0.25 and
  // running_var 0.9 + 0.1 * 5/3 = 1.0666667; the output is (x - 2.5) / sqrt(1.25 + 1e-5).
  const std::vector<float> ex = {1, 2, 3, 4};
  std::vector<float> eo(4), em(1), er(1), erm1(1, 0.0f), erv1(1, 1.0f);
  cpu::batch_norm_forward_train(eo.data(), em.data(), er.data(), erm1.data(), erv1.data(), ex.data(), nullptr,
                                nullptr, 4, 1, 1);
  EXPECT_FLOAT_EQ(em[0], 2.5f);
  EXPECT_NEAR(er[0], 1.0 / std::sqrt(1.25 + 1e-5), 1e-6);
  EXPECT_NEAR(erm1[0], 0.25, 1e-7);
  EXPECT_NEAR(erv1[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(eo[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-6);
  // one value per channel cannot train (PyTorch raises)
  EXPECT_THROW(cpu::batch_norm_forward_train(eo.data(), em.data(), er.data(), nullptr, nullptr, ex.data(), nullptr,
                                             nullptr, 1, 1, 1),
               std::invalid_argument);
}

// Running statistics after two training calls (running_mean 0, running_var 1 at start, momentum 0.1): each call
// moves them 10% towards the batch mean and the UNBIASED batch variance.
TEST(CnnOps, BatchNormRunningStatisticsUseUnbiasedVarianceAndMomentum) {
  const i64 N = 2, C = 3, HW = 4, m = N * HW;
  const auto a = randn(N * C * HW, 410, 1.5f), b = randn(N * C * HW, 411, 0.5f);
  const auto gamma = randn(C, 412), beta = randn(C, 413);
  std::vector<float> out(a.size()), mean(C), rstd(C), rm(C, 0.0f), rv(C, 1.0f);
  std::vector<double> erm(C, 0.0), erv(C, 1.0);
  for (const auto* x : {&a, &b}) {
    cpu::batch_norm_forward_train(out.data(), mean.data(), rstd.data(), rm.data(), rv.data(), x->data(), gamma.data(),
                                  beta.data(), N, C, HW);
    for (i64 c = 0; c < C; ++c) {
      double s = 0, ss = 0;
      for (i64 n = 0; n < N; ++n)
        for (i64 p = 0; p < HW; ++p) s += (*x)[(n * C + c) * HW + p];
      const double mu = s / m;
      for (i64 n = 0; n < N; ++n)
        for (i64 p = 0; p < HW; ++p) ss += std::pow((*x)[(n * C + c) * HW + p] - mu, 2);
      erm[c] = 0.9 * erm[c] + 0.1 * mu;
      erv[c] = 0.9 * erv[c] + 0.1 * ss / (m - 1);
    }
  }
  for (i64 c = 0; c < C; ++c) {
    EXPECT_NEAR(rm[c], erm[c], 1e-6);
    EXPECT_NEAR(rv[c], erv[c], 1e-6);
  }
  // a different momentum
  std::vector<float> rm2(C, 1.0f), rv2(C, 1.0f);
  cpu::batch_norm_forward_train(out.data(), mean.data(), rstd.data(), rm2.data(), rv2.data(), a.data(), nullptr,
                                nullptr, N, C, HW, 0.5f);
  for (i64 c = 0; c < C; ++c) EXPECT_NEAR(rm2[c], 0.5 + 0.5 * mean[c], 1e-6);
}

// Backward of the training forward by finite differences (the input: nonlinear through mean and rstd, h = 1e-2;
// gamma and beta: linear). dinp written (prefilled with garbage), dgamma/dbeta accumulated (prefilled 1).
TEST(CnnOps, BatchNormBackwardMatchesFiniteDifferences) {
  const i64 N = 2, C = 3, HW = 6;
  auto x = randn(N * C * HW, 420, 1.5f);
  for (i64 i = 0; i < N * C * HW; ++i) x[i] += static_cast<float>((i / HW) % C) - 1.0f;
  const auto gamma = randn(C, 421), beta = randn(C, 422), R = randn(N * C * HW, 423);
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& gg, const std::vector<float>& bb) {
    std::vector<float> o(xx.size()), mu(C), rs(C);
    cpu::batch_norm_forward_train(o.data(), mu.data(), rs.data(), nullptr, nullptr, xx.data(), gg.data(), bb.data(),
                                  N, C, HW);
    return dot(o, R);
  };
  std::vector<float> out(x.size()), mean(C), rstd(C);
  cpu::batch_norm_forward_train(out.data(), mean.data(), rstd.data(), nullptr, nullptr, x.data(), gamma.data(),
                                beta.data(), N, C, HW);
  std::vector<float> dx(x.size(), 55.0f), dg(C, 1.0f), dbt(C, 1.0f);
  cpu::batch_norm_backward(dx.data(), dg.data(), dbt.data(), R.data(), x.data(), gamma.data(), mean.data(),
                           rstd.data(), N, C, HW);
  for (auto& v : dg) v -= 1.0f;
  for (auto& v : dbt) v -= 1.0f;
  const double ex = expect_gradient(x, dx, [&](const std::vector<float>& p) { return loss(p, gamma, beta); }, 1,
                                    1e-2f, 5e-3, 1e-2, "batch_norm dinp");
  std::printf("batch_norm backward max |grad - fd| / (1 + |fd|): dinp %.2e\n", ex);
  expect_gradient(gamma, dg, [&](const std::vector<float>& p) { return loss(x, p, beta); }, 1, 1e-2f, 5e-3, 1e-2,
                  "batch_norm dgamma");
  expect_gradient(beta, dbt, [&](const std::vector<float>& p) { return loss(x, gamma, p); }, 1, 1e-2f, 5e-3, 1e-2,
                  "batch_norm dbeta");
  // dinp may alias dout
  std::vector<float> inplace = R;
  cpu::batch_norm_backward(inplace.data(), nullptr, nullptr, inplace.data(), x.data(), gamma.data(), mean.data(),
                           rstd.data(), N, C, HW);
  for (std::size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(inplace[i], dx[i]);
}

TEST(CnnOps, ReluForwardAndBackwardFromTheOutputInPlace) {
  std::vector<float> x = {-2.0f, -0.0f, 0.0f, 1e-30f, 3.0f, -1e-30f};
  std::vector<float> d = {1, 2, 3, 4, 5, 6};
  cpu::relu_forward(x.data(), x.data(), 6);  // in place, like ReLU(inplace=True)
  EXPECT_EQ(x, (std::vector<float>{0, 0, 0, 1e-30f, 3, 0}));
  cpu::relu_backward(d.data(), x.data(), d.data(), 6);
  EXPECT_EQ(d, (std::vector<float>{0, 0, 0, 4, 5, 0}));
}

namespace {
// Max pooling the plain way: every window position, padding as -inf, first maximum in (kh, kw) scan order.
void naive_max_pool(std::vector<float>& out, std::vector<int>& idx, const std::vector<float>& x, i64 NC, i64 H,
                    i64 W, i64 K, i64 S, i64 P, i64 D) {
  const i64 OH = (H + 2 * P - D * (K - 1) - 1) / S + 1, OW = (W + 2 * P - D * (K - 1) - 1) / S + 1;
  out.assign(NC * OH * OW, 0.0f);
  idx.assign(NC * OH * OW, -1);
  for (i64 nc = 0; nc < NC; ++nc)
    for (i64 oh = 0; oh < OH; ++oh)
      for (i64 ow = 0; ow < OW; ++ow) {
        float best = -std::numeric_limits<float>::infinity();
        int arg = -1;
        for (i64 kh = 0; kh < K; ++kh)
          for (i64 kw = 0; kw < K; ++kw) {
            const i64 ih = oh * S - P + kh * D, iw = ow * S - P + kw * D;
            const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
            const float v = inside ? x[(nc * H + ih) * W + iw] : -std::numeric_limits<float>::infinity();
            if (inside && (arg < 0 || v > best)) {
              best = v;
              arg = static_cast<int>(ih * W + iw);
            }
          }
        out[nc * OH * OW + oh * OW + ow] = best;
        idx[nc * OH * OW + oh * OW + ow] = arg;
      }
}
}  // namespace

// Forward against the naive pool in ResNet's configuration (3x3, stride 2, padding 1) and others; all-negative
// inputs show padding is -inf (a zero pad would win); ties pick the first maximum in scan order like PyTorch's CPU
// kernel (aten/src/ATen/native/cpu/MaxPoolKernel.cpp replaces only on val > maxval).
TEST(CnnOps, MaxPoolForwardMatchesNaiveWithPaddingAsMinusInfinityAndFirstMaxTies) {
  struct Case { i64 N, C, H, W, K, S, P, D; };
  unsigned seed = 500;
  for (const Case c : {Case{2, 3, 16, 16, 3, 2, 1, 1}, Case{2, 2, 9, 7, 3, 2, 1, 1}, Case{1, 3, 8, 8, 2, 2, 0, 1},
                       Case{1, 2, 9, 9, 3, 1, 1, 2}, Case{1, 2, 5, 6, 3, 3, 0, 1}}) {
    auto x = randn(c.N * c.C * c.H * c.W, ++seed);
    for (auto& v : x) v = -std::fabs(v) - 0.5f;  // all negative
    // ties: a quantized plane (many equal values) in the last channel
    for (i64 i = (c.N * c.C - 1) * c.H * c.W; i < c.N * c.C * c.H * c.W; ++i) x[i] = std::round(x[i]);
    const i64 OH = cpu::pool_out_size(c.H, c.K, c.S, c.P, c.D), OW = cpu::pool_out_size(c.W, c.K, c.S, c.P, c.D);
    std::vector<float> out(c.N * c.C * OH * OW);
    std::vector<int> idx(out.size());
    cpu::max_pool2d_forward(out.data(), idx.data(), x.data(), c.N, c.C, c.H, c.W, c.K, c.S, c.P, c.D);
    std::vector<float> rout;
    std::vector<int> ridx;
    naive_max_pool(rout, ridx, x, c.N * c.C, c.H, c.W, c.K, c.S, c.P, c.D);
    EXPECT_EQ(out, rout);
    EXPECT_EQ(idx, ridx);
  }
  // an all-equal plane: every window's index is its first valid position (top-left, clipped to the input)
  std::vector<float> flat(5 * 5, 1.0f), out(3 * 3);
  std::vector<int> idx(9);
  cpu::max_pool2d_forward(out.data(), idx.data(), flat.data(), 1, 1, 5, 5, 3, 2, 1);
  EXPECT_EQ(idx, (std::vector<int>{0, 1, 3, 5, 6, 8, 15, 16, 18}));
  // two equal maxima in one window: the one first in row-major scan order wins
  std::vector<float> two = {0, 0, 9,  //
                            9, 0, 0,  //
                            0, 0, 0};
  cpu::max_pool2d_forward(out.data(), idx.data(), two.data(), 1, 1, 3, 3, 3, 1, 0);
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(out[0], 9.0f);
  EXPECT_THROW(cpu::max_pool2d_forward(out.data(), idx.data(), two.data(), 1, 1, 3, 3, 3, 1, 2),
               std::invalid_argument);
}

// Backward by finite differences away from ties: the input is a permutation of values 0.1 apart, so a step of
// 1e-2 never changes a window's argmax and the loss is exactly linear there. Overlapping windows (3x3 stride 2)
// make some inputs the maximum of several windows: their gradient is the sum.
TEST(CnnOps, MaxPoolBackwardMatchesFiniteDifferences) {
  const i64 N = 2, C = 2, H = 9, W = 8, K = 3, S = 2, P = 1;
  std::vector<float> x(N * C * H * W);
  std::iota(x.begin(), x.end(), 0.0f);
  std::shuffle(x.begin(), x.end(), std::mt19937(510));
  for (auto& v : x) v = (v - 100.0f) * 0.1f;
  const i64 OH = cpu::pool_out_size(H, K, S, P), OW = cpu::pool_out_size(W, K, S, P);
  const auto R = randn(N * C * OH * OW, 511);
  auto loss = [&](const std::vector<float>& xx) {
    std::vector<float> o(R.size());
    std::vector<int> id(R.size());
    cpu::max_pool2d_forward(o.data(), id.data(), xx.data(), N, C, H, W, K, S, P);
    return dot(o, R);
  };
  std::vector<float> out(R.size()), dx(x.size(), 77.0f);
  std::vector<int> idx(R.size());
  cpu::max_pool2d_forward(out.data(), idx.data(), x.data(), N, C, H, W, K, S, P);
  cpu::max_pool2d_backward(dx.data(), R.data(), idx.data(), N, C, H, W, OH, OW);
  std::printf("max_pool backward max |grad - fd| / (1 + |fd|): %.2e\n",
              expect_gradient(x, dx, loss, 1, 1e-2f, 5e-3, 1e-2, "max_pool dinp"));
  int shared = 0;  // inputs that are the maximum of more than one window
  for (i64 nc = 0; nc < N * C; ++nc)
    for (i64 i = 0; i < H * W; ++i)
      shared += std::count(idx.begin() + nc * OH * OW, idx.begin() + (nc + 1) * OH * OW, static_cast<int>(i)) > 1;
  EXPECT_GT(shared, 0);
}

// Global average pooling (ResNet's head) against the mean, the general adaptive windows against PyTorch's
// start_index/end_index (H = 5 into 3 rows: [0, 2), [1, 4), [3, 5)), and both backwards by finite differences.
TEST(CnnOps, AdaptiveAvgPoolMatchesWindowsAndFiniteDifferences) {
  const i64 N = 2, C = 3, H = 5, W = 7;
  const auto x = randn(N * C * H * W, 600);
  std::vector<float> g(N * C);
  cpu::adaptive_avg_pool2d_forward(g.data(), x.data(), N, C, H, W, 1, 1);
  for (i64 nc = 0; nc < N * C; ++nc) {
    double s = 0;
    for (i64 i = 0; i < H * W; ++i) s += x[nc * H * W + i];
    EXPECT_NEAR(g[nc], s / (H * W), 1e-6);
  }
  const i64 OH = 3, OW = 2;
  const i64 rows[3][2] = {{0, 2}, {1, 4}, {3, 5}}, cols[2][2] = {{0, 4}, {3, 7}};
  std::vector<float> a(N * C * OH * OW);
  cpu::adaptive_avg_pool2d_forward(a.data(), x.data(), N, C, H, W, OH, OW);
  for (i64 nc = 0; nc < N * C; ++nc)
    for (i64 oh = 0; oh < OH; ++oh)
      for (i64 ow = 0; ow < OW; ++ow) {
        double s = 0;
        for (i64 ih = rows[oh][0]; ih < rows[oh][1]; ++ih)
          for (i64 iw = cols[ow][0]; iw < cols[ow][1]; ++iw) s += x[(nc * H + ih) * W + iw];
        s /= static_cast<double>((rows[oh][1] - rows[oh][0]) * (cols[ow][1] - cols[ow][0]));
        EXPECT_NEAR(a[(nc * OH + oh) * OW + ow], s, 1e-6);
      }
  for (const auto [oh_, ow_] : {std::pair<i64, i64>{1, 1}, std::pair<i64, i64>{OH, OW}}) {
    const i64 oh = oh_, ow = ow_;
    const auto R = randn(N * C * oh * ow, 601);
    auto loss = [&](const std::vector<float>& xx) {
      std::vector<float> o(R.size());
      cpu::adaptive_avg_pool2d_forward(o.data(), xx.data(), N, C, H, W, oh, ow);
      return dot(o, R);
    };
    std::vector<float> dx(x.size(), 9.0f);
    cpu::adaptive_avg_pool2d_backward(dx.data(), R.data(), N, C, H, W, oh, ow);
    expect_gradient(x, dx, loss, 1, 1e-2f, 1e-3, 1e-2, "adaptive_avg_pool dinp");
  }
}
