// The GPU training step, read top to bottom: forward (embedding, blocks, final norm, logits, fused loss),
// backward (the same in reverse, recomputing each block first under full checkpointing, or its norm and MLP
// activation outputs under selective), then the gradient norm, the fp16 overflow check and AdamW. The block is one
// pipeline whose op kinds come from the shape (LayerNorm or RMSNorm, learned or rotary positions, GELU or SwiGLU,
// multi-head or grouped-query attention, tied or untied head): GPT-2 and Llama are two configurations of it.
// Kernels live one op kind per file beside their launchers (exec/cuda/*.cu).
#include "exec/cuda/cuda_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "exec/activation_accounting.h"
#include "exec/engine_trainer.h"
#include "exec/cuda/adamw.cuh"
#include "exec/cuda/attention.cuh"
#include "exec/cuda/crossentropy.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_handles.cuh"
#include "exec/cuda/device_allocator.h"
#include "exec/cuda/encoder.cuh"
#include "exec/cuda/gelu.cuh"
#include "exec/cuda/layernorm.cuh"
#include "exec/cuda/matmul.cuh"
#include "exec/cuda/rmsnorm.cuh"
#include "exec/cuda/rope.cuh"
#include "exec/cuda/swiglu.cuh"
#include "exec/cpu/cpu_ops.h"
#include "exec/comm/nccl_communicator.h"
#include "exec/cuda/cuda_zero_device.h"
#include "exec/loss_scaler.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan::exec {

bool cuda_device_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("no usable CUDA device (") + cudaGetErrorString(err) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device present";
    return false;
  }
  return true;
}

namespace {

using i64 = std::int64_t;
using cuda::CudaEvent;
using cuda::CudaStream;
using cuda::PinnedHost;
using cuda::elapsed_s;
using cuda::host_to_float;

// One block's saved tensors (activation_accounting.h lists them and their sizes): norm outputs, q/k/v (after the
// rotary embedding), attention output, the second norm's input, the MLP's pre-activation (GELU: fc; SwiGLU: gate
// and up) and activation output; the norms' fp32 statistics (mean for LayerNorm only) and the logsumexp.
template <typename T>
struct BlockBuffers {
  T *ln1, *qkv, *att, *res2, *ln2, *fc, *act;
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
};

template <typename T>
class CudaTrainer final : public EngineTrainer {
 public:
  CudaTrainer(const ExecConfig& config, Communicator* comm)
      : config_(config), layout_(config.shape, zero_alignment(comm ? comm->world() : 1)),
        scaler_(config.precision, config.loss_scale) {
    validate(config_);
    if (config_.seq_len > (1 << 30) || config_.micro_batch * config_.seq_len > (1ll << 31))
      throw std::invalid_argument("executor: micro_batch x seq_len too large for 32-bit token indexing");
    // The communicator chose this rank's GPU (cudaSetDevice); one rank without one uses the current device.
    if (!comm) own_comm_ = make_single_gpu_communicator();
    comm_ = comm ? comm : own_comm_.get();
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    device_name_ = prop.name;
    try {
      stream_.create();
      alloc_ = std::make_unique<DeviceAllocator>();
      zero_device_ = std::make_unique<CudaZeroDevice>(layout_, config_.seed, element_type(), *alloc_, stream_,
                                                      static_cast<cudaStream_t>(comm_->comm_stream()));
      engine_ = std::make_unique<ZeroEngine>(config_, layout_, *zero_device_, *comm_);
      attach(*engine_, scaler_);
      allocate();
      matmul_ = std::make_unique<cuda::Matmul>(cublas_ws_, static_cast<std::size_t>(kCublasWorkspaceBytes),
                                               /*tune=*/!config_.zero.deterministic);
    } catch (...) {
      // the members release everything created so far; first let queued work finish with the buffers
      if (stream_.get()) cudaStreamSynchronize(stream_);
      throw;
    }
  }

  // The members then free the buffers (alloc_) and handles, the stream last.
  ~CudaTrainer() override {
    if (stream_.get()) cudaStreamSynchronize(stream_);
  }

