// The training-step interface both backends implement (cpu: Eigen fp32 reference; cuda: the GPU executor).
// One Trainer is one rank: its model, its ZeRO engine (exec/zero/zero_engine.h) and its communicator. The
// tokens given to step() are this rank's share of the global batch (exec/data_shard.h).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "exec/comm/communicator.h"
#include "exec/exec_config.h"
#include "exec/loss_scaler.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan::exec {

// Seconds per phase of one optimizer step (CUDA events on the GPU, steady_clock on the CPU).
struct StepTimes {
  double forward_s = 0;    // all micro-steps' forward passes (incl. the loss)
  double backward_s = 0;   // all micro-steps' backward passes (incl. recompute)
  double optimizer_s = 0;  // gradient norm, clipping, overflow check, AdamW, parameter all-gather
  double step_s = 0;       // the whole step
  double comm_s[kCommKinds] = {0, 0, 0};  // busy time of the communication lane per collective kind
  double exposed_comm_s = 0;  // time the compute lane waited for communication
  OffloadTimes offload;       // ZeRO-Offload's pipeline (exec/zero/zero_engine.h), within optimizer_s
  std::vector<MeasuredSpan> timeline;  // ExecConfig::record_timeline: the step's lanes (ZeroEngine::last_timeline)
};

struct StepResult {
  double loss = 0;         // mean cross-entropy over the step's B*T*grad_accum tokens (or samples) (nats)
  std::int64_t correct = -1;  // layer lists: the global batch's samples whose largest logit is their label
  double grad_norm = 0;    // global L2 norm of the unscaled gradients before clipping
  double loss_scale = 1;   // loss scale used in this step (fp16)
  bool skipped = false;    // fp16 overflow: parameters unchanged
  StepTimes times;
};

// The allocator's accounting, in the planner's component names (sim/memory_model.h GpuMemoryBreakdown).
struct MemoryReport {
  std::vector<std::pair<std::string, std::int64_t>> peak_by_component;  // bytes at each component's own peak
  std::int64_t peak_total = 0;           // bytes, peak of the sum of live allocations
  std::int64_t device_total = 0;         // cudaMemGetInfo total (0 on the CPU)
  std::int64_t device_used_baseline = 0; // total - free before the first allocation (CUDA context, libraries)
  std::int64_t device_used_peak = 0;     // total - free, the largest value sampled after each step
  // Host memory of offloaded states (ZeroDevice::allocate_host), per component ("offload_master_params", ...).
  std::vector<std::pair<std::string, std::int64_t>> host_by_component;
  // offload_optimizer nvme: the bytes of the rank's swap files under nvme_path (ZeroEngine::nvme_bytes).
  std::int64_t nvme_bytes = 0;
  std::int64_t host_total() const {
    std::int64_t sum = 0;
    for (const auto& [n, b] : host_by_component) sum += b;
    return sum;
  }
  std::int64_t component(const std::string& name) const {
    for (const auto& [n, b] : peak_by_component)
      if (n == name) return b;
    return 0;
  }
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual const ExecConfig& config() const = 0;
  virtual const ParamLayout& layout() const = 0;
  virtual std::string backend() const = 0;      // "cpu" or "cuda"
  virtual std::string device_name() const = 0;  // "NVIDIA H200", "CPU (Eigen, fp32)"
  // The attention kernels a transformer trainer chose ("cudnn_fused", "zeroplan_flash"; empty: not applicable)
  // and a note on the choice (cuDNN's engines, or why cuDNN refused the shape).
  virtual std::string attention_kernel() const { return ""; }
  virtual std::string attention_kernel_note() const { return ""; }
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Bytes per collective kind since the trainer was made (model-state traffic and control scalars apart).
  virtual CommCounters comm_counters() const = 0;

  // One optimizer step over grad_accum micro-batches; inputs/targets hold grad_accum * B * T tokens of this
  // rank. The loss is the mean over the global batch (all ranks).
  virtual StepResult step(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets) = 0;
  // A layer-list network (ExecConfig::network): one optimizer step over grad_accum micro-batches of this rank's
  // images (B samples each, one sample's input shape, NCHW fp32) and class labels. Token trainers refuse it.
  virtual StepResult step_images(const std::vector<float>& images, const std::vector<std::int32_t>& labels) {
    (void)images;
    (void)labels;
    throw std::invalid_argument("this trainer trains transformers on tokens; images need a layer-list network");
  }

