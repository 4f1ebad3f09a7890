// CPU-side executor tests (run in CI without a GPU): parameter layout, token data, DeepSpeed loss-scaler
// semantics, the reference operators against finite differences, and short training runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "exec/activation_accounting.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/loss_scaler.h"
#include "exec/param_layout.h"
#include "exec/token_data.h"
#include "exec/trainer.h"

using namespace zeroplan::exec;

namespace {

std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

ExecConfig tiny_config() {
  ExecConfig c;
  c.shape = make_shape(257, 64, 2, 2, 64);  // byte-level vocabulary, head size 32
  c.micro_batch = 2;
  c.seq_len = 32;
  c.precision = ExecPrecision::fp32;
  c.optimizer.learning_rate = 1e-3;
  c.optimizer.weight_decay = 0.0;
  c.seed = 7;
  return c;
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + name; }

}  // namespace

TEST(ParamLayout, Gpt2SmallHasThePublishedParameterCount) {
  // GPT-2 small (124M): 124,439,808 parameters with vocab 50257 and tied embeddings (HF gpt2 model card count).
  const ParamLayout layout(make_shape(50257, 768, 12, 12, 1024));
  EXPECT_EQ(layout.model_params(), 124'439'808);
  EXPECT_EQ(layout.shape().padded_vocab, 50304);
  EXPECT_EQ(layout.total(), 124'439'808 + (50304 - 50257) * 768);
  // contiguous, ordered, no gaps
  std::int64_t next = 0;
  for (const auto& t : layout.tensors()) {
    EXPECT_EQ(t.offset, next) << t.name;
    EXPECT_EQ(t.offset % 8, 0) << t.name;
    next += t.numel();
  }
  EXPECT_EQ(next, layout.total());
}

TEST(ParamLayout, WeightDecayRangeMatchesTensorFlags) {
  const ParamLayout layout(make_shape(300, 32, 3, 2, 16));
  for (const auto& t : layout.tensors())
    for (std::int64_t i : {t.offset, t.offset + t.numel() - 1}) EXPECT_EQ(layout.decayed(i), t.weight_decay) << t.name;
}

TEST(ParamLayout, InitializationFollowsGpt2) {
  const ParamLayout layout(make_shape(257, 64, 4, 2, 64));
  std::vector<float> p(layout.total());
  layout.initialize(3, p.data());
  auto stddev = [&](const ParamTensor& t) {
    double s = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) s += p[t.offset + i] * p[t.offset + i];
    return std::sqrt(s / t.numel());
  };
  EXPECT_NEAR(stddev(layout.block(0, kQkvW)), 0.02, 0.002);
  EXPECT_NEAR(stddev(layout.block(1, kFcProjW)), 0.02 / std::sqrt(8.0), 0.001);
  EXPECT_EQ(p[layout.block(2, kLn1W).offset], 1.0f);
  EXPECT_EQ(p[layout.block(2, kQkvB).offset], 0.0f);
  EXPECT_EQ(p[layout.wte().offset + 257 * 64], 0.0f);  // padded vocabulary row
  EXPECT_NE(p[layout.wte().offset + 256 * 64], 0.0f);
}

TEST(LossScaler, FollowsDeepSpeedHysteresisAndWindow) {
  LossScaleSettings s;
  s.initial_scale_power = 4;  // 16
  s.scale_window = 3;
  s.hysteresis = 2;
  s.min_scale = 2;
  LossScaler ls(ExecPrecision::fp16, s);
  EXPECT_EQ(ls.scale(), 16);
  EXPECT_TRUE(ls.update(true));   // first overflow uses up hysteresis, scale kept
  EXPECT_EQ(ls.scale(), 16);
  EXPECT_TRUE(ls.update(true));   // second overflow halves
  EXPECT_EQ(ls.scale(), 8);
  EXPECT_FALSE(ls.update(false));  // iter 2, 1 since overflow
  EXPECT_FALSE(ls.update(false));  // iter 3
  EXPECT_EQ(ls.scale(), 8);
  EXPECT_FALSE(ls.update(false));  // iter 4: (4 - 1) % 3 == 0 -> doubles, hysteresis restored
  EXPECT_EQ(ls.scale(), 16);
  EXPECT_TRUE(ls.update(true));   // hysteresis back to 2: kept
  EXPECT_EQ(ls.scale(), 16);
  EXPECT_TRUE(ls.update(true));
  EXPECT_EQ(ls.scale(), 8);
  EXPECT_TRUE(ls.update(true));
  EXPECT_EQ(ls.scale(), 4);
  EXPECT_TRUE(ls.update(true));
  EXPECT_EQ(ls.scale(), 2);
  EXPECT_THROW(ls.update(true), std::runtime_error);  // at min_loss_scale: DeepSpeed raises
  EXPECT_EQ(ls.skipped_steps(), 7);
}

