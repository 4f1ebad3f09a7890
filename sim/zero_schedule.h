// The events of one optimizer step as DeepSpeed's ZeRO engines run them, put on a Timeline. Readable top to
// bottom in zero_schedule.cpp: micro-steps (forward, backward with recompute), the gradient reduction of each
// stage, stage 3's parameter all-gathers with their prefetch window, offload traffic over PCIe and NVMe, the
// optimizer step (GPU, or per sub-group on the host CPU) and stage 1/2's parameter all-gather after it; DeepSpeed's
// own host hooks, gradient buffers and reductions in deepspeed_schedule.cpp (the builder both share:
// step_builder.h).
//
// What the schedule follows (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, partitioned_param_coordinator.py):
// - Stages 0-2: gradients go into a bucket of reduce_bucket_size elements in backward (layer) order; a full
//   bucket is reduced (stage 0 all-reduce, stages 1-2 reduce-scatter) when its last gradient is produced. With
//   overlap_comm the reduction runs on its own stream beside backward; without it the compute stream waits for
//   it (the reduction runs synchronously inside the backward hook).
// - Gradient accumulation: stages 0 and 1 keep full gradients and reduce only in the boundary micro-step;
//   stages 2 and 3 partition gradients, so every micro-step reduces (reduce-scatters) its buckets.
// - Stages 1-2: after the optimizer step the updated 16-bit partitions are all-gathered in chunks of
//   allgather_bucket_size elements; nothing overlaps it.
// - Stage 3: each layer's parameters (except persistent ones: modules under param_persistence_threshold, never
//   partitioned) are all-gathered before its forward and again before its backward, one coalesced all-gather per
//   module (gathered_module_count), and released after use.
//   Prefetch: while layer p computes, the next layers' gathers are issued, at most `prefetch_window` layers
//   ahead (2 by default), only as many as fit in prefetch_bucket_size elements, and never more gathered
//   elements alive than max_live_parameters. Gradients are reduce-scattered in reduce_bucket_size buckets.
//   Parameters are released after their forward (the ZeRO paper's 3P volume).
// - Offload (ZeRO-Offload, ZeRO-Infinity): each reduced bucket's partition goes to the host over the D2H engine;
//   at the boundary the host CPU steps the optimizer one sub-group (sub_group_size elements) at a time, and each
//   updated sub-group's 16-bit parameters go back over H2D while the CPU steps the next. NVMe optimizer states
//   are read before and written after each sub-group's step. Offloaded stage-3 parameters are copied up (and
//   read from NVMe first) before each all-gather.
// - GPU memory counter: activations allocated as each layer's forward starts and freed when its backward
//   finishes; logits with the output layer; stage-3 gathered parameters from their all-gather to their release.
//
// DeepSpeed's engine, where its code differs from the ideal engine above (deepspeed_engine.h says which path):
// - Stage 0 and BF16_Optimizer reduce after the whole backward pass (engine.py allreduce_gradients ->
//   buffered_allreduce_fallback, buckets of 5e8 elements), and so does stage 1 without overlap_comm
//   (stage_1_and_2.py reduce_gradients); each bucket is flattened, reduced and copied back on the compute stream.
// - Stages 1-2 all-reduce whole buckets by default (use_multi_rank_bucket_allreduce), copying each gradient into
//   the bucket, flattening it (allreduce_bucket), copying the result back and the rank's part into its partition.
// - Stage 3's all-gathers and releases are those of its parameter coordinator, replayed module call by module call
//   (sim/deepspeed_param_coordinator.h): the prefetcher tops the gathered parameters up towards
//   stage3_max_live_parameters at every module call, and the layers it reaches from the end of the forward stay
//   gathered into the backward; its reduce-scatters torch.cat the bucket first (reduce_scatter_coalesced) on the
//   reduce stream.
// - The host: DeepSpeed's Python hooks (stage-3 fetch/release per module, per-parameter gradient hooks) issue each
//   layer's GPU work, so a layer's kernels cannot start before its hooks ran (host_python); the host waits for the
//   GPU once per micro-step. Stage 3 adds, per call, the forward's autograd Functions per module, zero.Init's
//   LinearFunctionForZeroStage3 per F.linear call and the step's per-tensor gradient norm (deepspeed_schedule.cpp
//   host_hooks, zero_schedule.cpp optimizer_step).
// - Stage 3 with the optimizer on the CPU (stage3.py partition_grads, step): each gradient partition goes to the
//   host buffer and back, and in fp32 to the host gradient, on the reduce stream; the step runs on the host thread
//   sub-group by sub-group (CPU unscale, CPU Adam, the cast into new pageable memory and its pageable copy up).
// - The transient buffers of sim/deepspeed_memory.h: .grad built up over backward (freed after the reduction or at
//   the step), stage 1-2 reduce buckets (first hook to end of reduction), one flat copy per reduction, the stage 1-2
//   gradient partition (reduction to step), fp32 gradients and Adam temporaries during the step.
// - The optimizer step's kernels as the wrapper runs them (deepspeed_step_seconds), and stage 1-2's parameter
//   all-gather as one all_gather_into_tensor call (runtime/utils.py all_gather_into_tensor_dp_groups).
// - Stages 0-2 at the accumulation boundary: DeepSpeed's Python loops over the parameter tensors (the reduction's
//   copies back, the step's overflow test, norm, casts and copies: deepspeed_tensor_ops) issue one small operation
//   at a time on the host, after the GPU has finished the backward pass (fp16/unfused_optimizer.py reads each
//   tensor's overflow test back; stage_1_and_2.py reads the overflow count back before its norm loop), then the
//   step's flat kernels run.
// - Stages 0-1 add each micro-step's gradients into .grad from the second micro-step on (AccumulateGrad).
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/collective_time.h"
#include "sim/compute_time.h"
#include "sim/deepspeed_engine.h"
#include "sim/deepspeed_memory.h"
#include "sim/deepspeed_step.h"
#include "sim/timeline.h"

