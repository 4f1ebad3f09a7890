// The CPU reference trainer: the same block pipeline as the CUDA backend (GPT-2's or Llama's op kinds, read
// from the shape) in fp32 with Eigen, used by the tests as
// ground truth and by `zeroplan run --backend cpu` for small models. Activation checkpointing does not change
// the math, so this trainer always keeps every activation. Parameters, gradients and optimizer states belong to
// the ZeRO engine (exec/zero/zero_engine.h), which runs every stage here over MPI exactly as on the GPUs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "exec/cpu/cpu_ops.h"
#include "exec/cpu/cpu_zero_device.h"
#include "exec/loss_scaler.h"
#include "exec/engine_trainer.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan::exec {

namespace {

// One block's saved tensors: norm outputs and statistics (mean for LayerNorm only), q/k/v after the rotary
// embedding, attention output and logsumexp, the second norm's input, the MLP's pre-activation (GELU: fc;
// SwiGLU: gate and up) and activation output.
struct LayerActivations {
  std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, lse, res2, ln2, ln2_mean, ln2_rstd, fc, act;
};

class CpuTrainer final : public EngineTrainer {
 public:
  CpuTrainer(const ExecConfig& config, Communicator* comm)
      : config_(config),
        own_comm_(comm ? nullptr : std::make_unique<SelfCommunicator>()),
        comm_(comm ? *comm : *own_comm_),
        layout_(config.shape, zero_alignment(comm_.world())),
        scaler_(config.precision, config.loss_scale) {
    validate(config_);
    // The ranks of a CPU run share one node (our launcher, or mpirun on one host): its cores divided among them.
    device_ = std::make_unique<CpuZeroDevice>(layout_, config_.seed,
                                              config_.zero.cpu_optimizer_threads > 0
                                                  ? config_.zero.cpu_optimizer_threads
                                                  : offload::default_optimizer_threads(comm_.world()));
    engine_ = std::make_unique<ZeroEngine>(config_, layout_, *device_, comm_);
    attach(*engine_, scaler_);
    const auto& s = config_.shape;
    const std::int64_t BT = config_.micro_batch * config_.seq_len, C = s.hidden;
    const bool layer_norm = s.norm == NormKind::layer_norm;
    residual_.assign((s.layers + 1) * BT * C, 0.0f);
    layers_.resize(s.layers);
    for (auto& a : layers_) {
      a.ln1.resize(BT * C); a.ln1_rstd.resize(BT); a.qkv.resize(BT * s.qkv_dim()); a.att.resize(BT * s.q_dim());
      a.lse.resize(BT * s.heads); a.res2.resize(BT * C); a.ln2.resize(BT * C); a.ln2_rstd.resize(BT);
      a.fc.resize(BT * s.mlp_in_dim()); a.act.resize(BT * s.ffn_hidden);
      if (layer_norm) { a.ln1_mean.resize(BT); a.ln2_mean.resize(BT); }
    }
    lnf_.resize(BT * C); lnf_rstd_.resize(BT);
    if (layer_norm) lnf_mean_.resize(BT);
    logits_.resize(BT * s.padded_vocab);
    losses_.resize(BT);
    if (s.position == PositionKind::rope) {
      rope_cos_.resize(config_.seq_len * s.head_size / 2);
      rope_sin_.resize(rope_cos_.size());
      const cpu::RopeScalingLlama3 llama3{s.rope_scaling.factor, s.rope_scaling.low_freq_factor,
                                          s.rope_scaling.high_freq_factor, s.rope_scaling.original_max_position};
      cpu::rope_tables(rope_cos_.data(), rope_sin_.data(), config_.seq_len, s.head_size, s.rope_theta,
                       s.rope_scaling.llama3 ? &llama3 : nullptr);
    }
  }

  const ExecConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  std::string backend() const override { return "cpu"; }
  std::string device_name() const override { return "CPU (Eigen, fp32)"; }
  int rank() const override { return comm_.rank(); }
  int world() const override { return comm_.world(); }
  CommCounters comm_counters() const override { return comm_.counters(); }

  double forward_loss(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    engine_->begin_forward_only();
    return forward(in.data(), tg.data(), false, 0.0f);
  }

  double forward_backward(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    const std::int64_t BT = config_.micro_batch * config_.seq_len;
    engine_->begin_step();
    engine_->begin_micro_step(config_.grad_accum - 1);  // a boundary micro-step: its gradients are reduced
    const double loss = forward(in.data(), tg.data(), true, 1.0f / static_cast<float>(BT));
    backward(in.data());
    return loss;
  }