// consecutive_hysteresis (DynamicLossScaler.update_scale): a step without overflow restores the hysteresis budget at
// once, so two overflows apart keep the scale where, without it, the second one halves it.
TEST(LossScaler, ConsecutiveHysteresisRestoresTheBudgetAfterAGoodStep) {
  for (bool consecutive : {false, true}) {
    LossScaleSettings s;
    s.initial_scale_power = 4;  // 16
    s.scale_window = 100;
    s.hysteresis = 2;
    s.consecutive_hysteresis = consecutive;
    LossScaler ls(ExecPrecision::fp16, s);
    EXPECT_TRUE(ls.update(true));    // budget 2 -> 1, scale kept
    EXPECT_FALSE(ls.update(false));  // consecutive: budget back to 2
    EXPECT_TRUE(ls.update(true));
    EXPECT_EQ(ls.scale(), consecutive ? 16 : 8) << "consecutive_hysteresis " << consecutive;
    EXPECT_EQ(ls.state().cur_hysteresis, 1);
  }
}

TEST(LossScaler, Bf16AndStaticScalesDoNotMove) {
  LossScaler bf(ExecPrecision::bf16, LossScaleSettings{});
  EXPECT_EQ(bf.scale(), 1.0);
  LossScaleSettings st;
  st.static_scale = 128;
  LossScaler s(ExecPrecision::fp16, st);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 128);
}

