// The step-time simulator's entry point: one optimizer step of a plan, put on a timeline of compute,
// collectives and offload (sim/zero_schedule.h), and what it shows: step time, tokens/s, model FLOP/s and MFU,
// compute and communication time, exposed communication, per-resource busy time, per-collective algbw/busbw,
// and the GPU memory peak over the step read off the timeline.
//
// Definitions (every derived figure says how it was derived):
// - Model FLOPs per token: PaLM appendix B, 6N + 12 * L * h * s (zero-formulas.md section 6); recompute is not
//   counted (MFU, not hardware FLOP utilization). MFU = model FLOP/s per GPU / the datasheet dense peak of the
//   training precision (ClusterDescription::peak_flops); mfu_of_measured_gemm uses the measured GEMM rate.
// - Exposed communication: seconds during which NCCL is busy and the GPU compute stream is idle.
// - Waiting on offload: seconds the compute stream is idle while NCCL is idle too (PCIe, host CPU, NVMe).
// - algbw = S / t, busbw = algbw * factor(n) (nccl-tests), summed over the step's calls of each collective.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/memory_model.h"
#include "sim/plan_choice.h"
#include "sim/timeline.h"

namespace zeroplan {

struct SimulationOptions {
  bool record_events = false;  // fill StepSimulation::events and memory_changes (for traces and the GUI)
  int prefetch_window = 2;     // stage 3: all-gathers in flight ahead of the computing layer
};

// One collective over the step.
struct CollectiveTiming {
  CollectiveKind kind = CollectiveKind::all_reduce;
  int ranks = 0;
  std::int64_t calls = 0;
  Bytes bytes = 0;             // full buffers S summed over calls
  double seconds = 0.0;        // summed over calls
  double algbw = 0.0;          // bytes / seconds
  double busbw = 0.0;          // algbw * factor(n)
};

struct StepSimulation {
  double step_seconds = 0.0;
  std::int64_t tokens_per_step = 0;     // all GPUs: micro-batch * seq * grad-accum * N (samples for generic models)
  std::string token_unit = "tokens";    // "samples" for a generic layer-list model
  double tokens_per_second = 0.0;
  double model_flops_per_token = 0.0;
  std::string flop_convention;          // "6N + 12*L*h*s per token (PaLM appendix B)"
  double model_flops_per_second_per_gpu = 0.0;
  double peak_flops = 0.0;              // the peak MFU is taken against
  std::string peak_name;                // "datasheet dense bf16"
  double mfu = 0.0;
  double mfu_of_measured_gemm = 0.0;    // 0 when the cluster has no measured GEMM rate

  double compute_seconds = 0.0;         // GPU compute stream busy
  double recompute_seconds = 0.0;       // part of compute_seconds
  double communication_seconds = 0.0;   // NCCL busy
  double exposed_comm_seconds = 0.0;    // NCCL busy while compute is idle
  double offload_wait_seconds = 0.0;    // compute idle while NCCL is idle: the host (DeepSpeed's Python hooks,
                                        //   PCIe copies, the CPU optimizer, NVMe)
  std::array<double, kResourceCount> busy_seconds{};  // by Resource
  std::vector<CollectiveTiming> collectives;

  Bytes static_gpu_bytes = 0;           // params, grads, optimizer states, buffers, runtime (memory model)
  Bytes peak_gpu_bytes = 0;             // static + the peak of the timeline's dynamic memory
  double peak_memory_at_seconds = 0.0;
  // The peak split into the memory model's components: the static ones as the memory model has them, the
  // activations, logits and gathered parameters live at the peak's instant (stage-3 persistent parameters
  // included in gathered_params). Its components add up to its total == peak_gpu_bytes.
  GpuMemoryBreakdown peak_breakdown;
  Bytes sum_of_worst_cases_gpu_bytes = 0;  // the memory model's total (every component at its own worst)
  Bytes init_peak_gpu_bytes = 0;        // the memory model's engine-initialization peak (0 when none)