  const ExecConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  std::string backend() const override { return "cuda"; }
  std::string device_name() const override { return device_name_; }
  int rank() const override { return comm_->rank(); }
  int world() const override { return comm_->world(); }
  CommCounters comm_counters() const override { return comm_->counters(); }

  double forward_loss(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    engine_->begin_forward_only();
    forward(in.data(), tg.data(), false, 0);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return mean_loss(1);
  }

  double forward_backward(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    const float dloss = static_cast<float>(scaler_.scale() / static_cast<double>(BT()));
    engine_->begin_step();
    engine_->begin_micro_step(config_.grad_accum - 1);  // a boundary micro-step: its gradients are reduced
    forward(in.data(), tg.data(), true, 0, dloss);
    backward();
    zero_device_->synchronize();
    return mean_loss(1);
  }

  StepResult step(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, config_.grad_accum);
    StepResult r;
    const double scale = scaler_.scale();
    r.loss_scale = scale;
    // Each rank's loss gradient is 1/(tokens of the global batch): the sum over ranks is the global mean.
    const double global_tokens = static_cast<double>(BT() * config_.grad_accum * comm_->world());
    const float dloss = static_cast<float>(scale / global_tokens);
    CUDA_CHECK(cudaEventRecord(ev_start_.get(), stream_));
    engine_->begin_step();
    // No host synchronization between micro-steps: the token uploads and the loss copies are ordered on the
    // stream (pageable uploads are staged before cudaMemcpyAsync returns), and the phase times are read from
    // per-micro-step events once the step has finished.
    for (i64 k = 0; k < config_.grad_accum; ++k) {
      engine_->begin_micro_step(k);
      CUDA_CHECK(cudaEventRecord(micro_events_[3 * k]->get(), stream_));
      forward(in.data() + k * BT(), tg.data() + k * BT(), true, k, dloss);
      CUDA_CHECK(cudaEventRecord(micro_events_[3 * k + 1]->get(), stream_));
      backward();
      CUDA_CHECK(cudaEventRecord(micro_events_[3 * k + 2]->get(), stream_));
    }
    // Reduced gradients, the global norm (inf/nan: fp16 overflow, DeepSpeed's has_overflow) agreed by all
    // ranks, clipping, AdamW on the rank's partition, the parameter all-gather; finish_step ends synchronized,
    // so the micro-steps' losses are on the host by then.
    r.grad_norm = engine_->finish_step(scale, [&](double norm) {
      r.skipped = scaler_.update(!std::isfinite(norm));
      return r.skipped;
    });
    r.loss = engine_->sum_over_ranks(local_loss_sum(config_.grad_accum)) / global_tokens;
    CUDA_CHECK(cudaEventRecord(ev_end_.get(), stream_));
    CUDA_CHECK(cudaEventSynchronize(ev_end_.get()));
    double fwd = 0, bwd = 0;
    for (i64 k = 0; k < config_.grad_accum; ++k) {
      fwd += elapsed_s(*micro_events_[3 * k], *micro_events_[3 * k + 1]);
      bwd += elapsed_s(*micro_events_[3 * k + 1], *micro_events_[3 * k + 2]);
    }
    r.times.forward_s = fwd;
    r.times.backward_s = bwd;
    r.times.step_s = elapsed_s(ev_start_, ev_end_);
    r.times.optimizer_s = std::max(0.0, r.times.step_s - fwd - bwd);
    record_engine_times(r.times);
    alloc_->sample();
    return r;
  }

  std::vector<float> logits() const override { return download(logits_, BT() * config_.shape.padded_vocab, 1.0); }


  MemoryReport memory() const override {
    MemoryReport r;
    r.peak_by_component = alloc_->peaks();
    r.peak_total = alloc_->peak_total();
    r.device_total = alloc_->device_total();
    r.device_used_baseline = alloc_->baseline_used();
    r.device_used_peak = alloc_->peak_used();
    r.host_by_component = zero_device_->host_bytes_by_component();
    r.nvme_bytes = engine_->nvme_bytes();
    return r;
  }