TEST(TokenData, ReadsLlmcNanoGptAndText) {
  const std::string llmc = temp_path("tokens_llmc.bin");
  {
    std::int32_t header[256] = {};
    header[0] = kLlmcMagic;
    header[1] = 1;
    header[2] = 5;
    std::uint16_t toks[5] = {1, 2, 3, 4, 5};
    std::ofstream f(llmc, std::ios::binary);
    f.write(reinterpret_cast<char*>(header), sizeof(header));
    f.write(reinterpret_cast<char*>(toks), sizeof(toks));
  }
  auto a = TokenSource::from_file(llmc, 10);
  auto batch = a.next_batch(1, 4);
  EXPECT_EQ(batch.inputs, (std::vector<std::int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(batch.targets, (std::vector<std::int32_t>{2, 3, 4, 5}));
  EXPECT_THROW(TokenSource::from_file(llmc, 5), std::invalid_argument);  // token 5 outside vocab 5

  const std::string raw = temp_path("tokens_raw.bin");
  {
    std::uint16_t toks[3] = {7, 8, 9};
    std::ofstream f(raw, std::ios::binary);
    f.write(reinterpret_cast<char*>(toks), sizeof(toks));
  }
  auto b = TokenSource::from_file(raw, 10).next_batch(1, 2);
  EXPECT_EQ(b.inputs, (std::vector<std::int32_t>{7, 8}));

  const std::string text = temp_path("text.txt");
  { std::ofstream(text) << "Hi!"; }
  auto c = TokenSource::from_file(text, 257).next_batch(1, 3);
  EXPECT_EQ(c.inputs, (std::vector<std::int32_t>{kEndOfText, 'H', 'i'}));
  EXPECT_EQ(c.targets, (std::vector<std::int32_t>{'H', 'i', '!'}));
  // A byte-level model (vocabulary 256) reads the same text without the end-of-text id (issue 9); a vocabulary
  // that cannot hold every byte is refused.
  auto bytes_only = TokenSource::from_file(text, 256).next_batch(1, 2);
  EXPECT_EQ(bytes_only.inputs, (std::vector<std::int32_t>{'H', 'i'}));
  EXPECT_EQ(bytes_only.targets, (std::vector<std::int32_t>{'i', '!'}));
  try {
    TokenSource::from_file(text, 255);
    ADD_FAILURE() << "vocab 255 accepted for byte-level text";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("at least 256, got 255"), std::string::npos) << error.what();
  }
  EXPECT_THROW(TokenSource::from_file(temp_path("missing"), 257), std::invalid_argument);
}

TEST(TokenData, SyntheticIsDeterministicAndInRange) {
  auto a = TokenSource::synthetic(100, 5), b = TokenSource::synthetic(100, 5);
  const auto x = a.next_batch(2, 16), y = b.next_batch(2, 16);
  EXPECT_EQ(x.inputs, y.inputs);
  for (int t : x.inputs) EXPECT_TRUE(t >= 0 && t < 100);
  EXPECT_EQ(std::vector<std::int32_t>(x.inputs.begin() + 1, x.inputs.end()),
            std::vector<std::int32_t>(x.targets.begin(), x.targets.end() - 1));
}

// Finite-difference check of each reference operator's backward on a random scalar objective sum(out * w).
TEST(CpuOps, BackwardsMatchFiniteDifferences) {
  const std::int64_t B = 2, T = 5, C = 8, NH = 2;
  auto qkv = randn(B * T * 3 * C, 1);
  auto dout = randn(B * T * C, 2);
  auto objective = [&](const std::vector<float>& in) {
    std::vector<float> out(B * T * C), lse(B * NH * T);
    cpu::attention_forward(out.data(), lse.data(), in.data(), B, T, NH, NH, C / NH);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
    return s;
  };
  std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(qkv.size());
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, NH, C / NH);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NH, C / NH);
  for (std::size_t i = 0; i < qkv.size(); i += 7) {
    auto p = qkv, m = qkv;
    p[i] += 1e-2f;
    m[i] -= 1e-2f;
    const double fd = (objective(p) - objective(m)) / 2e-2;
    EXPECT_NEAR(dqkv[i], fd, 2e-3 + 1e-2 * std::fabs(fd)) << "qkv element " << i;
  }
  // LayerNorm
  auto x = randn(T * C, 3), w = randn(C, 4), b = randn(C, 5), d = randn(T * C, 6);
  auto ln_obj = [&](const std::vector<float>& in) {
    std::vector<float> o(T * C), mu(T), rs(T);
    cpu::layernorm_forward(o.data(), mu.data(), rs.data(), in.data(), w.data(), b.data(), T, C);
    double s = 0;
    for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * d[i];
    return s;
  };
  std::vector<float> o(T * C), mu(T), rs(T), dx(T * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  cpu::layernorm_forward(o.data(), mu.data(), rs.data(), x.data(), w.data(), b.data(), T, C);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mu.data(), rs.data(), T, C);
  for (std::size_t i = 0; i < x.size(); i += 3) {
    auto p = x, m = x;
    p[i] += 1e-2f;
    m[i] -= 1e-2f;
    const double fd = (ln_obj(p) - ln_obj(m)) / 2e-2;
    EXPECT_NEAR(dx[i], fd, 5e-3 + 1e-2 * std::fabs(fd)) << "layernorm input " << i;
  }
  // GELU
  auto g = randn(16, 7, 2.0f), gd = randn(16, 8);
  std::vector<float> gdx(16);
  cpu::gelu_backward(gdx.data(), g.data(), gd.data(), 16);
  for (int i = 0; i < 16; ++i) {
    float a = g[i] + 1e-3f, c = g[i] - 1e-3f, fa, fc;
    cpu::gelu_forward(&fa, &a, 1);
    cpu::gelu_forward(&fc, &c, 1);
    EXPECT_NEAR(gdx[i], (fa - fc) / 2e-3f * gd[i], 5e-3 * (1 + std::fabs(gd[i])));
  }
}

