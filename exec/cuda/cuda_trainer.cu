// The GPU training step, read top to bottom: forward (embedding, blocks, final norm, logits, fused loss),
// backward (the same in reverse, recomputing each block first under full checkpointing, or its norm and MLP
// activation outputs under selective), then the gradient norm, the fp16 overflow check and AdamW. The block is one
// pipeline whose op kinds come from the shape (LayerNorm or RMSNorm, learned or rotary positions, GELU or SwiGLU,
// multi-head or grouped-query attention, tied or untied head): GPT-2 and Llama are two configurations of it.
// Kernels live one op kind per file beside their launchers (exec/cuda/*.cu).
// With LoRA (ExecConfig::lora) the trainer mirrors the CPU reference (exec/cpu/cpu_trainer.cpp): the adapters are
// the trained parameters (exec/lora_layout.h: their own layout, trained by the ZeRO engine at stages 0-3), the base
// is held by a second engine without gradients or optimizer states (zero_engine.h Trainability::frozen: whole at
// stages 0-2, partitioned and gathered at stage 3), and each adapted linear computes PEFT's Linear.forward
// (peft/tuners/lora/layer.py, lora_dropout 0): base(x) + scaling * lora_B(lora_A(x)), its backward the adapters'
// weight gradients and the input gradient through both paths, none for the base. --quantize-base nf4 holds the
// base's block weights as NF4 codes on the device (exec/cuda/nf4.cuh), dequantised into one scratch weight before
// each GEMM that reads them (bitsandbytes' MatMul4Bit).
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
#include "exec/frozen_base.h"
#include "exec/cuda/adamw.cuh"
#include "exec/cuda/attention.cuh"
#include "exec/cuda/crossentropy.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_handles.cuh"
#include "exec/cuda/cudnn_attention.cuh"
#include "exec/cuda/device_allocator.h"
#include "exec/cuda/encoder.cuh"
#include "exec/cuda/gelu.cuh"
#include "exec/cuda/layernorm.cuh"
#include "exec/cuda/matmul.cuh"
#include "exec/cuda/nf4.cuh"
#include "exec/cuda/rmsnorm.cuh"
#include "exec/cuda/rope.cuh"
#include "exec/cuda/swiglu.cuh"
#include "exec/cpu/cpu_ops.h"
#include "exec/comm/nccl_communicator.h"
#include "exec/cuda/cuda_zero_device.h"
#include "core/nf4_quantization.h"
#include "exec/lora_layout.h"
#include "exec/loss_scaler.h"
#include "exec/offload/cpu_adamw.h"
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
      : config_(config), layout_(trained_layout(config, comm ? comm->world() : 1)),
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
      const bool lora = config_.lora.enabled;
      if (lora) {
        // The frozen base: the model's layout (its block weights left out when they are held as NF4 codes), whole
        // at stages 0-2 and partitioned at stage 3 by an engine without gradients or optimizer states, on a device
        // of its own over the same streams (its events and marks apart from the adapters').
        const int world = comm_->world();
        full_layout_ = std::make_unique<ParamLayout>(config_.shape, zero_alignment(world));
        base_layout_ = std::make_unique<ParamLayout>(config_.shape, zero_alignment(world), !config_.lora.quantize_nf4);
        base_device_ = std::make_unique<CudaZeroDevice>(*base_layout_, config_.seed, element_type(), *alloc_, stream_,
                                                        static_cast<cudaStream_t>(comm_->comm_stream()));
        base_engine_ = std::make_unique<ZeroEngine>(config_, *base_layout_, *base_device_, *comm_, Trainability::frozen);
        adapted_ = adapted_linears(config_.shape, config_.lora);
      }
      zero_device_ = std::make_unique<CudaZeroDevice>(layout_, lora ? lora_adapter_seed(config_.seed) : config_.seed,
                                                      element_type(), *alloc_, stream_,
                                                      static_cast<cudaStream_t>(comm_->comm_stream()));
      mlp_layout_ = mlp_saved_layout(config_, comm_->world());
      engine_ = std::make_unique<ZeroEngine>(config_, layout_, *zero_device_, *comm_, Trainability::trainable,
                                             mlp_layout_.holds_gradient_partition ? GradientPartitionHome::trainer
                                                                                    : GradientPartitionHome::engine);
      attach(*engine_, scaler_);
      allocate();
      matmul_ = std::make_unique<cuda::Matmul>(cublas_ws_, static_cast<std::size_t>(kCublasWorkspaceBytes),
                                               /*tune=*/!config_.zero.deterministic);
      choose_attention();
      if (lora && config_.lora.quantize_nf4) {
        // The base as the full model would be initialised (the engine initialised its other tensors the same way),
        // its block weights quantised.
        const ParamLayout& full = *full_layout_;
        const std::uint64_t seed = config_.seed;
        quantize_base(full, [&full, seed](std::int64_t begin, std::int64_t n, float* master, float*, float*) {
          full.initialize_range(seed, begin, n, master);
        }, /*read_in_parallel=*/true);  // the initialisation is a pure function of the index
      }
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
  std::string attention_kernel() const override { return cudnn_attention_ ? "cudnn_fused" : "zeroplan_flash"; }
  std::string attention_kernel_note() const override { return attention_note_; }
  int rank() const override { return comm_->rank(); }
  int world() const override { return comm_->world(); }
  CommCounters comm_counters() const override { return comm_->counters(); }

  double forward_loss(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    engine_->begin_forward_only();
    if (base_engine_) base_engine_->begin_forward_only();
    forward(in.data(), tg.data(), false, 0);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return mean_loss(1);
  }

  double forward_backward(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) override {
    check_tokens(in, tg, 1);
    const float dloss = static_cast<float>(scaler_.scale() / static_cast<double>(BT()));
    begin_step();
    begin_micro_step(config_.grad_accum - 1);  // a boundary micro-step: its gradients are reduced
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
    begin_step();
    // No host synchronization between micro-steps: the token uploads and the loss copies are ordered on the
    // stream (pageable uploads are staged before cudaMemcpyAsync returns), and the phase times are read from
    // per-micro-step events once the step has finished.
    for (i64 k = 0; k < config_.grad_accum; ++k) {
      begin_micro_step(k);
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

  // LoRA: the frozen base (trainer.h), as the CPU trainer gives it.
  const ParamLayout* frozen_layout() const override { return base_layout_.get(); }
  std::vector<float> frozen_params() const override {
    if (!base_engine_) return {};
    return base_engine_->gathered_params();
  }
  // The dequantisation kernel's output, the weight the GEMMs read (into the scratch weight, downloaded).
  std::vector<float> dequantized_weight(std::int64_t layer, BlockTensor which) const override {
    if (nf4_.empty()) return {};
    const std::vector<cuda::Nf4DeviceTensor>& q = nf4_[static_cast<std::size_t>(layer * 4 + nf4_weight_slot(which))];
    cuda::dequantize_nf4<T>(dequantized_, q, stream_);
    i64 n = 0;
    for (const cuda::Nf4DeviceTensor& m : q) n += m.elements;
    return download(dequantized_, n, 1.0);
  }
  void set_frozen(const ParamLayout& source_layout, const ZeroEngine::StateSource& source) override {
    if (!base_engine_) throw std::invalid_argument("set_frozen: this trainer trains every parameter (no LoRA base)");
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    restore_frozen_base(*base_engine_, *base_layout_, source_layout, source);
    if (config_.lora.quantize_nf4) quantize_base(source_layout, source, /*read_in_parallel=*/false);
  }


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
  T* P(const ParamTensor& t) const { return static_cast<T*>(model_engine().param_at(t.offset)); }
  // The model's gradients, none for a frozen base (autograd gives frozen leaves none): null, and every weight
  // gradient of the base is skipped.
  T* G(const ParamTensor& t) const { return lora() ? nullptr : static_cast<T*>(engine_->grad_at(t.offset)); }
  // A block tensor's parameters / gradients, or null when the model lacks the role (a bias Llama has not; a block
  // weight of a base held as NF4 codes, read through W()).
  T* P(i64 l, BlockTensor which) const {
    return model_layout().has(which) ? P(model_layout().block(l, which)) : nullptr;
  }
  T* G(i64 l, BlockTensor which) const {
    return model_layout().has(which) ? G(model_layout().block(l, which)) : nullptr;
  }
  // Stage 3 gathers each unit's parameters before it computes (a no-op at stages 0-2), in the order
  // exec/zero/zero_buffer_layout.cpp plans: embeddings, blocks, head unit, the embeddings again when tied. With LoRA
  // the model's units are the frozen base's, and the adapters' engine has one unit per block, used with it.
  void need_embeddings() { model_engine().params_needed(0, model_layout().block_begin(0)); }
  void need_block(i64 l) {
    model_engine().params_needed(model_layout().block_begin(l), model_layout().block_end(l));
    if (lora()) {
      const ParamUnit& u = layout_.units()[static_cast<std::size_t>(l)];
      engine_->params_needed(u.begin, u.end);
    }
  }
  void need_head_unit() { model_engine().params_needed(model_layout().tail_begin(), model_layout().total()); }
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
  // A block linear's weight as the GEMMs read it: the model's, or its NF4 codes dequantised into the scratch
  // weight (stream-ordered: the previous GEMM reading the scratch has been enqueued before this overwrites it).
  const T* W(i64 l, BlockTensor which) {
    if (nf4_.empty()) return P(l, which);
    cuda::dequantize_nf4<T>(dequantized_, nf4_[static_cast<std::size_t>(l * 4 + nf4_weight_slot(which))], stream_);
    return dequantized_;
  }
  // The adapters of block l: A and B of adapted module j are tensors 2j and 2j+1 of the block's unit.
  const ParamTensor& adapter(i64 l, std::size_t j, int b) const {
    return layout_.tensors()[layout_.units()[static_cast<std::size_t>(l)].first_tensor + 2 * j +
                             static_cast<std::size_t>(b)];
  }
  T* AP(i64 l, std::size_t j, int b) const { return static_cast<T*>(engine_->param_at(adapter(l, j, b).offset)); }
  T* AG(i64 l, std::size_t j, int b) const { return static_cast<T*>(engine_->grad_at(adapter(l, j, b).offset)); }
  // x A^T of adapted module j in block l (B*T x r), kept for backward (PEFT's lora_A output, which autograd saves for
  // lora_B); one block's set under full recompute, which rebuilds it.
  T* xa(i64 l, std::size_t j) const {
    const i64 k = config_.recompute == ExecRecompute::full ? 0 : l;
    return lora_xa_ + (k * static_cast<i64>(adapted_.size()) + static_cast<i64>(j)) * BT() * config_.lora.rank;
  }
  bool adapted(BlockTensor which) const {
    for (const AdaptedLinear& m : adapted_)
      if (m.base == which) return true;
    return false;
  }
  // out (B*T x N, the base's output of block l's linear `which` from inp (B*T x K)) += scaling * (inp A^T) B^T on
  // each adapted module's columns, x A^T kept; `output` false (full recompute, whose block output is stored) keeps
  // x A^T only. The base's output is the GEMM's C (beta 1, in place): the residual the adapter adds to.
  void lora_forward(i64 l, BlockTensor which, T* out, const T* inp, i64 K, i64 N, bool output = true) {
    const i64 r = config_.lora.rank, bt = BT();
    const float scaling = static_cast<float>(config_.lora.scaling());
    for (std::size_t j = 0; j < adapted_.size(); ++j) {
      const AdaptedLinear& m = adapted_[j];
      if (m.base != which) continue;
      matmul_->forward<T>(xa(l, j), inp, AP(l, j, 0), nullptr, nullptr, bt, K, r, stream_);
      if (output)
        matmul_->forward_strided<T>(out + m.row_offset, N, xa(l, j), r, AP(l, j, 1), bt, r, m.out, scaling,
                                    /*accumulate=*/true, stream_);
    }
  }
  // The adapters' part of block l's linear `which` backward from dout (B*T x N), before the base's input gradient:
  // with g = scaling * dout[:, the module's columns], dB (+)= g^T (x A^T), d(x A^T) = g B, dA (+)= d(x A^T)^T inp
  // (cpu_ops.h lora_backward). inp is read here, before the input gradient may overwrite it (selective recompute
  // rebuilds the norm and MLP activation outputs in the working set the input gradients are written to); each
  // module's d(x A^T) is kept in lora_dxa_ for lora_backward_input.
  void lora_backward_weights(i64 l, BlockTensor which, const T* dout, const T* inp, i64 K, i64 N, bool acc) {
    const i64 r = config_.lora.rank, bt = BT();
    const float scaling = static_cast<float>(config_.lora.scaling());
    i64 k = 0;
    for (std::size_t j = 0; j < adapted_.size(); ++j) {
      const AdaptedLinear& m = adapted_[j];
      if (m.base != which) continue;
      T* dxa = lora_dxa_ + (k++) * bt * r;
      matmul_->backward_weight_strided<T>(AG(l, j, 1), dout + m.row_offset, N, xa(l, j), bt, r, m.out, scaling, acc,
                                          stream_);
      matmul_->backward_input_strided<T>(dxa, dout + m.row_offset, N, AP(l, j, 1), bt, r, m.out, scaling,
                                         /*accumulate=*/false, stream_);
      matmul_->backward_weight<T>(AG(l, j, 0), dxa, inp, bt, K, r, acc, stream_);
    }
  }
  // dinp (B*T x K, the base's input gradient, written) += d(x A^T) A for each adapted module of `which`.
  void lora_backward_input(i64 l, BlockTensor which, T* dinp, i64 K) {
    const i64 r = config_.lora.rank, bt = BT();
    i64 k = 0;
    for (std::size_t j = 0; j < adapted_.size(); ++j) {
      if (adapted_[j].base != which) continue;
      matmul_->backward_input_strided<T>(dinp, lora_dxa_ + (k++) * bt * r, r, AP(l, j, 0), bt, K, r, 1.0f,
                                         /*accumulate=*/true, stream_);
    }
  }
  // QLoRA: every block weight of `source` (flat ranges of source_layout, the model's whole layout) rounded to the
  // model's precision, as the 16-bit model bitsandbytes quantises holds it (transformers' replace_with_bnb_linear
  // quantises every linear layer but the head; Params4bit quantises the weight in its dtype, read as fp32 by
  // kQuantizeBlockwise), quantised on the host module by module on the CPU optimizer's threads
  // (exec/lora_layout.h quantize_frozen_block_weights: each transformers nn.Linear is its own Params4bit, so
  // Llama's fused qkv and gate_up are 3 and 2 tensors) and copied to the device.
  void quantize_base(const ParamLayout& source_layout, const ZeroEngine::StateSource& source, bool read_in_parallel) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const int threads = offload::optimizer_threads(config_.zero.cpu_optimizer_threads, comm_->world());
    quantize_frozen_block_weights(
        config_.shape, source_layout,
        [&source](std::int64_t begin, std::int64_t n, float* out) { source(begin, n, out, nullptr, nullptr); },
        read_in_parallel, [](float v) { return host_to_float(host_from_float(v)); }, threads,
        [this](std::int64_t slot, Nf4ModuleTensors&& q) {
          const std::vector<cuda::Nf4DeviceTensor>& d = nf4_[static_cast<std::size_t>(slot)];
          if (q.modules.size() != d.size()) throw std::logic_error("quantize_base: a block weight of other modules");
          for (std::size_t j = 0; j < d.size(); ++j) {
            const Nf4Tensor& h = q.modules[j];
            if (h.elements != d[j].elements) throw std::logic_error("quantize_base: a module of another size");
            CUDA_CHECK(cudaMemcpy(const_cast<std::uint8_t*>(d[j].codes), h.codes.data(), h.codes.size(),
                                  cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(const_cast<std::uint8_t*>(d[j].absmax_codes), h.absmax_codes.data(),
                                  h.absmax_codes.size(), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(const_cast<float*>(d[j].absmax_scales), h.absmax_scales.data(),
                                  h.absmax_scales.size() * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(const_cast<float*>(d[j].offset), &h.offset, sizeof(float), cudaMemcpyHostToDevice));
          }
        });
  }
  static T host_from_float(float x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
    else return __float2bfloat16_rn(x);
  }
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
    // The MLP's tensors block by block, and the gradient partition over them where the engine was lent it
    // (activation_accounting.h mlp_saved_layout).
    char* mlp = static_cast<char*>(alloc_->allocate("activations", mlp_layout_.name(), mlp_layout_.bytes()));
    if (mlp_layout_.holds_gradient_partition) engine_->set_gradient_partition(mlp);
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
      b.fc = reinterpret_cast<T*>(mlp + mlp_layout_.block_offset(k));
      b.act = selective ? d4_ : reinterpret_cast<T*>(mlp + mlp_layout_.block_offset(k) + mlp_layout_.activations_offset);
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
    // (With LoRA the embeddings are frozen: no dwte to order.)
    if (det && !config_.lora.enabled)
      token_positions_d_ = alloc_->allocate_n<int>("workspace", "token positions (ordered dwte)", 3 * bt + 1);
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
    // cuDNN's fused attention: its fixed workspace whenever the shape is offered to it (activation_accounting.h)
    if (const i64 w = cudnn_attention_workspace_bytes(config_); w > 0)
      cudnn_attention_ws_ = alloc_->allocate("workspace", "cuDNN fused attention workspace", w);
    if (config_.lora.enabled) allocate_lora(nb);
    host_losses_.allocate(static_cast<std::size_t>(config_.grad_accum * bt));
    for (i64 k = 0; k < 3 * config_.grad_accum; ++k) micro_events_.push_back(std::make_unique<CudaEvent>());
  }

  // LoRA's buffers (activation_accounting.h device_allocations lists them, in this order): every kept block's
  // x A^T per adapted module (activations, as the CPU trainer counts them), the d(x A^T) of one block weight's
  // modules (the backward working set), and with NF4 the codes and constants of every block weight and the one
  // dequantised weight (params, as the CPU trainer and the planner's sim/lora_model.h count them).
  void allocate_lora(i64 nb) {
    const auto& s = config_.shape;
    const i64 bt = BT(), r = config_.lora.rank, n_adapted = static_cast<i64>(adapted_.size());
    lora_xa_ = alloc_->allocate_n<T>("activations", "LoRA x A^T (kept for backward)", nb * n_adapted * bt * r);
    lora_dxa_ = alloc_->allocate_n<T>("activations", "LoRA d(x A^T)", lora_adapters_per_weight(adapted_) * bt * r);
    if (!config_.lora.quantize_nf4) return;
    // One allocation: the fp32 scales and offset of every module's tensor first (aligned), then their packed codes
    // and absmax codes; block weight by block weight in nf4_'s order (per layer qkv, o, fc, down), module by module
    // inside one (nf4_module_elements: each its own bitsandbytes tensor, so its own scales and offset).
    std::vector<std::vector<i64>> numel;
    i64 floats = 0, bytes = 0, widest = 0;
    for (i64 l = 0; l < s.layers; ++l)
      for (BlockTensor w : {kQkvW, kAttProjW, kFcW, kFcProjW}) {
        numel.push_back(nf4_module_elements(s, w));
        for (i64 n : numel.back()) {
          floats += nf4_statistics_blocks(n) + 1;
          bytes += (n + 1) / 2 + nf4_blocks(n);
        }
        widest = std::max(widest, full_layout_->block(l, w).numel());
      }
    auto* store = static_cast<unsigned char*>(
        alloc_->allocate("params", "NF4 codes and absmax constants (frozen base)", 4 * floats + bytes));
    float* f = reinterpret_cast<float*>(store);
    std::uint8_t* b = store + 4 * floats;
    for (const std::vector<i64>& modules : numel) {
      std::vector<cuda::Nf4DeviceTensor> weight;
      for (i64 n : modules) {
        cuda::Nf4DeviceTensor t;
        t.elements = n;
        t.absmax_scales = f;
        f += nf4_statistics_blocks(n);
        t.offset = f++;
        t.codes = b;
        b += (n + 1) / 2;
        t.absmax_codes = b;
        b += nf4_blocks(n);
        weight.push_back(t);
      }
      nf4_.push_back(std::move(weight));
    }
    dequantized_ = alloc_->allocate_n<T>("params", "dequantised NF4 weight (scratch)", widest);
  }

  // The attention kernels, chosen once for the model's shape: cuDNN's fused flash attention where it is offered
  // (activation_accounting.h cudnn_attention_offered: 16-bit, T % 128 == 0, not --deterministic) and cuDNN plans
  // it (bench/llama/results/2026-11-29-h200x1-attention: 0.53-0.93x our kernels' time at the Llama and GPT-2 1.5B
  // shapes, level at GPT-2 124M), else ours (exec/cuda/attention.cuh). The choice is in the run report
  // (attention_kernel, and attention_kernel_note with cuDNN's reason when it refused).
  cuda::CudnnAttentionShape attention_shape() const {
    const auto& s = config_.shape;
    return {static_cast<int>(config_.micro_batch), static_cast<int>(config_.seq_len), static_cast<int>(s.heads),
            static_cast<int>(s.kv_heads), static_cast<int>(s.head_size), config_.precision};
  }
  void choose_attention() {
    if (!cudnn_attention_ws_) {
      attention_note_ = "not offered to cuDNN (fp32, T not a multiple of 128, head size, or --deterministic)";
      return;
    }
    auto a = std::make_unique<cuda::CudnnAttention>(stream_, config_.zero.deterministic);
    a->set_workspace(cudnn_attention_ws_, cudnn_attention_workspace_bytes(config_));
    std::string why;
    if (a->supported(attention_shape(), &why)) {
      const cuda::CudnnAttention::PlanInfo info = a->plan_info(attention_shape());
      attention_note_ = "cuDNN engines " + std::to_string(info.forward_engine) + " (forward), " +
                        std::to_string(info.backward_engine) + " (backward)";
      cudnn_attention_ = std::move(a);
    } else {
      attention_note_ = "cuDNN refused: " + why;
    }
  }

  // One block's forward. `recompute` (full checkpointing, in backward) skips the block output, already stored.
  // Each adapted linear adds its adapters onto the base's output (lora_forward) before anything reads it; the GELU
  // then runs apart from the GEMM when c_fc is adapted (the pre-activation must hold the adapter's share first).
  void block_forward(i64 l, bool recompute) {
    const auto& s = config_.shape;
    const i64 C = s.hidden, bt = BT(), Q = s.q_dim(), QKV = s.qkv_dim(), F = s.ffn_hidden, FI = s.mlp_in_dim();
    const BlockBuffers<T>& a = blocks_[l];
    const T* x = residual_ + l * bt * C;
    T* y = residual_ + (l + 1) * bt * C;
    const int B = static_cast<int>(config_.micro_batch), Tn = static_cast<int>(config_.seq_len);
    norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(l, kLn1W), P(l, kLn1B));
    matmul_->forward<T>(a.qkv, a.ln1, W(l, kQkvW), P(l, kQkvB), nullptr, bt, C, QKV, stream_);
    lora_forward(l, kQkvW, a.qkv, a.ln1, C, QKV);
    if (rope())
      cuda::rope_forward<T>(a.qkv, rope_cos_, rope_sin_, B, Tn, static_cast<int>(s.heads), static_cast<int>(s.kv_heads),
                            static_cast<int>(s.head_size), stream_);
    if (cudnn_attention_)
      cudnn_attention_->forward(attention_shape(), a.att, a.lse, a.qkv);
    else
      cuda::attention_forward<T>(a.att, a.lse, a.qkv, B, Tn, static_cast<int>(s.heads),
                                 static_cast<int>(s.kv_heads), static_cast<int>(s.head_size), stream_);
    matmul_->forward<T>(a.res2, a.att, W(l, kAttProjW), P(l, kAttProjB), x, bt, Q, C, stream_);
    lora_forward(l, kAttProjW, a.res2, a.att, Q, C);
    norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(l, kLn2W), P(l, kLn2B));
    if (swiglu() || adapted(kFcW)) {
      matmul_->forward<T>(a.fc, a.ln2, W(l, kFcW), P(l, kFcB), nullptr, bt, C, FI, stream_);
      lora_forward(l, kFcW, a.fc, a.ln2, C, FI);
      activation_forward(a.act, a.fc);
    } else {
      matmul_->forward_gelu<T>(a.act, a.fc, a.ln2, W(l, kFcW), P(l, kFcB), bt, C, FI, stream_);
    }
    if (!recompute) {
      matmul_->forward<T>(y, a.act, W(l, kFcProjW), P(l, kFcProjB), a.res2, bt, F, C, stream_);
      lora_forward(l, kFcProjW, y, a.act, F, C);
    } else {
      lora_forward(l, kFcProjW, nullptr, a.act, F, C, /*output=*/false);  // its x A^T, for the adapters' backward
    }
  }

  void forward(const int* in, const int* tg, bool want_grad, i64 micro, float dloss = 0.0f) {
    const auto& s = config_.shape;
    const ParamLayout& layout = model_layout();
    const i64 C = s.hidden, bt = BT();
    CUDA_CHECK(cudaMemcpyAsync(tokens_, in, bt * sizeof(int), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(tokens_ + bt, tg, bt * sizeof(int), cudaMemcpyHostToDevice, stream_));
    if (want_grad && config_.zero.deterministic && !lora()) {
      // From pageable memory, cudaMemcpyAsync returns once the bytes are staged: the vectors may change after.
      // (With LoRA the embeddings are frozen: no dwte to order.)
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
    cuda::encoder_forward<T>(residual_, tokens_, P(layout.wte()), layout.has_wpe() ? P(layout.wpe()) : nullptr,
                             config_.micro_batch, config_.seq_len, C, stream_);
    for (i64 l = 0; l < s.layers; ++l) {
      need_block(l);
      block_forward(l, false);
    }
    need_head_unit();
    norm_forward(lnf_, lnf_stats_, s.norm == NormKind::layer_norm ? lnf_stats_ + bt : lnf_stats_,
                 residual_ + s.layers * bt * C, P(layout.final_norm_w()),
                 s.norm_bias ? P(layout.final_norm_b()) : nullptr);
    if (s.tied_head) need_embeddings();
    matmul_->forward<T>(logits_, lnf_, P(layout.head()), nullptr, nullptr, bt, C, s.padded_vocab, stream_);
    cuda::crossentropy_forward_backward<T>(losses_, logits_, tokens_ + bt, bt, s.vocab, s.padded_vocab, dloss,
                                           want_grad, stream_);
    CUDA_CHECK(cudaMemcpyAsync(host_losses_.get() + micro * bt, losses_, bt * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }

  // Gradients are written on the first micro-step and accumulated on the others.
  // The ZeRO engine learns which gradients backward writes next (prepare_gradients: stage 2 hands out bucket
  // buffers) and which are final (gradients_final_from: finished buckets are reduced on the comm stream while
  // backward goes on). With LoRA those are the adapters' (one unit per block); the base's weight gradients are
  // skipped (G() is null), its input gradients computed as for the whole model.
  void backward() {  // the micro-step's tokens are already on the device
    const auto& s = config_.shape;
    const ParamLayout& layout = model_layout();
    const i64 C = s.hidden, bt = BT(), Q = s.q_dim(), QKV = s.qkv_dim(), F = s.ffn_hidden, FI = s.mlp_in_dim();
    const int B = static_cast<int>(config_.micro_batch), Tn = static_cast<int>(config_.seq_len);
    const int NH = static_cast<int>(s.heads), NKV = static_cast<int>(s.kv_heads), HS = static_cast<int>(s.head_size);
    const bool acc = engine_->kernels_accumulate();
    const bool layer_norm = s.norm == NormKind::layer_norm;
    const bool train_model = !lora();
    if (train_model) {
      // The tied head writes the embeddings' gradients first; untied, only the encoder's backward writes them,
      // at the end (where their bucket may take a rotating buffer: exec/zero/zero_buffer_layout.cpp).
      if (s.tied_head) engine_->prepare_gradients(0, layout.block_begin(0));
      engine_->prepare_gradients(layout.tail_begin(), layout.total());  // the head unit
    }
    // logits = lnf head^T
    if (s.tied_head) need_embeddings();
    else need_head_unit();
    matmul_->backward_input<T>(dln_, logits_, P(layout.head()), bt, C, s.padded_vocab, stream_);
    if (train_model)
      matmul_->backward_weight<T>(G(layout.head()), logits_, lnf_, bt, C, s.padded_vocab, acc, stream_);
    CUDA_CHECK(cudaMemsetAsync(dres_, 0, bt * C * sizeof(T), stream_));
    if (s.tied_head) need_head_unit();
    norm_backward(dres_, G(layout.final_norm_w()), s.norm_bias ? G(layout.final_norm_b()) : nullptr, dln_,
                  residual_ + s.layers * bt * C, P(layout.final_norm_w()), lnf_stats_,
                  layer_norm ? lnf_stats_ + bt : lnf_stats_, acc);
    if (train_model) engine_->gradients_final_from(layout.tail_begin());
    for (i64 l = s.layers - 1; l >= 0; --l) {
      // The trained unit of this block: its tensors, or with LoRA its adapters' unit.
      const ParamUnit trained = train_model ? ParamUnit{0, 0, layout.block_begin(l), layout.block_end(l)}
                                            : layout_.units()[static_cast<std::size_t>(l)];
      engine_->prepare_gradients(trained.begin, trained.end);
      need_block(l);
      if (config_.recompute == ExecRecompute::full) block_forward(l, true);
      const BlockBuffers<T>& a = blocks_[l];
      const T* x = residual_ + l * bt * C;
      // Selective recompute rebuilds the norm and MLP activation outputs in the working set (a.ln1/a.ln2 are
      // dln_, a.act is d4_): each weight gradient (the adapters' too) runs before the input gradient that
      // overwrites its input there.
      const bool rebuild = config_.recompute == ExecRecompute::selective;
      // y = res2 + act Wdown^T + b
      if (rebuild) activation_forward(a.act, a.fc);
      if (train_model) matmul_->backward_weight<T>(G(l, kFcProjW), dres_, a.act, bt, F, C, acc, stream_);
      lora_backward_weights(l, kFcProjW, dres_, a.act, F, C, acc);
      // d(pre-activation): GELU's fused into the GEMM epilogue, into d4_; SwiGLU's in place over gate and up
      // (they are read for the last time here), so dfc is a.fc. An adapted down projection adds its input gradient
      // before the activation's backward, which then runs apart from the GEMM.
      T* dfc = d4_;
      if (swiglu()) {
        matmul_->backward_input<T>(d4_, dres_, W(l, kFcProjW), bt, F, C, stream_);
        lora_backward_input(l, kFcProjW, d4_, F);
        cuda::swiglu_backward<T>(a.fc, a.fc, d4_, bt, F, stream_);
        dfc = a.fc;
      } else if (adapted(kFcProjW)) {
        matmul_->backward_input<T>(d4_, dres_, W(l, kFcProjW), bt, F, C, stream_);
        lora_backward_input(l, kFcProjW, d4_, F);
        cuda::gelu_backward<T>(d4_, a.fc, d4_, bt * F, stream_);
      } else {
        matmul_->backward_input_dgelu<T>(d4_, dres_, W(l, kFcProjW), a.fc, bt, F, C, stream_);
      }
      if (T* g = G(l, kFcProjB)) cuda::bias_backward<T>(g, dres_, sums_, bt, C, acc, stream_);
      if (rebuild) norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(l, kLn2W), P(l, kLn2B));
      if (train_model) matmul_->backward_weight<T>(G(l, kFcW), dfc, a.ln2, bt, C, FI, acc, stream_);
      lora_backward_weights(l, kFcW, dfc, a.ln2, C, FI, acc);
      matmul_->backward_input<T>(dln_, dfc, W(l, kFcW), bt, C, FI, stream_);
      lora_backward_input(l, kFcW, dln_, C);
      if (T* g = G(l, kFcB)) cuda::bias_backward<T>(g, dfc, sums_, bt, FI, acc, stream_);
      norm_backward(dres_, G(l, kLn2W), G(l, kLn2B), dln_, a.res2, P(l, kLn2W), a.ln2_mean, a.ln2_rstd, acc);
      // res2 = x + att Wo^T + b
      lora_backward_weights(l, kAttProjW, dres_, a.att, Q, C, acc);
      matmul_->backward_input<T>(dln_, dres_, W(l, kAttProjW), bt, Q, C, stream_);
      lora_backward_input(l, kAttProjW, dln_, Q);
      if (train_model) matmul_->backward_weight<T>(G(l, kAttProjW), dres_, a.att, bt, Q, C, acc, stream_);
      if (T* g = G(l, kAttProjB)) cuda::bias_backward<T>(g, dres_, sums_, bt, C, acc, stream_);
      if (cudnn_attention_)
        cudnn_attention_->backward(attention_shape(), d4_, dln_, a.qkv, a.att, a.lse);
      else
        cuda::attention_backward<T>(d4_, d_rowsum_, dln_, a.qkv, a.att, a.lse, B, Tn, NH, NKV, HS, stream_);
      if (rope()) cuda::rope_backward<T>(d4_, rope_cos_, rope_sin_, B, Tn, NH, NKV, HS, stream_);
      if (rebuild) norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(l, kLn1W), P(l, kLn1B));
      if (train_model) matmul_->backward_weight<T>(G(l, kQkvW), d4_, a.ln1, bt, C, QKV, acc, stream_);
      lora_backward_weights(l, kQkvW, d4_, a.ln1, C, QKV, acc);
      matmul_->backward_input<T>(dln_, d4_, W(l, kQkvW), bt, C, QKV, stream_);
      lora_backward_input(l, kQkvW, dln_, C);
      if (T* g = G(l, kQkvB)) cuda::bias_backward<T>(g, d4_, sums_, bt, QKV, acc, stream_);
      norm_backward(dres_, G(l, kLn1W), G(l, kLn1B), dln_, x, P(l, kLn1W), a.ln1_mean, a.ln1_rstd, acc);
      engine_->gradients_final_from(trained.begin);
    }
    if (!train_model) return;  // the embeddings are frozen: nothing below needs their input gradient
    if (!s.tied_head) engine_->prepare_gradients(0, layout.block_begin(0));
    // The token embedding's gradient: the tied head wrote it first; untied, the first micro-step starts it at 0
    // (the scatter below adds).
    if (!s.tied_head && !acc)
      CUDA_CHECK(cudaMemsetAsync(G(layout.wte()), 0, layout.wte().numel() * sizeof(T), stream_));
    cuda::encoder_backward<T>(G(layout.wte()), layout.has_wpe() ? G(layout.wpe()) : nullptr, dres_, tokens_, B, Tn,
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
  ParamLayout layout_;  // the trained parameters: the model's, or with LoRA the adapters'
  LossScaler scaler_;
  // LoRA: the model's whole layout (what --init-from and the seed describe), the frozen base's (without the block
  // weights under NF4), the adapted modules of a block.
  std::unique_ptr<ParamLayout> full_layout_, base_layout_;
  std::vector<AdaptedLinear> adapted_;
  std::string device_name_;
  std::unique_ptr<Communicator> own_comm_;  // one rank, when no communicator was given
  Communicator* comm_ = nullptr;
  // declaration order is release order reversed: host buffers, events, cuBLASLt, the engine, device memory,
  // the stream, the communicator (and its stream)
  CudaStream stream_;
  std::unique_ptr<DeviceAllocator> alloc_;
  // LoRA: the frozen base's device and engine, destroyed after the adapters' (both use the communicator's stream).
  std::unique_ptr<CudaZeroDevice> base_device_;
  std::unique_ptr<ZeroEngine> base_engine_;
  std::unique_ptr<CudaZeroDevice> zero_device_;
  std::unique_ptr<ZeroEngine> engine_;
  MlpSavedLayout mlp_layout_;  // the MLP tensors' allocation, and whether the gradient partition lies over them
  std::unique_ptr<cuda::Matmul> matmul_;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;  // null: our attention kernels
  std::string attention_note_;
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
  void* cudnn_attention_ws_ = nullptr;
  PinnedHost<float> host_losses_;
  // LoRA (allocate_lora): x A^T per kept block and adapted module, one block weight's d(x A^T), the NF4 codes of
  // the base's block weights (four per layer: qkv, o, fc, down) and the scratch weight they are dequantised into.
  T* lora_xa_ = nullptr;
  T* lora_dxa_ = nullptr;
  std::vector<std::vector<cuda::Nf4DeviceTensor>> nf4_;  // per block weight, one tensor per transformers module
  T* dequantized_ = nullptr;
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