  StepResult step(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, config_.grad_accum);
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    StepResult r;
    const std::int64_t BT = config_.micro_batch * config_.seq_len;
    // Each rank's loss gradient is 1/(tokens of the global batch): the sum over ranks is the global mean.
    const double global_tokens = static_cast<double>(BT * config_.grad_accum * comm_.world());
    const float dloss = static_cast<float>(scaler_.scale() / global_tokens);
    r.loss_scale = scaler_.scale();
    double fwd = 0, bwd = 0, loss = 0;
    engine_->begin_step();
    for (std::int64_t k = 0; k < config_.grad_accum; ++k) {
      engine_->begin_micro_step(k);
      const auto a = clock::now();
      loss += forward(in.data() + k * BT, tg.data() + k * BT, true, dloss) * static_cast<double>(BT);
      const auto b = clock::now();
      backward(in.data() + k * BT);
      const auto c = clock::now();
      fwd += std::chrono::duration<double>(b - a).count();
      bwd += std::chrono::duration<double>(c - b).count();
    }
    const auto o0 = clock::now();
    r.loss = engine_->sum_over_ranks(loss) / global_tokens;
    finish_host_step(r, fwd, bwd, t0, o0);
    return r;
  }

  std::vector<float> logits() const override { return logits_; }


  MemoryReport memory() const override {
    // fp32 everywhere; the parameters are their own master copy (no separate master_params).
    std::int64_t act = static_cast<std::int64_t>(residual_.size() + lnf_.size() + lnf_mean_.size() + lnf_rstd_.size() +
                                                 rope_cos_.size() + rope_sin_.size()) * 4;
    for (const auto& a : layers_)
      act += static_cast<std::int64_t>(a.ln1.size() + a.ln1_mean.size() + a.ln1_rstd.size() + a.qkv.size() + a.att.size() +
                                       a.lse.size() + a.res2.size() + a.ln2.size() + a.ln2_mean.size() +
                                       a.ln2_rstd.size() + a.fc.size() + a.act.size()) * 4;
    MemoryReport r;
    r.peak_by_component = device_->bytes_by_component();
    r.host_by_component = device_->host_bytes_by_component();
    r.nvme_bytes = engine_->nvme_bytes();
    r.peak_by_component.emplace_back("activations", act);
    r.peak_by_component.emplace_back("logits", static_cast<std::int64_t>(logits_.size()) * 4);
    for (const auto& [name, b] : r.peak_by_component) r.peak_total += b;
    return r;
  }

 private:
  using i64 = std::int64_t;
  void check_tokens(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg, i64 micro) const {
    const i64 need = micro * config_.micro_batch * config_.seq_len;
    if (static_cast<i64>(in.size()) != need || static_cast<i64>(tg.size()) != need)
      throw std::invalid_argument("cpu trainer: expected " + std::to_string(need) + " input and target tokens");
    for (i64 i = 0; i < need; ++i)
      if (in[i] < 0 || in[i] >= config_.shape.vocab || tg[i] < 0 || tg[i] >= config_.shape.vocab)
        throw std::invalid_argument("cpu trainer: token outside [0, vocab) at position " + std::to_string(i));
  }

  const float* P(const ParamTensor& t) const { return static_cast<const float*>(engine_->param_at(t.offset)); }
  float* G(const ParamTensor& t) { return static_cast<float*>(engine_->grad_at(t.offset)); }
  // A block tensor's parameters / gradients, or null when the model lacks the role (a bias Llama has not).
  const float* Pb(i64 l, BlockTensor which) const { return layout_.has(which) ? P(layout_.block(l, which)) : nullptr; }
  float* Gb(i64 l, BlockTensor which) { return layout_.has(which) ? G(layout_.block(l, which)) : nullptr; }
  // Stage 3 gathers each unit's parameters before it computes (a no-op at stages 0-2), in the order
  // exec/zero/zero_buffer_layout.cpp plans: embeddings, blocks, head unit, the embeddings again when tied.
  void need_embeddings() { engine_->params_needed(0, layout_.block_begin(0)); }
  void need_block(i64 l) { engine_->params_needed(layout_.block_begin(l), layout_.block_end(l)); }
  void need_head_unit() { engine_->params_needed(layout_.tail_begin(), layout_.total()); }