  // A layer-list network in evaluation mode (BatchNorm from its running statistics, no gradients): one
  // micro-batch of this rank's images; returns the summed cross-entropy of its samples and counts the correct ones.
  virtual double evaluate_images(const std::vector<float>& images, const std::vector<std::int32_t>& labels,
                                 std::int64_t& correct) {
    (void)images;
    (void)labels;
    (void)correct;
    throw std::invalid_argument("this trainer trains transformers on tokens; images need a layer-list network");
  }

  // A layer-list network's buffer (ParamLayout::buffers(): BatchNorm's running mean or variance by its
  // torchvision name) set on this rank, as a checkpoint gives it. Token trainers have none.
  virtual void set_buffer(const std::string& name, const std::vector<float>& values) {
    (void)values;
    throw std::invalid_argument("this trainer has no buffer " + name);
  }

  // The same buffer's values on this rank (checkpoints write rank 0's: every rank holds equal ones).
  virtual std::vector<float> buffer(const std::string& name) const {
    throw std::invalid_argument("this trainer has no buffer " + name);
  }

  // LoRA (ExecConfig::lora): the trained parameters above (params, grads, states, layout) are the adapters'; the
  // frozen base is read and set here. frozen_layout: its layout (null without LoRA); frozen_params: its values,
  // gathered whole; dequantized_weight: with --quantize-base nf4, block `layer`'s weight `which` as the matmul reads
  // it (empty otherwise); set_frozen: the base from `source`, flat ranges of `source_layout` (the model's whole
  // transformer layout: --init-from's, or the seed's), its block weights quantised under nf4.
  virtual const ParamLayout* frozen_layout() const { return nullptr; }
  virtual std::vector<float> frozen_params() const { return {}; }
  virtual std::vector<float> dequantized_weight(std::int64_t layer, BlockTensor which) const {
    (void)layer;
    (void)which;
    return {};
  }
  virtual void set_frozen(const ParamLayout& source_layout, const ZeroEngine::StateSource& source) {
    (void)source_layout;
    (void)source;
    throw std::invalid_argument("this trainer has no frozen base (LoRA is off)");
  }

  // Forward and loss of one micro-batch (B*T tokens), no gradients; logits() then holds its logits.
  virtual double forward_loss(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets) = 0;
  // Forward and backward of one micro-batch into zeroed gradients (no optimizer step); returns the loss.
  virtual double forward_backward(const std::vector<std::int32_t>& inputs,
                                  const std::vector<std::int32_t>& targets) = 0;

  virtual std::vector<float> params() const = 0;  // flat layout, as float (model precision values), whole
  // flat layout, unscaled: the rank's reduced gradients (its chunks from stage 1 on; zeros elsewhere)
  virtual std::vector<float> grads() const = 0;
  virtual std::vector<float> logits() const = 0;  // B*T*Vp of the last forward_loss
  virtual void set_params(const std::vector<float>& flat) = 0;  // sets params and the fp32 master copy
  virtual MemoryReport memory() const = 0;

  // Checkpoints (run/checkpoint.h): this rank's share of the model states (ZeroEngine::owned_ranges and
  // read_owned_state), and restoring every state the rank holds plus the optimizer step and the loss scaler.
  virtual std::vector<std::pair<std::int64_t, std::int64_t>> owned_ranges() const = 0;
  virtual void read_owned_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v) = 0;
  virtual int optimizer_step() const = 0;
  virtual LossScalerState loss_scaler_state() const = 0;
  virtual void restore_state(const ZeroEngine::StateSource& source, int optimizer_step,
                             const LossScalerState& scaler) = 0;
};

// `comm` (not owned) joins the ranks; null means one rank. The layout is aligned for comm's world size.
// A layer-list network when config.network is set, else the transformer pipeline.
std::unique_ptr<Trainer> make_cpu_trainer(const ExecConfig& config, Communicator* comm = nullptr);
std::unique_ptr<Trainer> make_cpu_network_trainer(const ExecConfig& config, Communicator* comm);

}  // namespace zeroplan::exec