namespace zeroplan {

// Everything the schedule needs besides the timeline, prepared by the simulator.
struct StepScheduleInputs {
  const ModelDescription* model = nullptr;
  const TrainingConfig* training = nullptr;  // stage and offload applied
  int world_size = 1;                        // data-parallel degree N
  const std::vector<LayerCompute>* compute = nullptr;  // per layer, one micro-step
  const CollectiveTimer* collectives = nullptr;
  std::vector<Bytes> activation_bytes;       // per layer, one micro-step, saved for backward
  Bytes logits_bytes = 0;                    // allocated with the last layer's forward, freed after its backward
  int prefetch_window = 2;                   // stage 3: layers gathered ahead of the one computing
  double optimizer_bandwidth = 0.0;          // bytes/s the GPU optimizer step streams at (streaming kernels)
  double pcie_bandwidth = 0.0;               // bytes/s per direction for this GPU
  double cpu_optimizer_params_per_second = 0.0;  // this rank's share of the node's CPU optimizer rate
  double cpu_optimizer_call_seconds = 0.0;       // zeroplan's CPU AdamW: what each call costs besides its elements
  // zeroplan's executor with the optimizer on the CPU: rank 0's offload pieces in update order (each bucket's chunk
  // cut at the piece size, exec/zero/zero_engine_offload.cpp setup_offload). Empty: the partition cut evenly.
  std::vector<std::int64_t> offload_pieces;
  // zeroplan's executor with the optimizer on the GPU, from stage 1 on: the fixed cost of its step's AdamW kernels,
  // one per gradient bucket (exec/zero/zero_engine.cpp finish_step), at the cluster's kernel_overhead_seconds each,
  // besides their bytes. 0 at stage 0 (one kernel) or without executor figures.
  double executor_adamw_launch_seconds = 0.0;
  // zeroplan's executor at stage 3, per layer (its gather unit): the all-gather calls of the unit's fetch and the
  // reduce-scatter calls of its gradients, each set one NCCL group (sim/executor_layout.h unit_gather_calls,
  // unit_reduce_calls); and the persistent tensors' buckets, all-gathered in one group after the optimizer step
  // (exec/zero/zero_engine.cpp all_gather_persistent). Empty / 0: one call per fetch and per bucket, no group.
  std::vector<std::int64_t> executor_unit_gather_calls;
  std::vector<std::int64_t> executor_unit_reduce_calls;
  std::vector<std::int64_t> executor_unit_gather_elements;  // what each unit's gather moves (its partitioned buckets)
  std::int64_t executor_persistent_buckets = 0;
  std::int64_t executor_persistent_elements = 0;
  double host_memory_bytes_per_second = 0.0;     // this rank's share of the host memory's streaming rate
  double nvme_read_bandwidth = 0.0;          // this rank's share of the node's NVMe
  double nvme_write_bandwidth = 0.0;
  // Build every micro-step even when the accumulation has reached its steady state (SteadyMicroSteps): for
  // traces and the GUI, which show every task.
  bool every_micro_step = false;
  // Stage 3's gathered parameters are static memory (zeroplan's executor: one arena for the run): the gathers
  // take time but allocate nothing on the timeline.
  bool static_gathered_params = false;
  // zeroplan's executor at stage 3, per layer: whether its fetch plan gathers the layer again for the backward (1)
  // or keeps it gathered from the forward (0; sim/executor_layout.h unit_regathered_for_backward). Empty: every
  // layer is gathered in both passes (DeepSpeed's coordinator has its own replay; the ZeRO paper's schedule).
  std::vector<char> backward_regathers;
  // zeroplan's executor at stage 3 with a tied head: the embeddings gathered again for the head at the end of the
  // forward (sim/executor_layout.h head_regathers_embeddings).
  bool head_regathers_embeddings = false;
  // zeroplan's executor with offload_param nvme, per micro-step and layer: the share of a fetch's NVMe bytes the disk
  // reads for the forward gather, the backward regather and (per micro-step) the head's reread; the rest is still in
  // a swap buffer (sim/executor_layout.h param_nvme_forward_read_share). Empty: every byte is read.
  std::vector<std::vector<double>> nvme_forward_read_share;
  std::vector<std::vector<double>> nvme_backward_read_share;
  std::vector<double> nvme_head_read_share;
  // zeroplan's executor with offload_param nvme: the share of the updated 16-bit partition written to NVMe (the chunks
  // max_in_cpu keeps in host memory are not; sim/executor_layout.h param_nvme_write_bytes_per_step).
  double nvme_param_write_share = 1.0;
  // Other engines with offload_param nvme: the share of every fetch read from NVMe (DeepSpeed: the partition beyond
  // max_in_cpu, memory_inputs.h deepspeed_param_elements_in_cpu), where the per-layer shares above are empty.
  double nvme_param_read_share = 1.0;

