// The builder behind build_step_schedule (sim/zero_schedule.h): one optimizer step's tasks, micro-step by
// micro-step and layer by layer, on the timeline. Internal to sim/: the passes, stage 3's fetches, the gradient
// reductions, the optimizer step and zeroplan's executor are in sim/zero_schedule.cpp; DeepSpeed's engine paths (its
// host hooks, gradient buffers and reductions, the stage-3 offloaded update) in sim/deepspeed_schedule.cpp.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sim/comm_model.h"
#include "sim/deepspeed_param_coordinator.h"
#include "sim/saturating.h"
#include "sim/zero_schedule.h"

namespace zeroplan::schedule_internal {

// The executor's offload pipeline unit (exec/zero/zero_engine.cpp kOffloadPieceElements): 2^24 elements, or
// sub_group_size when smaller.
constexpr std::int64_t kExecutorOffloadPieceElements = std::int64_t{1} << 24;

// What one wait of the executor's compute lane for another lane costs it when nothing is left to wait for (an event
// wait between two timing marks, exec/zero/zero_engine.cpp params_needed and prepare_gradients): the median span of
// such waits in `zeroplan run --trace` on 2x H200, 2.7-2.9 us in ResNet-101's replayed graphs (127 a step at stage 3,
// bench/resnet/results/2026-11-30-h200x2/call21) and 2.9-3.1 us in TinyLlama's and Llama-2 7B's eager steps (96 and
// 136, bench/llama/results/2026-11-30-h200x2/call1).
constexpr double kExecutorLaneWaitSeconds = 2.9e-6;

class StepBuilder {
 public:
  StepBuilder(const StepScheduleInputs& inputs, Timeline& timeline)
      : in_(inputs),
        timeline_(timeline),
        training_(*inputs.training),
        zero_(inputs.training->zero),
        layers_(inputs.model->layers),
        compute_(*inputs.compute),
        n_(inputs.world_size),
        e_(communication_element_bytes(*inputs.training)),
        grad_e_(gradient_communication_bytes(*inputs.training)),
        accumulation_e_(inputs.training->precision != Precision::fp32 &&
                                inputs.training->grad_accum_dtype == Precision::fp32
                            ? 4
                            : precision_bytes(inputs.training->precision)),
        ds_(inputs.deepspeed),
        executor_(inputs.training->engine == TrainingEngine::zeroplan),
        executor_casts_master_(executor_ && casts_master(*inputs.training)) {}

  SteadyMicroSteps build();

 private:
  // --- steady state of the accumulation (SteadyMicroSteps) ------------------------------------------------

  // What the next micro-step's tasks can see of the earlier ones, relative to the end of the compute so far.
  struct MicroStepState {
    double compute_end = 0.0;
    std::array<double, kResourceCount + 6> relative{};  // resources' free times, then the tasks depended on
    std::int64_t bucket_elements = 0;
    Bytes gathered_bytes = 0;
    Bytes transient_live = 0;

    bool repeats(const MicroStepState& earlier) const {
      if (bucket_elements != earlier.bucket_elements || gathered_bytes != earlier.gathered_bytes) return false;
      if (transient_live != earlier.transient_live) return false;
      if (!(compute_end > earlier.compute_end)) return false;
      const double tolerance = 1e-12 * compute_end;
      for (std::size_t i = 0; i < relative.size(); ++i)
        if (std::abs(relative[i] - earlier.relative[i]) > tolerance) return false;
      return true;
    }
  };

  MicroStepState state() const;

  // --- passes ---------------------------------------------------------------------------------------------

  std::int32_t layer_at(bool forward, std::size_t position) const;
  bool kept_from_forward(bool forward, std::size_t index) const;
  // Our executor at stage 3 on several GPUs: its compute lane's waits at layer `index` in one pass (the unit's
  // all-gather when it has partitioned buckets, and the cast of its chunks before it; in backward also each
  // bucket's gradient buffer), in seconds.
  double executor_lane_waits(bool forward, std::size_t index) const;

  void run_pass(bool forward, std::int32_t micro);

  // --- stage 3 parameter fetch -----------------------------------------------------------------------------

  // What a fetch serves: the share of its NVMe bytes the disk reads depends on it (our executor's swap buffers).
  enum class FetchFor { forward, backward, head };
  TaskId fetch(std::int32_t layer, std::int64_t elements, std::int64_t modules, std::int32_t micro, FetchFor use,
               Dependency when, Dependency issued_by = {});
  double nvme_read_share(std::size_t index, std::int32_t micro, FetchFor use) const;

  // --- gradient reduction ----------------------------------------------------------------------------------

  bool closes_executor_bucket(std::size_t index) const;

  void add_gradients(std::int32_t layer, std::int32_t micro, TaskId produced_by, std::int64_t elements);

  void reduce_bucket(std::int32_t layer, std::int32_t micro, TaskId produced_by);

  double executor_reduction_copy_seconds(std::int64_t elements, std::int32_t micro) const;
  double executor_gather_cast_seconds(std::int64_t elements, std::int64_t buckets) const;

  // --- DeepSpeed's engine: host hooks, gradient buffers and its reductions --------------------------------

  void step_buffers(TaskId step);

