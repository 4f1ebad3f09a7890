// The memory model: bytes per GPU, host and NVMe for one plan choice, each term on its own and named, each
// formula beside its source (../shared/reference/zero-formulas.md). The fast path fills integers only
// (the planner evaluates millions of configurations per second); the explain path also records, per term,
// the formula and its source for --explain and the GUI's tooltips.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/deepspeed_memory.h"
#include "sim/plan_choice.h"

namespace zeroplan {

// Per-GPU device memory, by component (the names are the JSON keys of gpu_bytes).
struct GpuMemoryBreakdown {
  Bytes params = 0;            // 16-bit (or fp32) model parameters resident on the GPU
  Bytes grads = 0;             // gradients resident on the GPU (incl. the fp32 gradient partition at step)
  Bytes master_params = 0;     // fp32 master copy of the parameters (mixed precision)
  Bytes optimizer_states = 0;  // Adam momentum + variance (or SGD momentum, 8-bit states)
  Bytes activations = 0;       // saved activations at the peak of the backward pass (incl. recompute)
  Bytes logits = 0;            // logits, their fp32 copy and gradient, loss buffers
  Bytes gradient_buckets = 0;  // reduce/all-gather buckets (stage 0-2), stage-3 reduce bucket
  Bytes gathered_params = 0;   // stage 3: gathered, prefetched and persistent parameters
  Bytes offload_buffers = 0;   // pinned/staging device buffers for offload
  Bytes runtime_overhead = 0;  // CUDA context, cuBLAS workspace, NCCL buffers, allocator reserve
  Bytes total = 0;

  // (name, bytes) in display order, total excluded.
  std::vector<std::pair<std::string, Bytes>> components() const;
};

struct HostMemoryBreakdown {
  Bytes pinned = 0;    // page-locked host bytes per node (offload buffers, optimizer states when pinned)
  Bytes pageable = 0;  // other host bytes per node
  Bytes total = 0;     // per node
};

// One term of the model, for --explain: its component, bytes, the formula with the numbers put in, and the
// source of the formula.
struct MemoryTerm {
  std::string component;  // a GpuMemoryBreakdown name, or "host", "nvme"
  std::string name;       // "16-bit parameters"
  Bytes bytes = 0;
  std::string formula;    // "2 * P / N = 2 * 1,557,611,200 / 4"
  std::string source;     // "ZeRO paper (arXiv 1910.02054) sec. 5"
};

struct MemoryEstimate {
  GpuMemoryBreakdown gpu;
  // The part of gpu (grads, gradient_buckets, optimizer_states) that exists only at times of the step, which the
  // step's timeline places (DeepSpeed engine; zero for zeroplan's engine): gpu is the sum of worst cases.
  TransientGpuBytes transient;
  // Of gpu.runtime_overhead, the caching allocator's idle segments as measured at the loss's backward (DeepSpeed
  // engine, a language model: sim/deepspeed_allocator_replay.h DeepSpeedCachedReserve::idle_at_loss); 0 otherwise.
  Bytes reserve_idle_at_loss = 0;
  HostMemoryBreakdown host;
  Bytes nvme_bytes = 0;             // per node
  Bytes init_peak_gpu_bytes = 0;    // peak while the engine initializes, when it differs (0 otherwise)
  Bytes init_peak_host_bytes = 0;   // per node: host peak while every rank builds the model (fp32)
  std::vector<MemoryTerm> terms;    // filled only by explain_memory()
};

// world_size = the data-parallel degree N (cluster.total_gpus() for pure data parallelism).
MemoryEstimate estimate_memory(const ModelDescription& model, const ClusterDescription& cluster,
                               const TrainingConfig& training, const PlanChoice& choice);
MemoryEstimate explain_memory(const ModelDescription& model, const ClusterDescription& cluster,
                              const TrainingConfig& training, const PlanChoice& choice);

}  // namespace zeroplan
