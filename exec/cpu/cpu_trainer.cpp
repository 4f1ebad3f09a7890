// The CPU reference trainer: the same GPT-2 step as the CUDA backend in fp32 with Eigen, used by the tests as
// ground truth and by `zeroplan run --backend cpu` for small models. Activation checkpointing does not change
// the math, so this trainer always keeps every activation.
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "exec/cpu/cpu_ops.h"
#include "exec/loss_scaler.h"
#include "exec/trainer.h"

namespace zeroplan::exec {

namespace {

struct LayerActivations {
  std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, lse, res2, ln2, ln2_mean, ln2_rstd, fc, gelu;
};

class CpuTrainer final : public Trainer {
 public:
  explicit CpuTrainer(const ExecConfig& config) : config_(config), layout_(config.shape), scaler_(config.precision, config.loss_scale) {
    validate(config_);
    const std::int64_t n = layout_.total();
    params_.resize(n);
    grads_.assign(n, 0.0f);
    m_.assign(n, 0.0f);
    v_.assign(n, 0.0f);
    decay_.reset(new bool[n]);
    for (std::int64_t i = 0; i < n; ++i) decay_[i] = layout_.decayed(i);
    layout_.initialize(config_.seed, params_.data());
    const auto& s = config_.shape;
    const std::int64_t BT = config_.micro_batch * config_.seq_len, C = s.hidden;
    residual_.assign((s.layers + 1) * BT * C, 0.0f);
    layers_.resize(s.layers);
    for (auto& a : layers_) {
      a.ln1.resize(BT * C); a.ln1_mean.resize(BT); a.ln1_rstd.resize(BT);
      a.qkv.resize(BT * 3 * C); a.att.resize(BT * C); a.lse.resize(BT * s.heads);
      a.res2.resize(BT * C); a.ln2.resize(BT * C); a.ln2_mean.resize(BT); a.ln2_rstd.resize(BT);
      a.fc.resize(BT * 4 * C); a.gelu.resize(BT * 4 * C);
    }
    lnf_.resize(BT * C); lnf_mean_.resize(BT); lnf_rstd_.resize(BT);
    logits_.resize(BT * s.padded_vocab);
    losses_.resize(BT);
  }

  const ExecConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  std::string backend() const override { return "cpu"; }
  std::string device_name() const override { return "CPU (Eigen, fp32)"; }

  double forward_loss(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    return forward(in.data(), tg.data(), false, 0.0f);
  }

  double forward_backward(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    const std::int64_t BT = config_.micro_batch * config_.seq_len;
    const double loss = forward(in.data(), tg.data(), true, 1.0f / static_cast<float>(BT));
    backward(in.data());
    unscale_grads();
    return loss;
  }

  StepResult step(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, config_.grad_accum);
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    StepResult r;
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    const std::int64_t BT = config_.micro_batch * config_.seq_len;
    const float dloss = 1.0f / static_cast<float>(BT * config_.grad_accum);
    double fwd = 0, bwd = 0, loss = 0;
    for (std::int64_t k = 0; k < config_.grad_accum; ++k) {
      const auto a = clock::now();
      loss += forward(in.data() + k * BT, tg.data() + k * BT, true, dloss);
      const auto b = clock::now();
      backward(in.data() + k * BT);
      const auto c = clock::now();
      fwd += std::chrono::duration<double>(b - a).count();
      bwd += std::chrono::duration<double>(c - b).count();
    }
    const auto o0 = clock::now();
    unscale_grads();
    double sq = 0;
    for (float g : grads_) sq += static_cast<double>(g) * g;
    r.grad_norm = std::sqrt(sq);
    r.loss = loss / static_cast<double>(config_.grad_accum);
    r.loss_scale = scaler_.scale();
    const bool overflow = !std::isfinite(r.grad_norm);
    r.skipped = scaler_.update(overflow);
    if (!r.skipped) {
      float clip = 1.0f;
      if (config_.optimizer.grad_clip > 0 && r.grad_norm > config_.optimizer.grad_clip)
        clip = static_cast<float>(config_.optimizer.grad_clip / (r.grad_norm + 1e-6));
      ++t_;
      const auto& o = config_.optimizer;
      cpu::adamw(params_.data(), grads_.data(), m_.data(), v_.data(), decay_.get(), layout_.total(),
                 static_cast<float>(o.learning_rate), static_cast<float>(o.beta1), static_cast<float>(o.beta2),
                 static_cast<float>(o.epsilon), static_cast<float>(o.weight_decay), clip, t_);
    }
    const auto t1 = clock::now();
    r.times.forward_s = fwd;
    r.times.backward_s = bwd;
    r.times.optimizer_s = std::chrono::duration<double>(t1 - o0).count();
    r.times.step_s = std::chrono::duration<double>(t1 - t0).count();
    return r;
  }