  TaskId host_hooks(bool forward, std::int32_t layer, std::int32_t micro, bool first_of_pass,
                    TaskId previous_compute);

  void backward_buffers(TaskId first, TaskId produced, std::size_t index, std::int32_t micro);

  // Bytes read and written per gradient element by one reduction's copies, before and after the collective.
  struct CopyBytes {
    double before = 0.0, after = 0.0;
  };
  CopyBytes reduction_copies() const;

  double copy_seconds(double bytes, double kernels) const;

  void deepspeed_reduction(std::int64_t elements, std::int32_t layer, std::int32_t micro, TaskId produced_by,
                           bool after_backward);

  void stage3_offload_copies(std::int64_t elements, std::int32_t layer, std::int32_t micro, TaskId reduced);

  void reduce_after_backward(std::int32_t micro);

  void end_of_micro_step_buffers(bool boundary);

  std::int64_t total_tensors() const { return total_tensors_; }
  // The bytes of `elements` gathered parameters of a layer (a quantised LoRA base's at its codes' size).
  Bytes gather_bytes(std::size_t index, std::int64_t elements) const {
    if (in_.gather_bytes_per_element.empty()) return elements * e_;
    return static_cast<Bytes>(std::llround(static_cast<double>(elements) * in_.gather_bytes_per_element[index]));
  }
  // The parameters of a layer that get gradients (all of them, or a LoRA plan's adapters).
  std::int64_t trainable_params(std::size_t index) const {
    return in_.trainable_params_per_layer.empty() ? layers_[index].params : in_.trainable_params_per_layer[index];
  }

  bool accumulates_in_grad() const;

  // --- optimizer step and the parameter all-gather after it ----------------------------------------------

  void optimizer_step();

  TaskId deepspeed_stage3_offloaded_update(std::int64_t partition, std::int32_t micro);

  TaskId executor_offloaded_update(std::int64_t partition, std::int32_t micro);

  const StepScheduleInputs& in_;
  Timeline& timeline_;
  const TrainingConfig& training_;
  const ZeroConfig& zero_;
  const std::vector<LayerDescription>& layers_;
  const std::vector<LayerCompute>& compute_;
  const int n_;
  const Bytes e_;
  const Bytes grad_e_;  // bytes of a gradient element on the wire (communication_data_type)
  const Bytes accumulation_e_;  // bytes of an accumulated gradient element (data_types.grad_accum_dtype)

  std::vector<std::int64_t> gather_elements_;  // per layer: stage-3 elements all-gathered (all but persistent)
  std::vector<Bytes> gathered_bytes_;          // per layer: gathered bytes awaiting release
  std::vector<TaskId> gather_task_;            // per layer: the fetch the layer's compute waits for
  std::shared_ptr<const CoordinatorReplay> coordinator_;              // DeepSpeed stage 3: its parameter coordinator's fetches and releases

  const bool ds_;                              // DeepSpeed's engine (the paths of deepspeed_engine.h)
  const bool executor_;                        // zeroplan's executor (exec/zero/zero_engine.cpp)
  // Its stage-3 all-gathers cast the fp32 master first (exec/zero/zero_buffer_layout.h stage3_gathers_cast_master;
  // a LoRA plan's adapters, whose engine casts, are too few to count).
  const bool executor_casts_master_;
  static bool casts_master(const TrainingConfig& training);
  std::int64_t total_params_ = 1;
  std::int64_t total_tensors_ = 1;             // parameter tensors of the model (DeepSpeed's per-tensor work)
  bool micro_first_backward_ = true;           // the micro-step's first gradient hook has not run yet
  bool buckets_pending_ = false;               // the buckets come into use with the next backward task
  Bytes backward_grads_live_ = 0;              // DeepSpeed transient buffers allocated and not yet freed
  Bytes buckets_live_ = 0;
  Bytes grad_partition_live_ = 0;

  bool reduce_this_micro_step_ = false;
  bool boundary_ = false;                      // the micro-step is the accumulation boundary
  struct Download {
    std::int64_t end_elements;  // partition elements on the host once this copy is done
    TaskId task;
  };
  std::vector<Download> downloads_;            // zeroplan's executor: the boundary's gradient copies, in order
  std::int64_t downloaded_elements_ = 0;
  std::int64_t bucket_elements_ = 0;
  std::int64_t bucket_calls_ = 0;  // zeroplan's executor at stage 3: reduce-scatter calls of the pending group
  TaskId compute_barrier_ = kNoTask;  // a synchronous collective the compute stream must wait for
  TaskId last_compute_ = kNoTask;
  TaskId last_backward_ = kNoTask;
  TaskId last_gradient_ = kNoTask;
  TaskId last_reduction_ = kNoTask;
  TaskId last_download_ = kNoTask;
  // zeroplan's executor at stages 1-2 with the optimizer on the CPU (host memory): the previous step's update runs
  // in this step's forward (exec/zero/zero_engine.h); per layer, what its first forward waits for.
  bool defers_offloaded_update() const;
  void deferred_offloaded_update();
  std::vector<TaskId> update_ready_;
  TaskId last_update_ = kNoTask;
};

}  // namespace zeroplan::schedule_internal