 private:
  i64 BT() const { return config_.micro_batch * config_.seq_len; }
  T* P(const ParamTensor& t) const { return static_cast<T*>(engine_->param_at(t.offset)); }
  T* G(const ParamTensor& t) const { return static_cast<T*>(engine_->grad_at(t.offset)); }
  // A block tensor's parameters / gradients, or null when the model lacks the role (a bias Llama has not).
  T* P(i64 l, BlockTensor which) const { return layout_.has(which) ? P(layout_.block(l, which)) : nullptr; }
  T* G(i64 l, BlockTensor which) const { return layout_.has(which) ? G(layout_.block(l, which)) : nullptr; }
  // Stage 3 gathers each unit's parameters before it computes (a no-op at stages 0-2), in the order
  // exec/zero/zero_buffer_layout.cpp plans: embeddings, blocks, head unit, the embeddings again when tied.
  void need_embeddings() { engine_->params_needed(0, layout_.block_begin(0)); }
  void need_block(i64 l) { engine_->params_needed(layout_.block_begin(l), layout_.block_end(l)); }
  void need_head_unit() { engine_->params_needed(layout_.tail_begin(), layout_.total()); }
  bool rope() const { return config_.shape.position == PositionKind::rope; }
  bool swiglu() const { return config_.shape.mlp == MlpKind::swiglu; }