  std::vector<float> params() const override { return params_; }
  std::vector<float> grads() const override { return grads_; }
  std::vector<float> logits() const override { return logits_; }
  void set_params(const std::vector<float>& flat) override {
    if (static_cast<std::int64_t>(flat.size()) != layout_.total())
      throw std::invalid_argument("set_params: expected " + std::to_string(layout_.total()) + " values");
    params_ = flat;
  }

  MemoryReport memory() const override {
    // fp32 everywhere; the parameters are their own master copy (no separate master_params).
    const std::int64_t n = layout_.total() * 4;
    std::int64_t act = static_cast<std::int64_t>(residual_.size() + lnf_.size() + lnf_mean_.size() + lnf_rstd_.size()) * 4;
    for (const auto& a : layers_)
      act += static_cast<std::int64_t>(a.ln1.size() + a.ln1_mean.size() + a.ln1_rstd.size() + a.qkv.size() + a.att.size() +
                                       a.lse.size() + a.res2.size() + a.ln2.size() + a.ln2_mean.size() +
                                       a.ln2_rstd.size() + a.fc.size() + a.gelu.size()) * 4;
    MemoryReport r;
    r.peak_by_component = {{"params", n}, {"grads", n}, {"master_params", 0}, {"optimizer_states", 2 * n},
                           {"activations", act}, {"logits", static_cast<std::int64_t>(logits_.size()) * 4}};
    for (const auto& [name, b] : r.peak_by_component) r.peak_total += b;
    return r;
  }

 private:
  void check_tokens(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg, std::int64_t micro) const {
    const std::int64_t need = micro * config_.micro_batch * config_.seq_len;
    if (static_cast<std::int64_t>(in.size()) != need || static_cast<std::int64_t>(tg.size()) != need)
      throw std::invalid_argument("cpu trainer: expected " + std::to_string(need) + " input and target tokens");
    for (std::int64_t i = 0; i < need; ++i)
      if (in[i] < 0 || in[i] >= config_.shape.vocab || tg[i] < 0 || tg[i] >= config_.shape.vocab)
        throw std::invalid_argument("cpu trainer: token outside [0, vocab) at position " + std::to_string(i));
  }

  const float* P(const ParamTensor& t) const { return params_.data() + t.offset; }
  float* G(const ParamTensor& t) { return grads_.data() + t.offset; }