// The Llama block's operators (RMSNorm, RoPE, SwiGLU, grouped-query attention).
namespace {
// Central difference of a scalar objective in each sampled coordinate of x, against the analytic gradient.
template <typename Objective>
void expect_gradient(const std::vector<float>& x, const std::vector<float>& grad, Objective objective, int every,
                     float h, double abs_tol, double rel_tol, const char* what) {
  for (std::size_t i = 0; i < x.size(); i += every) {
    auto p = x, m = x;
    p[i] += h;
    m[i] -= h;
    const double fd = (objective(p) - objective(m)) / (2.0 * h);
    EXPECT_NEAR(grad[i], fd, abs_tol + rel_tol * std::fabs(fd)) << what << " element " << i;
  }
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Causal attention written the plain way, independently of cpu::attention_forward: for each batch and query head,
// the key and value heads expanded per query head as transformers' repeat_kv does (kv head h / (NH / NKV)), the
// full T x T score matrix in double, the causal mask as -inf, a softmax per row and P V.
void naive_attention(std::vector<double>& out, std::vector<double>& lse, const std::vector<float>& qkv, int B, int T,
                     int NH, int NKV, int HS) {
  const int stride = (NH + 2 * NKV) * HS;
  out.assign(static_cast<std::size_t>(B) * T * NH * HS, 0.0);
  lse.assign(static_cast<std::size_t>(B) * NH * T, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int kv = h / (NH / NKV);
      auto Q = [&](int t, int d) { return static_cast<double>(qkv[(b * T + t) * stride + h * HS + d]); };
      auto K = [&](int t, int d) { return static_cast<double>(qkv[(b * T + t) * stride + (NH + kv) * HS + d]); };
      auto V = [&](int t, int d) { return static_cast<double>(qkv[(b * T + t) * stride + (NH + NKV + kv) * HS + d]); };
      std::vector<double> S(static_cast<std::size_t>(T) * T);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          double s = 0;
          for (int d = 0; d < HS; ++d) s += Q(i, d) * K(j, d);
          S[i * T + j] = j > i ? -INFINITY : s / std::sqrt(static_cast<double>(HS));
        }
      for (int i = 0; i < T; ++i) {
        double mx = -INFINITY, z = 0;
        for (int j = 0; j < T; ++j) mx = std::max(mx, S[i * T + j]);
        for (int j = 0; j < T; ++j) z += std::exp(S[i * T + j] - mx);
        lse[(b * NH + h) * T + i] = mx + std::log(z);
        for (int j = 0; j < T; ++j) {
          const double p = std::exp(S[i * T + j] - mx) / z;
          for (int d = 0; d < HS; ++d) out[(static_cast<std::size_t>(b) * T + i) * NH * HS + h * HS + d] += p * V(j, d);
        }
      }
    }
}
}  // namespace

TEST(CpuOps, RmsNormMatchesItsDefinitionAndFiniteDifferences) {
  const std::int64_t N = 6, C = 16;
  const float eps = 1e-5f;
  auto x = randn(N * C, 21, 1.5f), w = randn(C, 22), d = randn(N * C, 23);
  std::vector<float> o(N * C), rs(N);
  cpu::rmsnorm_forward(o.data(), rs.data(), x.data(), w.data(), N, C, eps);
  for (std::int64_t i = 0; i < N; ++i) {
    double ms = 0;
    for (std::int64_t c = 0; c < C; ++c) ms += static_cast<double>(x[i * C + c]) * x[i * C + c] / C;
    const double r = 1.0 / std::sqrt(ms + eps);
    EXPECT_NEAR(rs[i], r, 1e-6 * r);
    for (std::int64_t c = 0; c < C; ++c) EXPECT_NEAR(o[i * C + c], x[i * C + c] * r * w[c], 1e-5) << i << "," << c;
  }
  auto objective = [&](const std::vector<float>& in, const std::vector<float>& weight) {
    std::vector<float> out(N * C), r(N);
    cpu::rmsnorm_forward(out.data(), r.data(), in.data(), weight.data(), N, C, eps);
    return dot(out, d);
  };
  // both gradients accumulate onto what is there
  auto dx0 = randn(N * C, 24), dw0 = randn(C, 25);
  auto dx = dx0, dw = dw0;
  cpu::rmsnorm_backward(dx.data(), dw.data(), d.data(), x.data(), w.data(), rs.data(), N, C);
  for (std::size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
  for (std::size_t i = 0; i < dw.size(); ++i) dw[i] -= dw0[i];
  expect_gradient(x, dx, [&](const std::vector<float>& in) { return objective(in, w); }, 1, 1e-2f, 3e-3, 1e-2,
                  "rmsnorm input");
  expect_gradient(w, dw, [&](const std::vector<float>& in) { return objective(x, in); }, 1, 1e-2f, 3e-3, 1e-2,
                  "rmsnorm weight");
}

TEST(CpuOps, RopeTablesFollowTheDefaultFrequencies) {
  const std::int64_t T = 5, HS = 8;
  std::vector<float> c(T * HS / 2), s(T * HS / 2);
  cpu::rope_tables(c.data(), s.data(), T, HS, 10000.0, nullptr);
  // inv_freq = 10000^(-2i/8) = 1, 0.1, 0.01, 0.001; angle(t, i) = t * inv_freq[i]
  const double inv_freq[4] = {1.0, 0.1, 0.01, 0.001};
  for (std::int64_t t = 0; t < T; ++t)
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(c[t * 4 + i], std::cos(t * inv_freq[i]), 1e-6) << t << "," << i;
      EXPECT_NEAR(s[t * 4 + i], std::sin(t * inv_freq[i]), 1e-6) << t << "," << i;
    }
  EXPECT_EQ(c[0], 1.0f);
  EXPECT_EQ(s[0], 0.0f);
}

