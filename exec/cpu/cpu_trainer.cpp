// The CPU reference trainer: the same block pipeline as the CUDA backend (GPT-2's or Llama's op kinds, read
// from the shape) in fp32 with Eigen, used by the tests as
// ground truth and by `zeroplan run --backend cpu` for small models. Activation checkpointing does not change
// the math, so this trainer always keeps every activation. Parameters, gradients and optimizer states belong to
// the ZeRO engine (exec/zero/zero_engine.h), which runs every stage here over MPI exactly as on the GPUs.
// With LoRA (ExecConfig::lora) the adapters are the trained parameters (exec/lora_layout.h: their own layout and
// ZeRO engine) and the base is held by a second engine, frozen (zero_engine.h Trainability::frozen): no weight
// gradient is computed for it, only the input gradients flow through it. With --quantize-base nf4 its block
// linear weights are NF4 codes (core/nf4_quantization.h), dequantised into one scratch weight before each matmul
// that reads them, as bitsandbytes' MatMul4Bit dequantises before its GEMM (forward, and backward's input gradient).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "core/nf4_quantization.h"
#include "exec/activation_accounting.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cpu/cpu_zero_device.h"
#include "exec/lora_layout.h"
#include "exec/loss_scaler.h"
#include "exec/engine_trainer.h"
#include "exec/frozen_base.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan::exec {