  double forward(const int* in, const int* tg, bool want_grad, float dloss) {
    const auto& s = config_.shape;
    const std::int64_t B = config_.micro_batch, T = config_.seq_len, C = s.hidden, BT = B * T;
    cpu::encoder_forward(residual_.data(), in, P(layout_.wte()), P(layout_.wpe()), B, T, C);
    for (std::int64_t l = 0; l < s.layers; ++l) {
      auto& a = layers_[l];
      const float* x = residual_.data() + l * BT * C;
      float* y = residual_.data() + (l + 1) * BT * C;
      cpu::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, P(layout_.block(l, kLn1W)),
                             P(layout_.block(l, kLn1B)), BT, C);
      cpu::matmul_forward(a.qkv.data(), a.ln1.data(), P(layout_.block(l, kQkvW)), P(layout_.block(l, kQkvB)), BT, C, 3 * C);
      cpu::attention_forward(a.att.data(), a.lse.data(), a.qkv.data(), B, T, C, s.heads);
      cpu::matmul_forward(a.res2.data(), a.att.data(), P(layout_.block(l, kAttProjW)), P(layout_.block(l, kAttProjB)), BT, C, C);
      for (std::int64_t i = 0; i < BT * C; ++i) a.res2[i] += x[i];
      cpu::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                             P(layout_.block(l, kLn2W)), P(layout_.block(l, kLn2B)), BT, C);
      cpu::matmul_forward(a.fc.data(), a.ln2.data(), P(layout_.block(l, kFcW)), P(layout_.block(l, kFcB)), BT, C, 4 * C);
      cpu::gelu_forward(a.gelu.data(), a.fc.data(), BT * 4 * C);
      cpu::matmul_forward(y, a.gelu.data(), P(layout_.block(l, kFcProjW)), P(layout_.block(l, kFcProjB)), BT, 4 * C, C);
      for (std::int64_t i = 0; i < BT * C; ++i) y[i] += a.res2[i];
    }
    const float* xf = residual_.data() + s.layers * BT * C;
    cpu::layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), xf, P(layout_.lnf_w()), P(layout_.lnf_b()), BT, C);
    cpu::matmul_forward(logits_.data(), lnf_.data(), P(layout_.wte()), nullptr, BT, C, s.padded_vocab);
    cpu::crossentropy_forward_backward(losses_.data(), want_grad ? logits_.data() : nullptr, logits_.data(), tg, BT,
                                       s.vocab, s.padded_vocab, dloss * static_cast<float>(scaler_.scale()));
    double sum = 0;
    for (float x : losses_) sum += x;
    return sum / static_cast<double>(BT);
  }

  // Gradients accumulate into grads_ (scaled by the loss scale, unscaled at the end of the step in fp16).
  void backward(const int* in) {
    const auto& s = config_.shape;
    const std::int64_t B = config_.micro_batch, T = config_.seq_len, C = s.hidden, BT = B * T;
    std::vector<float> dres(BT * C, 0.0f), dln(BT * C), d4(BT * 4 * C), dqkv(BT * 3 * C), dtmp(BT * 4 * C);
    // logits = lnf wte^T: dlnf = dlogits wte; dwte += dlogits^T lnf
    cpu::matmul_backward(dln.data(), G(layout_.wte()), nullptr, logits_.data(), lnf_.data(), P(layout_.wte()), BT, C,
                         s.padded_vocab);
    cpu::layernorm_backward(dres.data(), G(layout_.lnf_w()), G(layout_.lnf_b()), dln.data(),
                            residual_.data() + s.layers * BT * C, P(layout_.lnf_w()), lnf_mean_.data(),
                            lnf_rstd_.data(), BT, C);
    for (std::int64_t l = s.layers - 1; l >= 0; --l) {
      auto& a = layers_[l];
      const float* x = residual_.data() + l * BT * C;
      // y = res2 + fcproj(gelu): dres flows to res2 unchanged
      cpu::matmul_backward(d4.data(), G(layout_.block(l, kFcProjW)), G(layout_.block(l, kFcProjB)), dres.data(),
                           a.gelu.data(), P(layout_.block(l, kFcProjW)), BT, 4 * C, C);
      cpu::gelu_backward(dtmp.data(), a.fc.data(), d4.data(), BT * 4 * C);
      cpu::matmul_backward(dln.data(), G(layout_.block(l, kFcW)), G(layout_.block(l, kFcB)), dtmp.data(), a.ln2.data(),
                           P(layout_.block(l, kFcW)), BT, C, 4 * C);
      cpu::layernorm_backward(dres.data(), G(layout_.block(l, kLn2W)), G(layout_.block(l, kLn2B)), dln.data(),
                              a.res2.data(), P(layout_.block(l, kLn2W)), a.ln2_mean.data(), a.ln2_rstd.data(), BT, C);
      // res2 = x + attproj(att)
      cpu::matmul_backward(dln.data(), G(layout_.block(l, kAttProjW)), G(layout_.block(l, kAttProjB)), dres.data(),
                           a.att.data(), P(layout_.block(l, kAttProjW)), BT, C, C);
      cpu::attention_backward(dqkv.data(), dln.data(), a.qkv.data(), a.att.data(), a.lse.data(), B, T, C, s.heads);
      cpu::matmul_backward(dln.data(), G(layout_.block(l, kQkvW)), G(layout_.block(l, kQkvB)), dqkv.data(),
                           a.ln1.data(), P(layout_.block(l, kQkvW)), BT, C, 3 * C);
      cpu::layernorm_backward(dres.data(), G(layout_.block(l, kLn1W)), G(layout_.block(l, kLn1B)), dln.data(), x,
                              P(layout_.block(l, kLn1W)), a.ln1_mean.data(), a.ln1_rstd.data(), BT, C);
    }
    cpu::encoder_backward(G(layout_.wte()), G(layout_.wpe()), dres.data(), in, B, T, C);
  }

  void unscale_grads() {
    const float inv = static_cast<float>(1.0 / scaler_.scale());
    if (inv != 1.0f)
      for (float& g : grads_) g *= inv;
  }

  ExecConfig config_;
  ParamLayout layout_;
  LossScaler scaler_;
  int t_ = 0;
  std::vector<float> params_, grads_, m_, v_;
  std::unique_ptr<bool[]> decay_;
  std::vector<float> residual_;  // (L+1) x (B,T,C): the input of each block and of the final LayerNorm
  std::vector<LayerActivations> layers_;
  std::vector<float> lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
};

}  // namespace

std::unique_ptr<Trainer> make_cpu_trainer(const ExecConfig& config) { return std::make_unique<CpuTrainer>(config); }

}  // namespace zeroplan::exec