// Llama 3.1's rope_scaling {factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings
// 8192} with theta 500000 and head size 128. Wavelengths 2 pi / inv_freq below 8192 / 4 = 2048 keep their
// frequency (i <= 28), above 8192 / 1 are slowed 8x (i >= 35), and i = 29..34 interpolate: the ratio to the
// unscaled frequency is (1 - s) / 8 + s with s = (8192 / wavelen - 1) / (4 - 1) (transformers
// _compute_llama3_parameters). The frequencies are read back from the t = 1 row of the tables (angle = inv_freq).
TEST(CpuOps, RopeTablesApplyLlama3Scaling) {
  const std::int64_t T = 2, HS = 128, half = HS / 2;
  std::vector<float> c0(T * half), s0(T * half), c1(T * half), s1(T * half);
  const cpu::RopeScalingLlama3 llama3{8.0, 1.0, 4.0, 8192};
  cpu::rope_tables(c0.data(), s0.data(), T, HS, 500000.0, nullptr);
  cpu::rope_tables(c1.data(), s1.data(), T, HS, 500000.0, &llama3);
  int kept = 0, slowed = 0, between = 0;
  for (std::int64_t i = 0; i < half; ++i) {
    const double f = std::pow(500000.0, -2.0 * i / HS);
    const double plain = std::atan2(s0[half + i], c0[half + i]);
    const double scaled = std::atan2(s1[half + i], c1[half + i]);
    EXPECT_NEAR(plain, f, 2e-6 * f) << i;
    const double wavelen = 2 * M_PI / f;
    double ratio;
    if (wavelen < 2048) {
      ratio = 1.0;
      ++kept;
    } else if (wavelen > 8192) {
      ratio = 1.0 / 8;
      ++slowed;
    } else {
      const double smooth = (8192 / wavelen - 1.0) / 3.0;
      ratio = (1 - smooth) / 8 + smooth;
      EXPECT_GT(ratio, 1.0 / 8) << i;
      EXPECT_LT(ratio, 1.0) << i;
      ++between;
    }
    EXPECT_NEAR(scaled, f * ratio, 2e-6 * f * ratio) << i;
  }
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(between, 6);
  EXPECT_EQ(slowed, 29);
}

TEST(CpuOps, RopeRotatesQueriesAndKeysAndItsBackwardIsTheTranspose) {
  const std::int64_t B = 2, T = 7, NH = 4, NKV = 2, HS = 8, half = HS / 2, W = (NH + 2 * NKV) * HS;
  std::vector<float> c(T * half), s(T * half);
  cpu::rope_tables(c.data(), s.data(), T, HS, 10000.0, nullptr);
  const auto x = randn(B * T * W, 31);
  auto y = x;
  cpu::rope_forward(y.data(), c.data(), s.data(), B, T, NH, NKV, HS);
  for (std::int64_t r = 0; r < B * T; ++r) {
    const std::int64_t t = r % T;
    for (std::int64_t col = 0; col < W; ++col) {
      const std::int64_t head = col / HS, i = col % HS;
      const float got = y[r * W + col];
      if (head >= NH + NKV) {
        EXPECT_EQ(got, x[r * W + col]) << "values untouched";
        continue;
      }
      // rotate-half: (x[i], x[i + HS/2]) as the complex number x[i] + i x[i + HS/2], times e^(i angle)
      const std::int64_t j = i % half;
      const double a = t * std::pow(10000.0, -2.0 * j / HS);
      const double re = x[r * W + head * HS + j], im = x[r * W + head * HS + j + half];
      const double want = i < half ? re * std::cos(a) - im * std::sin(a) : im * std::cos(a) + re * std::sin(a);
      EXPECT_NEAR(got, want, 1e-5 * (1 + std::fabs(want))) << "row " << r << " column " << col;
    }
  }
  // The point of RoPE: q_t . k_u depends on t - u only. Query head 1 and key head 0 (its kv head) at positions
  // (2, 0) and (6, 4) carry the same vectors before rotation, so their scores agree.
  auto z = x;
  for (std::int64_t col = 0; col < W; ++col) {
    z[6 * W + col] = x[2 * W + col];
    z[4 * W + col] = x[0 * W + col];
  }
  cpu::rope_forward(z.data(), c.data(), s.data(), 1, T, NH, NKV, HS);
  double s20 = 0, s64 = 0;
  for (std::int64_t d = 0; d < HS; ++d) {
    s20 += static_cast<double>(z[2 * W + 1 * HS + d]) * z[0 * W + NH * HS + d];
    s64 += static_cast<double>(z[6 * W + 1 * HS + d]) * z[4 * W + NH * HS + d];
  }
  EXPECT_NEAR(s20, s64, 1e-5 * (1 + std::fabs(s20)));
  // Linear map: the backward is its transpose, <R x, g> = <x, R^T g>, and undoes the forward (R orthogonal).
  const auto g = randn(B * T * W, 32);
  auto gt = g;
  cpu::rope_backward(gt.data(), c.data(), s.data(), B, T, NH, NKV, HS);
  EXPECT_NEAR(dot(y, g), dot(x, gt), 1e-5 * std::fabs(dot(y, g)) + 1e-4);
  auto back = y;
  cpu::rope_backward(back.data(), c.data(), s.data(), B, T, NH, NKV, HS);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-5 * (1 + std::fabs(x[i]))) << i;
}