  // The two norm kinds: LayerNorm (eps 1e-5, mean and rstd, bias) or RMSNorm (rstd only, rms_norm_eps).
  void norm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* b) {
    const auto& s = config_.shape;
    if (s.norm == NormKind::layer_norm) cuda::layernorm_forward<T>(out, mean, rstd, x, w, b, BT(), s.hidden, stream_);
    else cuda::rmsnorm_forward<T>(out, rstd, x, w, BT(), s.hidden, static_cast<float>(s.norm_eps), stream_);
  }
  void norm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const float* mean, const float* rstd,
                     bool acc) {
    const auto& s = config_.shape;
    if (s.norm == NormKind::layer_norm)
      cuda::layernorm_backward<T>(dx, dw, db, sums_, dout, x, w, mean, rstd, BT(), s.hidden, acc, stream_);
    else cuda::rmsnorm_backward<T>(dx, dw, sums_, dout, x, w, rstd, BT(), s.hidden, acc, stream_);
  }
  // The MLP activation's forward (out from the pre-activation): GELU, or SwiGLU over gate and up.
  void activation_forward(T* out, const T* pre) {
    const auto& s = config_.shape;
    if (swiglu()) cuda::swiglu_forward<T>(out, pre, BT(), s.ffn_hidden, stream_);
    else cuda::gelu_forward<T>(out, pre, BT() * s.ffn_hidden, stream_);
  }
  static CommDtype element_type() {
    if constexpr (std::is_same_v<T, float>) return CommDtype::f32;
    else if constexpr (std::is_same_v<T, __half>) return CommDtype::f16;
    else return CommDtype::bf16;
  }

  void check_tokens(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg, i64 micro) const {
    const i64 need = micro * BT();
    if (static_cast<i64>(in.size()) != need || static_cast<i64>(tg.size()) != need)
      throw std::invalid_argument("cuda trainer: expected " + std::to_string(need) + " input and target tokens");
    for (i64 i = 0; i < need; ++i)
      if (in[i] < 0 || in[i] >= config_.shape.vocab || tg[i] < 0 || tg[i] >= config_.shape.vocab)
        throw std::invalid_argument("cuda trainer: token outside [0, vocab) at position " + std::to_string(i));
  }

  void allocate() {
    const auto& s = config_.shape;
    const i64 C = s.hidden, L = s.layers, bt = BT();
    const i64 Q = s.q_dim(), QKV = s.qkv_dim(), F = s.ffn_hidden, FI = s.mlp_in_dim();
    const i64 nb = config_.recompute == ExecRecompute::full ? 1 : L;  // blocks whose tensors are kept
    // selective: no norm or MLP activation outputs are kept; forward writes them into the backward working set
    // (free until backward) and backward rebuilds each there just before the weight gradient that reads it.
    const bool selective = config_.recompute == ExecRecompute::selective;
    const bool layer_norm = s.norm == NormKind::layer_norm;
    // params, grads, master params and AdamW moments belong to the ZeRO engine
    residual_ = alloc_->allocate_n<T>("activations", "block inputs (residual stream)", (L + 1) * bt * C);
    // with full recompute the one set of block buffers also holds layer 0's norm input (it is residual_[0])
    blocks_.resize(L);
    auto A = [&](const char* what, i64 count) { return alloc_->allocate_n<T>("activations", what, count); };
    auto F32 = [&](const char* what, i64 count) { return alloc_->allocate_n<float>("activations", what, count); };
    T* ln1 = selective ? nullptr : A("norm 1 outputs", nb * bt * C);
    T* qkv = A("QKV outputs", nb * bt * QKV);
    T* att = A("attention outputs", nb * bt * Q);
    T* res2 = A("norm 2 inputs", nb * bt * C);
    T* ln2 = selective ? nullptr : A("norm 2 outputs", nb * bt * C);
    T* fc = A("MLP pre-activations (FC, or gate and up)", nb * bt * FI);
    T* act = selective ? nullptr : A("MLP activation outputs", nb * bt * F);
    const i64 stats_rows = layer_norm ? 4 : 2;  // mean and rstd of both norms, or rstd alone
    float* stats = F32("norm statistics", nb * stats_rows * bt);
    float* lse = F32("attention logsumexp", nb * bt * s.heads);
    lnf_ = A("final norm output", bt * C);
    lnf_stats_ = F32("final norm statistics", (layer_norm ? 2 : 1) * bt);
    logits_ = alloc_->allocate_n<T>("logits", "logits / dlogits (in place)", bt * s.padded_vocab);
    losses_ = alloc_->allocate_n<float>("logits", "per-token losses", bt);
    // the backward working set, live at the backward peak: the planner's activation component counts it there
    dres_ = alloc_->allocate_n<T>("activations", "residual gradient", bt * C);
    dln_ = alloc_->allocate_n<T>("activations", "norm-input / attention-output gradient", bt * std::max(C, Q));
    d4_ = alloc_->allocate_n<T>("activations", "MLP / QKV gradient", bt * std::max(QKV, F));
    d_rowsum_ = alloc_->allocate_n<float>("activations", "attention rowsum(dO*O)", bt * s.heads);
    for (i64 l = 0; l < L; ++l) {
      const i64 k = nb == L ? l : 0;
      float* st = stats + k * stats_rows * bt;
      BlockBuffers<T>& b = blocks_[l];
      b.ln1 = selective ? dln_ : ln1 + k * bt * C;
      b.qkv = qkv + k * bt * QKV;
      b.att = att + k * bt * Q;
      b.res2 = res2 + k * bt * C;
      b.ln2 = selective ? dln_ : ln2 + k * bt * C;
      b.fc = fc + k * bt * FI;
      b.act = selective ? d4_ : act + k * bt * F;
      b.ln1_mean = layer_norm ? st : nullptr;
      b.ln1_rstd = layer_norm ? st + bt : st;
      b.ln2_mean = layer_norm ? st + 2 * bt : nullptr;
      b.ln2_rstd = layer_norm ? st + 3 * bt : st + bt;
      b.lse = lse + k * bt * s.heads;
    }
    // column-sum partials (the widest norm/bias gradient) and their arrival counter; kept zeroed between
    // reductions. --deterministic: one row of partials per 256 rows, added in order, and the ordered dwte's token
    // positions.
    const bool det = config_.zero.deterministic;
    const i64 partial_floats = column_sum_scratch_floats(bt, column_sum_width(s), det);
    float* partial = alloc_->allocate_n<float>("workspace", "bias/norm gradient partials", partial_floats + 1);
    CUDA_CHECK(cudaMemset(partial, 0, (partial_floats + 1) * sizeof(float)));
    sums_ = cuda::ColumnSums{partial, reinterpret_cast<unsigned*>(partial + partial_floats), det};
    tokens_ = alloc_->allocate_n<int>("workspace", "input and target tokens", 2 * bt);
    if (det) token_positions_d_ = alloc_->allocate_n<int>("workspace", "token positions (ordered dwte)", 3 * bt + 1);
    if (rope()) {
      // cos and sin of every (position, frequency) of the sequence, fp32, computed once on the host by the CPU
      // reference's own function so both backends rotate by the same angles.
      const i64 half = config_.seq_len * s.head_size / 2;
      std::vector<float> cos(half), sin(half);
      const cpu::RopeScalingLlama3 llama3{s.rope_scaling.factor, s.rope_scaling.low_freq_factor,
                                          s.rope_scaling.high_freq_factor, s.rope_scaling.original_max_position};
      cpu::rope_tables(cos.data(), sin.data(), config_.seq_len, s.head_size, s.rope_theta,
                       s.rope_scaling.llama3 ? &llama3 : nullptr);
      rope_cos_ = alloc_->allocate_n<float>("workspace", "RoPE cos/sin tables", 2 * half);
      rope_sin_ = rope_cos_ + half;
      CUDA_CHECK(cudaMemcpy(rope_cos_, cos.data(), half * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(rope_sin_, sin.data(), half * sizeof(float), cudaMemcpyHostToDevice));
    }
    cublas_ws_ = alloc_->allocate("workspace", "cuBLASLt workspace", kCublasWorkspaceBytes);
    host_losses_.allocate(static_cast<std::size_t>(config_.grad_accum * bt));
    for (i64 k = 0; k < 3 * config_.grad_accum; ++k) micro_events_.push_back(std::make_unique<CudaEvent>());
  }

  // One block's forward. `recompute` (full checkpointing, in backward) skips the block output, already stored.
  void block_forward(i64 l, bool recompute) {
    const auto& s = config_.shape;
    const i64 C = s.hidden, bt = BT(), Q = s.q_dim(), QKV = s.qkv_dim(), F = s.ffn_hidden, FI = s.mlp_in_dim();
    const BlockBuffers<T>& a = blocks_[l];
    const T* x = residual_ + l * bt * C;
    T* y = residual_ + (l + 1) * bt * C;
    const int B = static_cast<int>(config_.micro_batch), Tn = static_cast<int>(config_.seq_len);
    norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(l, kLn1W), P(l, kLn1B));
    matmul_->forward<T>(a.qkv, a.ln1, P(l, kQkvW), P(l, kQkvB), nullptr, bt, C, QKV, stream_);
    if (rope())
      cuda::rope_forward<T>(a.qkv, rope_cos_, rope_sin_, B, Tn, static_cast<int>(s.heads), static_cast<int>(s.kv_heads),
                            static_cast<int>(s.head_size), stream_);
    cuda::attention_forward<T>(a.att, a.lse, a.qkv, B, Tn, static_cast<int>(s.heads), static_cast<int>(s.kv_heads),
                               static_cast<int>(s.head_size), stream_);
    matmul_->forward<T>(a.res2, a.att, P(l, kAttProjW), P(l, kAttProjB), x, bt, Q, C, stream_);
    norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(l, kLn2W), P(l, kLn2B));
    if (swiglu()) {
      matmul_->forward<T>(a.fc, a.ln2, P(l, kFcW), P(l, kFcB), nullptr, bt, C, FI, stream_);
      activation_forward(a.act, a.fc);
    } else {
      matmul_->forward_gelu<T>(a.act, a.fc, a.ln2, P(l, kFcW), P(l, kFcB), bt, C, FI, stream_);
    }
    if (!recompute) matmul_->forward<T>(y, a.act, P(l, kFcProjW), P(l, kFcProjB), a.res2, bt, F, C, stream_);
  }

  void forward(const int* in, const int* tg, bool want_grad, i64 micro, float dloss = 0.0f) {
    const auto& s = config_.shape;
    const i64 C = s.hidden, bt = BT();
    CUDA_CHECK(cudaMemcpyAsync(tokens_, in, bt * sizeof(int), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(tokens_ + bt, tg, bt * sizeof(int), cudaMemcpyHostToDevice, stream_));
    if (want_grad && config_.zero.deterministic) {
      // From pageable memory, cudaMemcpyAsync returns once the bytes are staged: the vectors may change after.
      token_positions_.build(in, bt);
      const int distinct = static_cast<int>(token_positions_.tokens.size());
      int* d = token_positions_d_;
      CUDA_CHECK(cudaMemcpyAsync(d, token_positions_.tokens.data(), distinct * sizeof(int), cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaMemcpyAsync(d + bt, token_positions_.offsets.data(), (distinct + 1) * sizeof(int),
                                 cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaMemcpyAsync(d + 2 * bt + 1, token_positions_.positions.data(), bt * sizeof(int),
                                 cudaMemcpyHostToDevice, stream_));
      token_positions_view_ = cuda::DeviceTokenPositions{d, d + bt, d + 2 * bt + 1, distinct};
    }
    need_embeddings();
    cuda::encoder_forward<T>(residual_, tokens_, P(layout_.wte()), layout_.has_wpe() ? P(layout_.wpe()) : nullptr,
                             config_.micro_batch, config_.seq_len, C, stream_);
    for (i64 l = 0; l < s.layers; ++l) {
      need_block(l);
      block_forward(l, false);
    }
    need_head_unit();
    norm_forward(lnf_, lnf_stats_, s.norm == NormKind::layer_norm ? lnf_stats_ + bt : lnf_stats_,
                 residual_ + s.layers * bt * C, P(layout_.final_norm_w()),
                 s.norm_bias ? P(layout_.final_norm_b()) : nullptr);
    if (s.tied_head) need_embeddings();
    matmul_->forward<T>(logits_, lnf_, P(layout_.head()), nullptr, nullptr, bt, C, s.padded_vocab, stream_);
    cuda::crossentropy_forward_backward<T>(losses_, logits_, tokens_ + bt, bt, s.vocab, s.padded_vocab, dloss,
                                           want_grad, stream_);
    CUDA_CHECK(cudaMemcpyAsync(host_losses_.get() + micro * bt, losses_, bt * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }

  // Gradients are written on the first micro-step and accumulated on the others.
  // The ZeRO engine learns which gradients backward writes next (prepare_gradients: stage 2 hands out bucket
  // buffers) and which are final (gradients_final_from: finished buckets are reduced on the comm stream while
  // backward goes on).
  void backward() {  // the micro-step's tokens are already on the device
    const auto& s = config_.shape;
    const i64 C = s.hidden, bt = BT(), Q = s.q_dim(), QKV = s.qkv_dim(), F = s.ffn_hidden, FI = s.mlp_in_dim();
    const int B = static_cast<int>(config_.micro_batch), Tn = static_cast<int>(config_.seq_len);
    const int NH = static_cast<int>(s.heads), NKV = static_cast<int>(s.kv_heads), HS = static_cast<int>(s.head_size);
    const bool acc = engine_->kernels_accumulate();
    const bool layer_norm = s.norm == NormKind::layer_norm;
    engine_->prepare_gradients(0, layout_.block_begin(0));              // embeddings (wte by the tied head)
    engine_->prepare_gradients(layout_.tail_begin(), layout_.total());  // the head unit
    // logits = lnf head^T
    if (s.tied_head) need_embeddings();
    else need_head_unit();
    matmul_->backward_input<T>(dln_, logits_, P(layout_.head()), bt, C, s.padded_vocab, stream_);
    matmul_->backward_weight<T>(G(layout_.head()), logits_, lnf_, bt, C, s.padded_vocab, acc, stream_);
    CUDA_CHECK(cudaMemsetAsync(dres_, 0, bt * C * sizeof(T), stream_));
    if (s.tied_head) need_head_unit();
    norm_backward(dres_, G(layout_.final_norm_w()), s.norm_bias ? G(layout_.final_norm_b()) : nullptr, dln_,
                  residual_ + s.layers * bt * C, P(layout_.final_norm_w()), lnf_stats_,
                  layer_norm ? lnf_stats_ + bt : lnf_stats_, acc);
    engine_->gradients_final_from(layout_.tail_begin());
    for (i64 l = s.layers - 1; l >= 0; --l) {
      engine_->prepare_gradients(layout_.block_begin(l), layout_.block_end(l));
      need_block(l);
      if (config_.recompute == ExecRecompute::full) block_forward(l, true);
      const BlockBuffers<T>& a = blocks_[l];
      const T* x = residual_ + l * bt * C;
      // Selective recompute rebuilds the norm and MLP activation outputs in the working set (a.ln1/a.ln2 are
      // dln_, a.act is d4_): each weight gradient runs before the input gradient that overwrites its input there.
      const bool rebuild = config_.recompute == ExecRecompute::selective;
      // y = res2 + act Wdown^T + b
      if (rebuild) activation_forward(a.act, a.fc);
      matmul_->backward_weight<T>(G(l, kFcProjW), dres_, a.act, bt, F, C, acc, stream_);
      // d(pre-activation): GELU's fused into the GEMM epilogue, into d4_; SwiGLU's in place over gate and up
      // (they are read for the last time here), so dfc is a.fc.
      T* dfc = d4_;
      if (swiglu()) {
        matmul_->backward_input<T>(d4_, dres_, P(l, kFcProjW), bt, F, C, stream_);
        cuda::swiglu_backward<T>(a.fc, a.fc, d4_, bt, F, stream_);
        dfc = a.fc;
      } else {
        matmul_->backward_input_dgelu<T>(d4_, dres_, P(l, kFcProjW), a.fc, bt, F, C, stream_);
      }
      if (layout_.has(kFcProjB)) cuda::bias_backward<T>(G(l, kFcProjB), dres_, sums_, bt, C, acc, stream_);
      if (rebuild) norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(l, kLn2W), P(l, kLn2B));
      matmul_->backward_weight<T>(G(l, kFcW), dfc, a.ln2, bt, C, FI, acc, stream_);
      matmul_->backward_input<T>(dln_, dfc, P(l, kFcW), bt, C, FI, stream_);
      if (layout_.has(kFcB)) cuda::bias_backward<T>(G(l, kFcB), dfc, sums_, bt, FI, acc, stream_);
      norm_backward(dres_, G(l, kLn2W), G(l, kLn2B), dln_, a.res2, P(l, kLn2W), a.ln2_mean, a.ln2_rstd, acc);
      // res2 = x + att Wo^T + b
      matmul_->backward_input<T>(dln_, dres_, P(l, kAttProjW), bt, Q, C, stream_);
      matmul_->backward_weight<T>(G(l, kAttProjW), dres_, a.att, bt, Q, C, acc, stream_);
      if (layout_.has(kAttProjB)) cuda::bias_backward<T>(G(l, kAttProjB), dres_, sums_, bt, C, acc, stream_);
      cuda::attention_backward<T>(d4_, d_rowsum_, dln_, a.qkv, a.att, a.lse, B, Tn, NH, NKV, HS, stream_);
      if (rope()) cuda::rope_backward<T>(d4_, rope_cos_, rope_sin_, B, Tn, NH, NKV, HS, stream_);
      if (rebuild) norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(l, kLn1W), P(l, kLn1B));
      matmul_->backward_weight<T>(G(l, kQkvW), d4_, a.ln1, bt, C, QKV, acc, stream_);
      matmul_->backward_input<T>(dln_, d4_, P(l, kQkvW), bt, C, QKV, stream_);
      if (layout_.has(kQkvB)) cuda::bias_backward<T>(G(l, kQkvB), d4_, sums_, bt, QKV, acc, stream_);
      norm_backward(dres_, G(l, kLn1W), G(l, kLn1B), dln_, x, P(l, kLn1W), a.ln1_mean, a.ln1_rstd, acc);
      engine_->gradients_final_from(layout_.block_begin(l));
    }
    // The token embedding's gradient: the tied head wrote it first; untied, the first micro-step starts it at 0
    // (the scatter below adds).
    if (!s.tied_head && !acc)
      CUDA_CHECK(cudaMemsetAsync(G(layout_.wte()), 0, layout_.wte().numel() * sizeof(T), stream_));
    cuda::encoder_backward<T>(G(layout_.wte()), layout_.has_wpe() ? G(layout_.wpe()) : nullptr, dres_, tokens_, B, Tn,
                              C, acc, config_.zero.deterministic ? &token_positions_view_ : nullptr, stream_);
    engine_->gradients_final_from(0);
  }

  // Sum of this rank's per-token losses over its micro-steps (host copies made by forward).
  double local_loss_sum(i64 micro_steps) const {
    double sum = 0;
    for (i64 i = 0; i < micro_steps * BT(); ++i) sum += host_losses_.get()[i];
    return sum;
  }

  double mean_loss(i64 micro_steps) const {
    double sum = 0;
    for (i64 i = 0; i < micro_steps * BT(); ++i) sum += host_losses_.get()[i];
    return sum / static_cast<double>(micro_steps * BT());
  }

  std::vector<float> download(const T* src, i64 n, double factor) const {
    std::vector<T> raw(n);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaMemcpy(raw.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (i64 i = 0; i < n; ++i) out[i] = static_cast<float>(host_to_float(raw[i]) * factor);
    return out;
  }

  ExecConfig config_;
  ParamLayout layout_;
  LossScaler scaler_;
  std::string device_name_;
  std::unique_ptr<Communicator> own_comm_;  // one rank, when no communicator was given
  Communicator* comm_ = nullptr;
  // declaration order is release order reversed: host buffers, events, cuBLASLt, the engine, device memory,
  // the stream, the communicator (and its stream)
  CudaStream stream_;
  std::unique_ptr<DeviceAllocator> alloc_;
  std::unique_ptr<CudaZeroDevice> zero_device_;
  std::unique_ptr<ZeroEngine> engine_;
  std::unique_ptr<cuda::Matmul> matmul_;
  CudaEvent ev_start_, ev_end_;
  std::vector<std::unique_ptr<CudaEvent>> micro_events_;  // per micro-step: forward start, backward start, end
  int t_ = 0;
  T* residual_ = nullptr;
  std::vector<BlockBuffers<T>> blocks_;
  T* lnf_ = nullptr;
  float* lnf_stats_ = nullptr;
  T* logits_ = nullptr;
  float* losses_ = nullptr;
  T *dres_ = nullptr, *dln_ = nullptr, *d4_ = nullptr;
  float* d_rowsum_ = nullptr;
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;  // (T, HS/2) each, rotary models only
  cuda::ColumnSums sums_;  // bias/LayerNorm gradient column sums (deterministic with --deterministic)
  int* tokens_ = nullptr;
  // --deterministic: where each token of the micro-batch occurs (host, then its device copy) for the ordered dwte
  cuda::TokenPositions token_positions_;
  int* token_positions_d_ = nullptr;
  cuda::DeviceTokenPositions token_positions_view_;
  void* cublas_ws_ = nullptr;
  PinnedHost<float> host_losses_;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Trainer> make_cuda_trainer(const ExecConfig& config, Communicator* comm) {
  if (config.network) return make_cuda_network_trainer(config, comm);
  switch (config.precision) {
    case ExecPrecision::fp32: return std::make_unique<CudaTrainer<float>>(config, comm);
    case ExecPrecision::fp16: return std::make_unique<CudaTrainer<__half>>(config, comm);
    case ExecPrecision::bf16: return std::make_unique<CudaTrainer<__nv_bfloat16>>(config, comm);
  }
  throw std::invalid_argument("executor: unknown precision");
}

}  // namespace zeroplan::exec