  // DeepSpeed's engine (training.engine deepspeed; deepspeed_engine.h): its code paths, the buffers the memory
  // model leaves to the timeline, and what its Python costs the host. Unset for zeroplan's executor.
  bool deepspeed = false;
  DeepSpeedEnginePath path;
  TransientGpuBytes transient;
  double streaming_bandwidth = 0.0;       // bytes/s of the gradient copies
  double deepspeed_optimizer_bandwidth = 0.0;  // bytes/s of the optimizer step's kernels
  double kernel_overhead_seconds = 0.0;   // per kernel launched
  // DeepSpeed's host costs per call (core/cluster_description.h says what each call runs).
  double module_hook_seconds = 0.0;       // stage 3: fetch and release per module per pass (host)
  // Eager PyTorch's dispatch per module call, forward and backward (host).
  double eager_forward_module_seconds = 0.0;
  double eager_backward_module_seconds = 0.0;
  double forward_module_function_seconds = 0.0;  // stage 3: the two autograd Functions per module in forward
  double stage3_gradient_hook_seconds = 0.0;     // stage 3: per parameter tensor in backward
  double stage3_offload_gradient_hook_seconds = 0.0;  // stage 3, optimizer offloaded: its extra per tensor
  double linear_forward_seconds = 0.0;    // stage 3 under zero.Init: LinearFunctionForZeroStage3 per call
  double linear_backward_seconds = 0.0;
  double step_tensor_seconds = 0.0;       // stage 3: the step's host work per parameter tensor (gradient norm)
  double gradient_hook_seconds = 0.0;     // stages 1-2: per parameter tensor's gradient hook in backward (host)
  double bookkeeping_gradient_hook_seconds = 0.0;  // the same hook where it reduces nothing (stage 1)
  double offload_gradient_hook_seconds = 0.0;  // its extra with the optimizer on the CPU (stages 1-2), its copy apart
  double tensor_op_seconds = 0.0;         // stages 0-2: one small eager op DeepSpeed's per-tensor loops issue (host)
  double pageable_pcie_bandwidth = 0.0;   // bytes/s host-to-device from pageable memory (the host waits)
  double fresh_pageable_write_bandwidth = 0.0;  // bytes/s the host fills a newly allocated pageable buffer at
  std::vector<std::int64_t> tensors_per_layer;  // parameter tensors of each layer (hooks, per-tensor kernels)
  // LoRA (sim/lora_model.h): the trainable parameters of each layer, the adapters, whose gradients backward makes,
  // reduces and the optimizer steps (and tensors_per_layer counts the adapters' tensors, which the gradient hooks
  // and per-tensor loops see); empty: every parameter trains. Stage 3 still gathers every parameter.
  std::vector<std::int64_t> trainable_params_per_layer;
  // LoRA with a quantised base at stage 3 (sim/lora_model.h lora_gather_bytes_per_element): the bytes a gathered
  // element of each layer carries; empty: the training precision's.
  std::vector<double> gather_bytes_per_element;
  std::vector<std::int64_t> linear_calls_per_layer;  // F.linear calls of each layer per pass (zero.Init: stage 3)
};

// Micro-steps the builder did not put on the timeline because the accumulation had reached a steady state.
// Every micro-step before the boundary one is the same work, and each starts from the state the previous one
// left: the resources' free times and the tasks the next micro-step depends on, taken relative to the end of
// its compute (nothing in a micro-step starts before the previous one's compute ends, so earlier times cannot
// matter). When that state repeats, every later micro-step repeats the same tasks one period later: a step is
// a max-plus system (each start a max of finish times, each finish a start plus a duration), whose map from one
// micro-step's state to the next is monotone and additively homogeneous, hence non-expansive; a state that repeats
// within e repeats within e forever, so the error of the skip is at most e per skipped micro-step
// (the builder's tolerance: 1e-12 of the elapsed time). The timeline then holds the step with `count` fewer
// micro-steps; the simulator adds back, per skipped micro-step, the period and what the steady micro-step
// [first_task, end_task) contributes (busy time, collectives, exposed communication). Memory peaks repeat with
// the micro-steps, so the timeline's peak is the step's.
struct SteadyMicroSteps {
  std::int64_t count = 0;          // micro-steps not built (0: the timeline holds the whole step)
  double period_seconds = 0.0;     // how much later each repeats
  TaskId first_task = kNoTask;     // the steady micro-step whose contributions repeat: tasks [first, end)
  TaskId end_task = kNoTask;
  double boundary_start = 0.0;     // when the last (boundary) micro-step's compute may start, on the timeline
};

// Stage-3 parameters of a layer that are never gathered (under param_persistence_threshold), counted as the
// memory model counts them.
std::int64_t persistent_params(const LayerDescription& layer, const ZeroConfig& zero);

// Stage-3 all-gather calls for one layer in one pass (forward or backward): one per module with partitioned
// parameters, 0 for a layer that persists whole. The communication model (sim/comm_model.cpp, through
// MemoryInputs::gathered_modules) counts the same.
std::int64_t gathered_module_count(const LayerDescription& layer, const ZeroConfig& zero);

// Builds the step on `timeline` (cleared first) and says which micro-steps it left out (none when
// inputs.every_micro_step). Throws InputError for inputs that cannot be scheduled (an offload with no PCIe, CPU
// or NVMe rate in the cluster).
SteadyMicroSteps build_step_schedule(const StepScheduleInputs& inputs, Timeline& timeline);

}  // namespace zeroplan