TEST(CpuOps, SwiGluMatchesItsDefinitionAndFiniteDifferencesInPlace) {
  const std::int64_t N = 5, F = 6;
  const auto gu = randn(N * 2 * F, 41, 2.0f), d = randn(N * F, 42);
  std::vector<float> out(N * F);
  cpu::swiglu_forward(out.data(), gu.data(), N, F);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t j = 0; j < F; ++j) {
      const double g = gu[n * 2 * F + j], u = gu[n * 2 * F + F + j];
      EXPECT_NEAR(out[n * F + j], g / (1 + std::exp(-g)) * u, 1e-5 * (1 + std::fabs(g * u)));
    }
  std::vector<float> dgu(N * 2 * F);
  cpu::swiglu_backward(dgu.data(), gu.data(), d.data(), N, F);
  expect_gradient(gu, dgu,
                  [&](const std::vector<float>& in) {
                    std::vector<float> o(N * F);
                    cpu::swiglu_forward(o.data(), in.data(), N, F);
                    return dot(o, d);
                  },
                  1, 1e-2f, 2e-3, 1e-2, "swiglu gate_up");
  auto inplace = gu;
  cpu::swiglu_backward(inplace.data(), inplace.data(), d.data(), N, F);
  EXPECT_EQ(inplace, dgu);
}

// Grouped-query attention against the naive repeat_kv attention above: multi-head (NKV == NH, GPT-2), grouped
// (NKV = NH/2) and multi-query (NKV = 1).
TEST(CpuOps, GroupedQueryAttentionMatchesNaiveRepeatKv) {
  const int B = 2, T = 9, NH = 4, HS = 8;
  for (int NKV : {4, 2, 1}) {
    const auto qkv = randn(static_cast<std::size_t>(B) * T * (NH + 2 * NKV) * HS, 50 + NKV);
    std::vector<float> out(B * T * NH * HS), lse(B * NH * T);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, NKV, HS);
    std::vector<double> ro, rl;
    naive_attention(ro, rl, qkv, B, T, NH, NKV, HS);
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], ro[i], 1e-5) << "NKV " << NKV << " out " << i;
    for (std::size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], rl[i], 1e-5) << "NKV " << NKV << " lse " << i;
  }
}

