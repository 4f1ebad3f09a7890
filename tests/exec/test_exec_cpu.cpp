// CPU-side executor tests (run in CI without a GPU): parameter layout, token data, DeepSpeed loss-scaler
// semantics, the reference operators against finite differences, and short training runs.
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
    cpu::attention_forward(out.data(), lse.data(), in.data(), B, T, C, NH);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
    return s;
  };
  std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(qkv.size());
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
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