namespace {

// One block's saved tensors: norm outputs and statistics (mean for LayerNorm only), q/k/v after the rotary
// embedding, attention output and logsumexp, the second norm's input, the MLP's pre-activation (GELU: fc;
// SwiGLU: gate and up) and activation output (these two in the trainer's MLP buffer, block by block).
struct LayerActivations {
  std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, lse, res2, ln2, ln2_mean, ln2_rstd;
  float* fc = nullptr;
  float* act = nullptr;
};


class CpuTrainer final : public EngineTrainer {
 public:
  CpuTrainer(const ExecConfig& config, Communicator* comm)
      : config_(config),
        own_comm_(comm ? nullptr : std::make_unique<SelfCommunicator>()),
        comm_(comm ? *comm : *own_comm_),
        layout_(trained_layout(config, comm_.world())),
        scaler_(config.precision, config.loss_scale) {
    validate(config_);
    // The ranks of a CPU run share one node (our launcher, or mpirun on one host): its cores divided among them.
    const int threads = offload::optimizer_threads(config_.zero.cpu_optimizer_threads, comm_.world());
    host_threads_ = threads;
    const bool lora = config_.lora.enabled;
    if (lora) {
      // The frozen base: the model's layout (its block weights left out when they are held as NF4 codes), whole
      // at stages 0-2 and partitioned at stage 3 by an engine without gradients or optimizer states.
      full_layout_ = std::make_unique<ParamLayout>(config_.shape, zero_alignment(comm_.world()));
      base_layout_ = std::make_unique<ParamLayout>(config_.shape, zero_alignment(comm_.world()), !config_.lora.quantize_nf4);
      base_device_ = std::make_unique<CpuZeroDevice>(*base_layout_, config_.seed, threads);
      base_engine_ = std::make_unique<ZeroEngine>(config_, *base_layout_, *base_device_, comm_, Trainability::frozen);
      adapted_ = adapted_linears(config_.shape, config_.lora);
    }
    device_ = std::make_unique<CpuZeroDevice>(layout_, lora ? lora_adapter_seed(config_.seed) : config_.seed, threads);
    // The MLP tensors block by block in fp32, every block's kept (the reference recomputes nothing), and the gradient
    // partition over them where the CUDA trainer's plan puts it there (exec/activation_accounting.h
    // mlp_saved_layout): the engine's allocations are the plan's, and the placement is exercised without a GPU.
    ExecConfig kept = config_;
    kept.precision = ExecPrecision::fp32;
    kept.recompute = ExecRecompute::none;
    mlp_layout_ = mlp_saved_layout(kept, comm_.world());
    const bool lend = mlp_saved_layout(config_, comm_.world()).holds_gradient_partition &&
                      mlp_layout_.holds_gradient_partition;
    engine_ = std::make_unique<ZeroEngine>(config_, layout_, *device_, comm_, Trainability::trainable,
                                           lend ? GradientPartitionHome::trainer : GradientPartitionHome::engine);
    if (!lend) mlp_layout_.gradient_partition_beyond = 0;
    mlp_.assign(static_cast<std::size_t>(mlp_layout_.bytes() / 4), 0.0f);
    if (lend) engine_->set_gradient_partition(mlp_.data());
    attach(*engine_, scaler_);
    if (lora && config_.lora.quantize_nf4) {
      // The base as the full model would be initialised (the same values with or without quantisation), its
      // block linear weights quantised.
      const ParamLayout& full = *full_layout_;
      const std::uint64_t seed = config_.seed;
      const ZeroEngine::StateSource init = [&full, seed](std::int64_t begin, std::int64_t n, float* master, float* m,
                                                          float* v) {
        full.initialize_range(seed, begin, n, master);
        if (m) std::fill(m, m + n, 0.0f);
        if (v) std::fill(v, v + n, 0.0f);
      };
      restore_frozen_base(*base_engine_, *base_layout_, full, init);
      quantize_base(full, init, /*read_in_parallel=*/true);  // the initialisation is a pure function of the index
    }
    const auto& s = config_.shape;
    const std::int64_t BT = config_.micro_batch * config_.seq_len, C = s.hidden;
    const bool layer_norm = s.norm == NormKind::layer_norm;
    residual_.assign((s.layers + 1) * BT * C, 0.0f);
    layers_.resize(s.layers);
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      LayerActivations& a = layers_[l];
      a.ln1.resize(BT * C); a.ln1_rstd.resize(BT); a.qkv.resize(BT * s.qkv_dim()); a.att.resize(BT * s.q_dim());
      a.lse.resize(BT * s.heads); a.res2.resize(BT * C); a.ln2.resize(BT * C); a.ln2_rstd.resize(BT);
      a.fc = mlp_.data() + mlp_layout_.block_offset(static_cast<std::int64_t>(l)) / 4;
      a.act = a.fc + mlp_layout_.activations_offset / 4;
      if (layer_norm) { a.ln1_mean.resize(BT); a.ln2_mean.resize(BT); }
    }
    lnf_.resize(BT * C); lnf_rstd_.resize(BT);
    if (layer_norm) lnf_mean_.resize(BT);
    logits_.resize(BT * s.padded_vocab);
    losses_.resize(BT);
    if (lora) {
      // x A^T of every adapted module, kept for backward (PEFT's lora_A output, which autograd saves for lora_B).
      lora_xa_.assign(static_cast<std::size_t>(s.layers * static_cast<i64>(adapted_.size())),
                      std::vector<float>(static_cast<std::size_t>(BT * config_.lora.rank)));
      std::int64_t widest = 0;
      for (BlockTensor w : {kQkvW, kAttProjW, kFcW, kFcProjW})
        widest = std::max(widest, full_layout_->block(0, w).numel());
      if (config_.lora.quantize_nf4) dequantized_.resize(static_cast<std::size_t>(widest));
    }
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
    if (base_engine_) base_engine_->begin_forward_only();
    return forward(in.data(), tg.data(), false, 0.0f);
  }