TEST(CpuOps, GroupedQueryAttentionBackwardMatchesFiniteDifferences) {
  const std::int64_t B = 2, T = 5, NH = 4, NKV = 2, HS = 4, W = (NH + 2 * NKV) * HS;
  const auto qkv = randn(B * T * W, 61), dout = randn(B * T * NH * HS, 62);
  std::vector<float> out(B * T * NH * HS), lse(B * NH * T), dqkv(qkv.size(), 123.0f);  // overwritten
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, NKV, HS);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NKV, HS);
  expect_gradient(qkv, dqkv,
                  [&](const std::vector<float>& in) {
                    std::vector<float> o(B * T * NH * HS), l(B * NH * T);
                    cpu::attention_forward(o.data(), l.data(), in.data(), B, T, NH, NKV, HS);
                    return dot(o, dout);
                  },
                  3, 1e-2f, 2e-3, 1e-2, "gqa qkv");
  // The same attention as multi-head attention on explicitly repeated key/value heads: outputs equal, and each
  // shared head's dK, dV are the sums of its copies' (repeat_kv's backward).
  const std::int64_t W2 = 3 * NH * HS, G = NH / NKV;
  std::vector<float> rep(B * T * W2);
  for (std::int64_t r = 0; r < B * T; ++r)
    for (std::int64_t h = 0; h < NH; ++h)
      for (std::int64_t d = 0; d < HS; ++d) {
        rep[r * W2 + h * HS + d] = qkv[r * W + h * HS + d];
        rep[r * W2 + (NH + h) * HS + d] = qkv[r * W + (NH + h / G) * HS + d];
        rep[r * W2 + (2 * NH + h) * HS + d] = qkv[r * W + (NH + NKV + h / G) * HS + d];
      }
  std::vector<float> out2(out.size()), lse2(lse.size()), drep(rep.size());
  cpu::attention_forward(out2.data(), lse2.data(), rep.data(), B, T, NH, NH, HS);
  cpu::attention_backward(drep.data(), dout.data(), rep.data(), out2.data(), lse2.data(), B, T, NH, NH, HS);
  EXPECT_EQ(out2, out);
  EXPECT_EQ(lse2, lse);
  for (std::int64_t r = 0; r < B * T; ++r)
    for (std::int64_t d = 0; d < HS; ++d) {
      for (std::int64_t h = 0; h < NH; ++h)
        EXPECT_NEAR(dqkv[r * W + h * HS + d], drep[r * W2 + h * HS + d], 1e-6) << "dQ";
      for (std::int64_t g = 0; g < NKV; ++g) {
        double dk = 0, dv = 0;
        for (std::int64_t j = 0; j < G; ++j) {
          dk += drep[r * W2 + (NH + g * G + j) * HS + d];
          dv += drep[r * W2 + (2 * NH + g * G + j) * HS + d];
        }
        EXPECT_NEAR(dqkv[r * W + (NH + g) * HS + d], dk, 1e-5) << "dK";
        EXPECT_NEAR(dqkv[r * W + (NH + NKV + g) * HS + d], dv, 1e-5) << "dV";
      }
    }
}

TEST(CpuOps, CrossEntropyIgnoresPaddedColumns) {
  const std::int64_t V = 5, Vp = 8;
  std::vector<float> logits = {1, 2, 3, 4, 5, 100, 100, 100};
  const int target = 2;
  float loss;
  std::vector<float> d(Vp);
  cpu::crossentropy_forward_backward(&loss, d.data(), logits.data(), &target, 1, V, Vp, 1.0f);
  double z = 0;
  for (int j = 0; j < V; ++j) z += std::exp(logits[j]);
  EXPECT_NEAR(loss, std::log(z) - 3.0, 1e-5);
  EXPECT_NEAR(d[2], std::exp(3.0) / z - 1.0, 1e-6);
  EXPECT_EQ(d[6], 0.0f);
  double sum = 0;
  for (float v : d) sum += v;
  EXPECT_NEAR(sum, 0.0, 1e-6);  // softmax rows sum to one
}

TEST(CpuOps, AdamWFirstStepIsSignDescentPlusDecay) {
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -3.0f}, m(2, 0.0f), v(2, 0.0f);
  const bool decay[2] = {true, false};
  cpu::adamw(p.data(), g.data(), m.data(), v.data(), decay, 2, 0.1f, 0.9f, 0.95f, 1e-8f, 0.5f, 1.0f, 1);
  // bias-corrected m/sqrt(v) = g/|g| at t = 1
  EXPECT_NEAR(p[0], 1.0f - 0.1f * (1.0f + 0.5f * 1.0f), 1e-6);
  EXPECT_NEAR(p[1], -2.0f - 0.1f * (-1.0f), 1e-6);
}