  // Micro-steps of the accumulation not built on the timeline because they repeat a steady one
  // (zero_schedule.h SteadyMicroSteps; their time and traffic are counted above). 0 with record_events.
  std::int64_t repeated_micro_steps = 0;
  double cpu_optimizer_params_per_second = 0.0;  // this rank's CPU optimizer rate (offload), cpu_optimizer_rate

  std::vector<TimelineTask> events;         // when options.record_events
  std::vector<MemoryChange> memory_changes; // when options.record_events (static bytes not included)
};

// Whether the cluster has the rates a choice needs (PCIe and a CPU optimizer rate for CPU offload, NVMe
// bandwidth for NVMe offload); when not, `why` says which figure is missing. Comparisons skip such choices;
// simulate_step throws for them.
bool cluster_supports(const ClusterDescription& cluster, const PlanChoice& choice, std::string* why = nullptr);

// Whether the step fits the GPU: its timeline peak (and the engine's initialization peak) plus `margin` (a
// fraction of it, sim/memory_margin.h) within the cluster's GPU memory. `zeroplan plan`, `simulate` and
// `recommend` all judge GPU memory with this one function.
bool timeline_gpu_fits(const StepSimulation& simulation, const ClusterDescription& cluster, double margin);
// The GPU bytes the verdict compares with the capacity: max(timeline peak, initialization peak).
Bytes timeline_gpu_demand(const StepSimulation& simulation);

// The GPU bytes held for the whole step, on top of which the timeline's dynamic memory (activations, logits,
// gathered parameters) comes and goes: the memory model's total without its activations, logits and gathered
// parameters and DeepSpeed's transient buffers, with the stage-3 persistent parameters (never released). The
// timeline's peak is at least this, so a plan whose static bytes exceed the GPU does not fit, simulated or not. `training` has the choice applied;
// `memory` is estimate_memory's for it.
Bytes static_gpu_bytes(const ModelDescription& model, const TrainingConfig& training, const MemoryEstimate& memory);

// Parameter tensors of a layer (DeepSpeed's hooks and per-tensor kernels run once per tensor).
std::int64_t parameter_tensors(const ModelDescription& model, const LayerDescription& layer);

// torch.nn.functional.linear calls of a layer in one pass (a transformer block's projections, the output head;
// the tied head runs with the last layer). Under zero.Init each goes through DeepSpeed's
// LinearFunctionForZeroStage3 (zero/linear.py, installed by partition_parameters.py _enable_mem_efficient_linear).
// A layer-list model names no linear modules: 0 (its convolutions do not go through F.linear).
std::int64_t linear_calls(const ModelDescription& model, std::size_t layer_index);

// One rank's CPU optimizer rate: its share of the node's rate, and with a per-thread rate in the cluster, at most
// its threads (training.cpu_threads_per_rank, else the node's cores divided among its ranks) times that rate.
double cpu_optimizer_rate(const ClusterDescription& cluster, const TrainingConfig& training, int ranks_in_node);

// How much slower (above 1) or faster the training host runs DeepSpeed's Python than the host the cluster's stage-3
// per-call costs were measured on: training.host_eager_op_seconds (else the cluster's host.probed_eager_op_seconds,
// its own host as zeroplan calibrate probed it) over the cluster's host.eager_op_seconds (one GPU) or
// multi_rank_eager_op_seconds (more), all bench/deepspeed/host_probe.py's figure; 1 where either side is not given.
double host_speed_factor(const ClusterDescription& cluster, const TrainingConfig& training);

// Simulates one optimizer step of `choice` (applied to `training`) on `cluster` (all its GPUs are the
// data-parallel group). Throws InputError for inputs it cannot simulate (missing rates in the cluster, sizes
// that are zero or negative), naming the file and field.
StepSimulation simulate_step(const ModelDescription& model, const ClusterDescription& cluster,
                             const TrainingConfig& training, const PlanChoice& choice,
                             const SimulationOptions& options = {});

}  // namespace zeroplan