  double forward_backward(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    const std::int64_t BT = config_.micro_batch * config_.seq_len;
    begin_step();
    begin_micro_step(config_.grad_accum - 1);  // a boundary micro-step: its gradients are reduced
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
    begin_step();
    for (std::int64_t k = 0; k < config_.grad_accum; ++k) {
      begin_micro_step(k);
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

  const ParamLayout* frozen_layout() const override { return base_layout_.get(); }
  std::vector<float> frozen_params() const override {
    if (!base_engine_) return {};
    return base_engine_->gathered_params();
  }
  std::vector<float> dequantized_weight(std::int64_t layer, BlockTensor which) const override {
    if (nf4_.empty()) return {};
    const Nf4ModuleTensors& q = nf4_[static_cast<std::size_t>(layer * 4 + nf4_weight_slot(which))];
    std::vector<float> out(static_cast<std::size_t>(q.elements()));
    dequantize_nf4(q, out.data());
    return out;
  }

  void set_frozen(const ParamLayout& source_layout, const ZeroEngine::StateSource& source) override {
    if (!base_engine_) throw std::invalid_argument("set_frozen: this trainer trains every parameter (no LoRA base)");
    restore_frozen_base(*base_engine_, *base_layout_, source_layout, source);
    quantize_base(source_layout, source, /*read_in_parallel=*/false);  // a checkpoint reader reads one piece at a time
  }
  // QLoRA: transformers quantises every linear layer but the output head (integrations/bitsandbytes.py
  // replace_with_bnb_linear), each nn.Linear its own Params4bit: the four block weights, Llama's fused qkv and
  // gate_up module by module (q_proj, k_proj, v_proj; gate_proj, up_proj: exec/lora_layout.h nf4_module_elements).
  void quantize_base(const ParamLayout& source_layout, const ZeroEngine::StateSource& source, bool read_in_parallel) {
    if (!config_.lora.quantize_nf4) return;
    nf4_.assign(static_cast<std::size_t>(config_.shape.layers * 4), Nf4ModuleTensors{});
    quantize_frozen_block_weights(
        config_.shape, source_layout,
        [&source](std::int64_t begin, std::int64_t n, float* out) { source(begin, n, out, nullptr, nullptr); },
        read_in_parallel, /*round=*/{}, host_threads_,
        [this](std::int64_t slot, Nf4ModuleTensors&& q) { nf4_[static_cast<std::size_t>(slot)] = std::move(q); });
  }


  MemoryReport memory() const override {
    // fp32 everywhere; the parameters are their own master copy (no separate master_params).
    std::int64_t act = static_cast<std::int64_t>(residual_.size() + lnf_.size() + lnf_mean_.size() + lnf_rstd_.size() +
                                                 rope_cos_.size() + rope_sin_.size()) * 4;
    for (const auto& a : layers_)
      act += static_cast<std::int64_t>(a.ln1.size() + a.ln1_mean.size() + a.ln1_rstd.size() + a.qkv.size() + a.att.size() +
                                       a.lse.size() + a.res2.size() + a.ln2.size() + a.ln2_mean.size() +
                                       a.ln2_rstd.size()) * 4;
    act += static_cast<std::int64_t>(mlp_.size()) * 4;
    for (const auto& xa : lora_xa_) act += static_cast<std::int64_t>(xa.size()) * 4;
    MemoryReport r;
    r.peak_by_component = device_->bytes_by_component();
    r.host_by_component = device_->host_bytes_by_component();
    r.nvme_bytes = engine_->nvme_bytes();
    // LoRA: the frozen base's engine (its parameters, and at stage 3 its gathered units) under the same components
    // (the planner counts the base under params, sim/lora_model.h), with the NF4 codes and constants and the
    // dequantised scratch weight.
    auto add = [&r](const std::string& name, std::int64_t bytes) {
      for (auto& [n, b] : r.peak_by_component)
        if (n == name) {
          b += bytes;
          return;
        }
      r.peak_by_component.emplace_back(name, bytes);
    };
    if (base_device_)
      for (const auto& [name, bytes] : base_device_->bytes_by_component()) add(name, bytes);
    for (const Nf4ModuleTensors& q : nf4_) add("params", q.bytes());
    if (!dequantized_.empty()) add("params", static_cast<std::int64_t>(dequantized_.size()) * 4);
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

  bool lora() const { return base_engine_ != nullptr; }
  // The model's layout and the engine holding its parameters: the trained ones, or with LoRA the frozen base.
  const ParamLayout& model_layout() const { return base_layout_ ? *base_layout_ : layout_; }
  ZeroEngine& model_engine() const { return base_engine_ ? *base_engine_ : *engine_; }
  void begin_step() {
    engine_->begin_step();
    if (base_engine_) base_engine_->begin_step();
  }
  void begin_micro_step(i64 k) {
    engine_->begin_micro_step(k);
    if (base_engine_) base_engine_->begin_micro_step(k);
  }
  const float* P(const ParamTensor& t) const { return static_cast<const float*>(model_engine().param_at(t.offset)); }
  // The model's gradients, none for a frozen base (autograd gives frozen leaves none).
  float* G(const ParamTensor& t) { return lora() ? nullptr : static_cast<float*>(engine_->grad_at(t.offset)); }
  // A block tensor's parameters / gradients, or null when the model lacks the role (a bias Llama has not).
  const float* Pb(i64 l, BlockTensor which) const {
    return model_layout().has(which) ? P(model_layout().block(l, which)) : nullptr;
  }
  float* Gb(i64 l, BlockTensor which) { return model_layout().has(which) ? G(model_layout().block(l, which)) : nullptr; }
  // A block linear's weight: the base's, or its NF4 codes dequantised into the scratch weight.
  const float* W(i64 l, BlockTensor which) {
    if (nf4_.empty()) return Pb(l, which);
    const Nf4ModuleTensors& q = nf4_[static_cast<std::size_t>(l * 4 + nf4_weight_slot(which))];
    dequantize_nf4(q, dequantized_.data());
    return dequantized_.data();
  }
  // The adapters of block l: A and B of adapted module j are tensors 2j and 2j+1 of the block's unit.
  const ParamTensor& adapter(i64 l, std::size_t j, int b) const {
    return layout_.tensors()[layout_.units()[static_cast<std::size_t>(l)].first_tensor + 2 * j + static_cast<std::size_t>(b)];
  }
  const float* AP(const ParamTensor& t) const { return static_cast<const float*>(engine_->param_at(t.offset)); }
  float* AG(const ParamTensor& t) { return static_cast<float*>(engine_->grad_at(t.offset)); }
  // out = inp W^T + bias for block l's linear `which` (inp N x C, out N x OC), plus every adapter on its rows.
  void linear_forward(i64 l, BlockTensor which, float* out, const float* inp, const float* bias, i64 C, i64 OC) {
    const i64 BT = config_.micro_batch * config_.seq_len;
    cpu::matmul_forward(out, inp, W(l, which), bias, BT, C, OC);
    for (std::size_t j = 0; j < adapted_.size(); ++j) {
      const AdaptedLinear& m = adapted_[j];
      if (m.base != which) continue;
      cpu::lora_forward(out, lora_xa_[static_cast<std::size_t>(l) * adapted_.size() + j].data(), inp,
                        AP(adapter(l, j, 0)), AP(adapter(l, j, 1)), static_cast<float>(config_.lora.scaling()), BT, C,
                        config_.lora.rank, OC, m.row_offset, m.out);
    }
  }
  // Its backward: dinp (overwritten), the weight's gradient (none when frozen), dbias, and the adapters'.
  void linear_backward(i64 l, BlockTensor which, float* dinp, float* dbias, const float* dout, const float* inp, i64 C,
                       i64 OC) {
    const i64 BT = config_.micro_batch * config_.seq_len;
    cpu::matmul_backward(dinp, Gb(l, which), dbias, dout, inp, W(l, which), BT, C, OC);
    for (std::size_t j = 0; j < adapted_.size(); ++j) {
      const AdaptedLinear& m = adapted_[j];
      if (m.base != which) continue;
      cpu::lora_backward(dinp, AG(adapter(l, j, 0)), AG(adapter(l, j, 1)), dout, inp,
                         lora_xa_[static_cast<std::size_t>(l) * adapted_.size() + j].data(), AP(adapter(l, j, 0)),
                         AP(adapter(l, j, 1)), static_cast<float>(config_.lora.scaling()), BT, C, config_.lora.rank, OC,
                         m.row_offset, m.out);
    }
  }
  // Stage 3 gathers each unit's parameters before it computes (a no-op at stages 0-2), in the order
  // exec/zero/zero_buffer_layout.cpp plans: embeddings, blocks, head unit, the embeddings again when tied. The
  // adapters' engine has one unit per block, used with it.
  void need_embeddings() { model_engine().params_needed(0, model_layout().block_begin(0)); }
  void need_block(i64 l) {
    model_engine().params_needed(model_layout().block_begin(l), model_layout().block_end(l));
    if (lora()) {
      const ParamUnit& u = layout_.units()[static_cast<std::size_t>(l)];
      engine_->params_needed(u.begin, u.end);
    }
  }
  void need_head_unit() { model_engine().params_needed(model_layout().tail_begin(), model_layout().total()); }

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
    const ParamLayout& layout = model_layout();
    need_embeddings();
    cpu::encoder_forward(residual_.data(), in, P(layout.wte()), layout.has_wpe() ? P(layout.wpe()) : nullptr, B, T, C);
    for (i64 l = 0; l < s.layers; ++l) {
      need_block(l);
      auto& a = layers_[l];
      const float* x = residual_.data() + l * BT * C;
      float* y = residual_.data() + (l + 1) * BT * C;
      norm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, Pb(l, kLn1W), Pb(l, kLn1B));
      linear_forward(l, kQkvW, a.qkv.data(), a.ln1.data(), Pb(l, kQkvB), C, QKV);
      if (s.position == PositionKind::rope)
        cpu::rope_forward(a.qkv.data(), rope_cos_.data(), rope_sin_.data(), B, T, s.heads, s.kv_heads, s.head_size);
      cpu::attention_forward(a.att.data(), a.lse.data(), a.qkv.data(), B, T, s.heads, s.kv_heads, s.head_size);
      linear_forward(l, kAttProjW, a.res2.data(), a.att.data(), Pb(l, kAttProjB), Q, C);
      for (i64 i = 0; i < BT * C; ++i) a.res2[i] += x[i];
      norm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), Pb(l, kLn2W), Pb(l, kLn2B));
      linear_forward(l, kFcW, a.fc, a.ln2.data(), Pb(l, kFcB), C, FI);
      if (s.mlp == MlpKind::gelu) cpu::gelu_forward(a.act, a.fc, BT * F);
      else cpu::swiglu_forward(a.act, a.fc, BT, F);
      linear_forward(l, kFcProjW, y, a.act, Pb(l, kFcProjB), F, C);
      for (i64 i = 0; i < BT * C; ++i) y[i] += a.res2[i];
    }
    const float* xf = residual_.data() + s.layers * BT * C;
    need_head_unit();
    norm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), xf, P(layout.final_norm_w()),
                 s.norm_bias ? P(layout.final_norm_b()) : nullptr);
    if (s.tied_head) need_embeddings();
    cpu::matmul_forward(logits_.data(), lnf_.data(), P(layout.head()), nullptr, BT, C, s.padded_vocab);
    cpu::crossentropy_forward_backward(losses_.data(), want_grad ? logits_.data() : nullptr, logits_.data(), tg, BT,
                                       s.vocab, s.padded_vocab, dloss);
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
    const ParamLayout& layout = model_layout();
    const bool train_model = !lora();  // with LoRA only the adapters (one unit per block) have gradients
    // The ZeRO engine learns which gradients backward writes next and which are final (its buckets).
    if (train_model) {
      // The tied head writes the embeddings' gradients first; untied, only the encoder's backward writes them,
      // at the end (where their bucket may take a rotating buffer: exec/zero/zero_buffer_layout.cpp).
      if (s.tied_head) engine_->prepare_gradients(0, layout.block_begin(0));
      engine_->prepare_gradients(layout.tail_begin(), layout.total());  // the head unit
    }
    // logits = lnf head^T: dlnf = dlogits head; dhead += dlogits^T lnf
    if (s.tied_head) need_embeddings();
    else need_head_unit();
    cpu::matmul_backward(dln.data(), G(layout.head()), nullptr, logits_.data(), lnf_.data(), P(layout.head()), BT, C,
                         s.padded_vocab);
    if (s.tied_head) need_head_unit();
    norm_backward(dres.data(), G(layout.final_norm_w()), s.norm_bias ? G(layout.final_norm_b()) : nullptr, dln.data(),
                  residual_.data() + s.layers * BT * C, P(layout.final_norm_w()), lnf_mean_.data(), lnf_rstd_.data());
    if (train_model) engine_->gradients_final_from(layout.tail_begin());
    for (i64 l = s.layers - 1; l >= 0; --l) {
      const ParamUnit& trained = train_model ? ParamUnit{0, 0, layout.block_begin(l), layout.block_end(l)}
                                             : layout_.units()[static_cast<std::size_t>(l)];
      engine_->prepare_gradients(trained.begin, trained.end);
      need_block(l);
      auto& a = layers_[l];
      const float* x = residual_.data() + l * BT * C;
      // y = res2 + down(act(fc)): dres flows to res2 unchanged
      linear_backward(l, kFcProjW, dact.data(), Gb(l, kFcProjB), dres.data(), a.act, F, C);
      if (s.mlp == MlpKind::gelu) cpu::gelu_backward(dfc.data(), a.fc, dact.data(), BT * F);
      else cpu::swiglu_backward(dfc.data(), a.fc, dact.data(), BT, F);
      linear_backward(l, kFcW, dln.data(), Gb(l, kFcB), dfc.data(), a.ln2.data(), C, FI);
      norm_backward(dres.data(), Gb(l, kLn2W), Gb(l, kLn2B), dln.data(), a.res2.data(), Pb(l, kLn2W), a.ln2_mean.data(),
                    a.ln2_rstd.data());
      // res2 = x + o_proj(att)
      linear_backward(l, kAttProjW, dln.data(), Gb(l, kAttProjB), dres.data(), a.att.data(), Q, C);
      cpu::attention_backward(dqkv.data(), dln.data(), a.qkv.data(), a.att.data(), a.lse.data(), B, T, s.heads,
                              s.kv_heads, s.head_size);
      if (s.position == PositionKind::rope)
        cpu::rope_backward(dqkv.data(), rope_cos_.data(), rope_sin_.data(), B, T, s.heads, s.kv_heads, s.head_size);
      linear_backward(l, kQkvW, dln.data(), Gb(l, kQkvB), dqkv.data(), a.ln1.data(), C, QKV);
      norm_backward(dres.data(), Gb(l, kLn1W), Gb(l, kLn1B), dln.data(), x, Pb(l, kLn1W), a.ln1_mean.data(),
                    a.ln1_rstd.data());
      engine_->gradients_final_from(trained.begin);
    }
    if (!train_model) return;  // the embeddings are frozen: nothing below needs their input gradient
    if (!s.tied_head) engine_->prepare_gradients(0, layout.block_begin(0));
    cpu::encoder_backward(G(layout.wte()), layout.has_wpe() ? G(layout.wpe()) : nullptr, dres.data(), in, B, T, C);
    engine_->gradients_final_from(0);
  }

  ExecConfig config_;
  std::unique_ptr<Communicator> own_comm_;  // one rank, when no communicator was given
  Communicator& comm_;
  ParamLayout layout_;  // the trained parameters: the model's, or with LoRA the adapters'
  LossScaler scaler_;
  // LoRA: the model's whole layout (what --init-from and the seed describe), the frozen base's (without the block
  // weights under NF4) with its device and engine, the adapted modules, each one's x A^T per layer, the NF4 codes
  // (four per layer: qkv, o, fc, down) and the scratch weight they are dequantised into. Declared before the
  // trained engine, so that it is destroyed after it (both use comm_).
  std::unique_ptr<ParamLayout> full_layout_, base_layout_;
  std::unique_ptr<CpuZeroDevice> base_device_;
  std::unique_ptr<ZeroEngine> base_engine_;
  std::vector<AdaptedLinear> adapted_;
  std::vector<std::vector<float>> lora_xa_;
  std::vector<Nf4ModuleTensors> nf4_;  // per block weight, one bitsandbytes tensor per transformers module
  int host_threads_ = 1;               // the CPU optimizer's threads, also those that quantise the base
  std::vector<float> dequantized_;
  std::unique_ptr<CpuZeroDevice> device_;
  std::unique_ptr<ZeroEngine> engine_;
  std::vector<float> residual_;  // (L+1) x (B,T,C): the input of each block and of the final norm
  MlpSavedLayout mlp_layout_;   // (fp32, every block kept)
  std::vector<float> mlp_;      // the MLP tensors block by block, and the gradient partition over them when lent
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