// The whole model's gradient against finite differences of the loss, for a sample of parameters in every tensor.
TEST(CpuTrainer, GradientsMatchFiniteDifferences) {
  ExecConfig c = tiny_config();
  c.shape = make_shape(257, 16, 2, 2, 8);
  c.seq_len = 8;
  auto trainer = make_cpu_trainer(c);
  auto src = TokenSource::synthetic(257, 11);
  const auto batch = src.next_batch(c.micro_batch, c.seq_len);
  // make biases and LN parameters non-trivial so their gradients are exercised away from the init point
  auto params = trainer->params();
  auto noise = randn(params.size(), 12, 0.05f);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
  trainer->set_params(params);
  trainer->forward_backward(batch.inputs, batch.targets);
  const auto grads = trainer->grads();
  int checked = 0;
  for (const auto& t : trainer->layout().tensors()) {
    for (std::int64_t k = 0; k < 3; ++k) {
      std::int64_t i = t.offset + (k * 7919) % t.numel();
      if (t.name == "wte") i = t.offset + static_cast<std::int64_t>(batch.inputs[k]) * 16 + k;  // a used row
      auto p = params, m = params;
      const float h = 1e-2f;
      p[i] += h;
      m[i] -= h;
      trainer->set_params(p);
      const double lp = trainer->forward_loss(batch.inputs, batch.targets);
      trainer->set_params(m);
      const double lm = trainer->forward_loss(batch.inputs, batch.targets);
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(grads[i], fd, 2e-4 + 3e-2 * std::fabs(fd)) << t.name << " element " << (i - t.offset);
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(CpuTrainer, LossFallsOnText) {
  ExecConfig c = tiny_config();
  auto trainer = make_cpu_trainer(c);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  const auto tokens = TokenSource::tokenize_bytes(text, c.shape.vocab);
  const std::string path = temp_path("fox.txt");
  { std::ofstream(path) << text; }
  auto src = TokenSource::from_file(path, c.shape.vocab);
  EXPECT_EQ(src.size(), static_cast<std::int64_t>(tokens.size()));
  std::vector<double> losses;
  for (int s = 0; s < 40; ++s) {
    const auto b = src.next_batch(c.micro_batch, c.seq_len);
    const auto r = trainer->step(b.inputs, b.targets);
    EXPECT_TRUE(std::isfinite(r.loss));
    EXPECT_FALSE(r.skipped);
    losses.push_back(r.loss);
  }
  EXPECT_NEAR(losses.front(), std::log(257.0), 0.3);  // near-uniform predictions at init
  EXPECT_LT(losses.back(), 0.6 * losses.front());
}

TEST(CpuTrainer, GradAccumulationEqualsOneLargeBatch) {
  ExecConfig a = tiny_config();
  a.micro_batch = 4;
  ExecConfig b = tiny_config();
  b.micro_batch = 2;
  b.grad_accum = 2;
  auto ta = make_cpu_trainer(a), tb = make_cpu_trainer(b);
  auto src = TokenSource::synthetic(257, 3);
  const auto batch = src.next_batch(4, a.seq_len);
  const auto ra = ta->step(batch.inputs, batch.targets);
  const auto rb = tb->step(batch.inputs, batch.targets);
  EXPECT_NEAR(ra.loss, rb.loss, 1e-5);
  EXPECT_NEAR(ra.grad_norm, rb.grad_norm, 1e-4 * ra.grad_norm);
  const auto pa = ta->params(), pb = tb->params();
  double diff = 0, ref = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    diff += (pa[i] - pb[i]) * (pa[i] - pb[i]);
    ref += pa[i] * pa[i];
  }
  EXPECT_LT(std::sqrt(diff / ref), 1e-5);
}

TEST(ActivationAccounting, MatchesKorthikantiWithoutDropout) {
  ExecConfig c;
  c.shape = make_shape(50257, 1600, 48, 25, 1024);
  c.micro_batch = 8;
  c.seq_len = 1024;
  c.precision = ExecPrecision::bf16;
  const auto m = expected_device_memory(c);
  const std::int64_t s = 1024, b = 8, h = 1600, a = 25, L = 48;
  // 34sbh of Korthikanti (no recompute, flash attention) less the two 1-byte dropout masks = 32sbh per layer
  // + the backward working set: dresidual, d(LN input), d(FC/QKV) in bf16 (12 bytes per hidden element),
  //   and D (4 bytes per head and token)
  const std::int64_t working = 12 * s * b * h + 4 * a * s * b;
  EXPECT_EQ(backward_working_set_bytes(c), working);
  EXPECT_EQ(m.activations, L * (32 * s * b * h + 16 * s * b + 4 * a * s * b) + 4 * s * b * h + 8 * s * b + working);
  EXPECT_EQ(m.logits, 2 * s * b * 50304 + 4 * s * b);
  const ParamLayout layout(c.shape);
  EXPECT_EQ(m.params + m.grads + m.master_params + m.optimizer_states, 16 * layout.total());
  c.recompute = ExecRecompute::full;
  const auto f = expected_device_memory(c);
  EXPECT_EQ(f.activations, (L + 1) * 2 * s * b * h + 30 * s * b * h + 16 * s * b + 4 * a * s * b + 2 * s * b * h +
                               8 * s * b + working);
  // Selective recompute keeps the list above less what llm.c's recompute 2 rebuilds: LN1 and LN2 outputs (2sbh each
  // in bf16) and the GELU output (8sbh), 20sbh per layer; the working set it rebuilds them in is unchanged.
  c.recompute = ExecRecompute::selective;
  EXPECT_EQ(expected_device_memory(c).activations,
            L * (20 * s * b * h + 16 * s * b + 4 * a * s * b) + 4 * s * b * h + 8 * s * b + working);
}