  // The two norm kinds (cpu_ops.h): LayerNorm (mean, rstd, bias) or RMSNorm (rstd only).
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b) {
    const auto& s = config_.shape;
    const i64 BT = config_.micro_batch * config_.seq_len;
    if (s.norm == NormKind::layer_norm) cpu::layernorm_forward(out, mean, rstd, x, w, b, BT, s.hidden);
    else cpu::rmsnorm_forward(out, rstd, x, w, BT, s.hidden, static_cast<float>(s.norm_eps));
  }
  void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                     const float* mean, const float* rstd) {
    const auto& s = config_.shape;
    const i64 BT = config_.micro_batch * config_.seq_len;
    if (s.norm == NormKind::layer_norm) cpu::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, BT, s.hidden);
    else cpu::rmsnorm_backward(dx, dw, dout, x, w, rstd, BT, s.hidden);
  }

  double forward(const int* in, const int* tg, bool want_grad, float dloss) {
    const auto& s = config_.shape;
    const i64 B = config_.micro_batch, T = config_.seq_len, C = s.hidden, BT = B * T;
    const i64 Q = s.q_dim(), QKV = s.qkv_dim(), F = s.ffn_hidden, FI = s.mlp_in_dim();
    need_embeddings();
    cpu::encoder_forward(residual_.data(), in, P(layout_.wte()), layout_.has_wpe() ? P(layout_.wpe()) : nullptr, B, T, C);
    for (i64 l = 0; l < s.layers; ++l) {
      need_block(l);
      auto& a = layers_[l];
      const float* x = residual_.data() + l * BT * C;
      float* y = residual_.data() + (l + 1) * BT * C;
      norm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, Pb(l, kLn1W), Pb(l, kLn1B));
      cpu::matmul_forward(a.qkv.data(), a.ln1.data(), Pb(l, kQkvW), Pb(l, kQkvB), BT, C, QKV);
      if (s.position == PositionKind::rope)
        cpu::rope_forward(a.qkv.data(), rope_cos_.data(), rope_sin_.data(), B, T, s.heads, s.kv_heads, s.head_size);
      cpu::attention_forward(a.att.data(), a.lse.data(), a.qkv.data(), B, T, s.heads, s.kv_heads, s.head_size);
      cpu::matmul_forward(a.res2.data(), a.att.data(), Pb(l, kAttProjW), Pb(l, kAttProjB), BT, Q, C);
      for (i64 i = 0; i < BT * C; ++i) a.res2[i] += x[i];
      norm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), Pb(l, kLn2W), Pb(l, kLn2B));
      cpu::matmul_forward(a.fc.data(), a.ln2.data(), Pb(l, kFcW), Pb(l, kFcB), BT, C, FI);
      if (s.mlp == MlpKind::gelu) cpu::gelu_forward(a.act.data(), a.fc.data(), BT * F);
      else cpu::swiglu_forward(a.act.data(), a.fc.data(), BT, F);
      cpu::matmul_forward(y, a.act.data(), Pb(l, kFcProjW), Pb(l, kFcProjB), BT, F, C);
      for (i64 i = 0; i < BT * C; ++i) y[i] += a.res2[i];
    }
    const float* xf = residual_.data() + s.layers * BT * C;
    need_head_unit();
    norm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), xf, P(layout_.final_norm_w()),
                 s.norm_bias ? P(layout_.final_norm_b()) : nullptr);
    if (s.tied_head) need_embeddings();
    cpu::matmul_forward(logits_.data(), lnf_.data(), P(layout_.head()), nullptr, BT, C, s.padded_vocab);
    cpu::crossentropy_forward_backward(losses_.data(), want_grad ? logits_.data() : nullptr, logits_.data(), tg, BT,
                                       s.vocab, s.padded_vocab, dloss * static_cast<float>(scaler_.scale()));
    double sum = 0;
    for (float x : losses_) sum += x;
    return sum / static_cast<double>(BT);
  }

  // Gradients accumulate into the engine's buffers (scaled by the loss scale; the engine unscales them).
  void backward(const int* in) {
    const auto& s = config_.shape;
    const i64 B = config_.micro_batch, T = config_.seq_len, C = s.hidden, BT = B * T;
    const i64 Q = s.q_dim(), QKV = s.qkv_dim(), F = s.ffn_hidden, FI = s.mlp_in_dim();
    std::vector<float> dres(BT * C, 0.0f), dln(BT * std::max(C, Q)), dact(BT * F), dfc(BT * FI), dqkv(BT * QKV);
    // The ZeRO engine learns which gradients backward writes next and which are final (its buckets).
    engine_->prepare_gradients(0, layout_.block_begin(0));              // embeddings (wte by the tied head)
    engine_->prepare_gradients(layout_.tail_begin(), layout_.total());  // the head unit
    // logits = lnf head^T: dlnf = dlogits head; dhead += dlogits^T lnf
    if (s.tied_head) need_embeddings();
    else need_head_unit();
    cpu::matmul_backward(dln.data(), G(layout_.head()), nullptr, logits_.data(), lnf_.data(), P(layout_.head()), BT, C,
                         s.padded_vocab);
    if (s.tied_head) need_head_unit();
    norm_backward(dres.data(), G(layout_.final_norm_w()), s.norm_bias ? G(layout_.final_norm_b()) : nullptr, dln.data(),
                  residual_.data() + s.layers * BT * C, P(layout_.final_norm_w()), lnf_mean_.data(), lnf_rstd_.data());
    engine_->gradients_final_from(layout_.tail_begin());
    for (i64 l = s.layers - 1; l >= 0; --l) {
      engine_->prepare_gradients(layout_.block_begin(l), layout_.block_end(l));
      need_block(l);
      auto& a = layers_[l];
      const float* x = residual_.data() + l * BT * C;
      // y = res2 + down(act(fc)): dres flows to res2 unchanged
      cpu::matmul_backward(dact.data(), Gb(l, kFcProjW), Gb(l, kFcProjB), dres.data(), a.act.data(), Pb(l, kFcProjW),
                           BT, F, C);
      if (s.mlp == MlpKind::gelu) cpu::gelu_backward(dfc.data(), a.fc.data(), dact.data(), BT * F);
      else cpu::swiglu_backward(dfc.data(), a.fc.data(), dact.data(), BT, F);
      cpu::matmul_backward(dln.data(), Gb(l, kFcW), Gb(l, kFcB), dfc.data(), a.ln2.data(), Pb(l, kFcW), BT, C, FI);
      norm_backward(dres.data(), Gb(l, kLn2W), Gb(l, kLn2B), dln.data(), a.res2.data(), Pb(l, kLn2W), a.ln2_mean.data(),
                    a.ln2_rstd.data());
      // res2 = x + o_proj(att)
      cpu::matmul_backward(dln.data(), Gb(l, kAttProjW), Gb(l, kAttProjB), dres.data(), a.att.data(), Pb(l, kAttProjW),
                           BT, Q, C);
      cpu::attention_backward(dqkv.data(), dln.data(), a.qkv.data(), a.att.data(), a.lse.data(), B, T, s.heads,
                              s.kv_heads, s.head_size);
      if (s.position == PositionKind::rope)
        cpu::rope_backward(dqkv.data(), rope_cos_.data(), rope_sin_.data(), B, T, s.heads, s.kv_heads, s.head_size);
      cpu::matmul_backward(dln.data(), Gb(l, kQkvW), Gb(l, kQkvB), dqkv.data(), a.ln1.data(), Pb(l, kQkvW), BT, C, QKV);
      norm_backward(dres.data(), Gb(l, kLn1W), Gb(l, kLn1B), dln.data(), x, Pb(l, kLn1W), a.ln1_mean.data(),
                    a.ln1_rstd.data());
      engine_->gradients_final_from(layout_.block_begin(l));
    }
    cpu::encoder_backward(G(layout_.wte()), layout_.has_wpe() ? G(layout_.wpe()) : nullptr, dres.data(), in, B, T, C);
    engine_->gradients_final_from(0);
  }

  ExecConfig config_;
  std::unique_ptr<Communicator> own_comm_;  // one rank, when no communicator was given
  Communicator& comm_;
  ParamLayout layout_;
  LossScaler scaler_;
  std::unique_ptr<CpuZeroDevice> device_;
  std::unique_ptr<ZeroEngine> engine_;
  std::vector<float> residual_;  // (L+1) x (B,T,C): the input of each block and of the final norm
  std::vector<LayerActivations> layers_;
  std::vector<float> lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
  std::vector<float> rope_cos_, rope_sin_;  // (T, HS/2) rotary tables (rotary models only)
};

}  // namespace

std::unique_ptr<Trainer> make_cpu_trainer(const ExecConfig& config, Communicator* comm) {
  if (config.network) return make_cpu_network_trainer(config, comm);
  return std::make_unique<CpuTrainer>(config, comm);
}

}  // namespace zeroplan::exec
