#include "sim/zero_buffers_memory.h"

#include <algorithm>

#include "exec/exec_config.h"
#include "sim/memory_model.h"
#include "sim/saturating.h"
#include "sim/term_format.h"

namespace zeroplan {

namespace {
constexpr const char* kBuckets = "DeepSpeed stage_1_and_2.py (ipg_buffer: reduce_bucket_size, x2 with overlap_comm); "
                                 "zero-formulas.md sec. 3";
constexpr const char* kStage0Buckets = "DeepSpeed engine.py allreduce_gradients (buckets of reduce_bucket_size)";
constexpr const char* kStage3Bucket = "DeepSpeed stage3.py (one reduce bucket of reduce_bucket_size)";
constexpr const char* kStage3Gather = "DeepSpeed partitioned_param_coordinator.py (prefetch_bucket_size, "
                                      "max_live_parameters); zero-formulas.md sec. 3";
constexpr const char* kStage3Coordinator =
    "DeepSpeed partitioned_param_coordinator.py fetch_sub_module, __params_to_release "
    "(sim/deepspeed_param_coordinator.h)";
constexpr const char* kPersistence = "DeepSpeed parameter_offload.py mark_persistent_parameters "
                                     "(stage3_param_persistence_threshold)";
constexpr const char* kOffloadStaging = "DeepSpeed stage_1_and_2.py temp_grad_buffer_for_{gpu,cpu}_offload "
                                        "(largest parameter); zero-formulas.md sec. 3 (NVMe swap buffers)";
}  // namespace

ZeroBufferBytes zero_buffer_bytes(const MemoryInputs& in, const ZeroConfig& zero) {
  ZeroBufferBytes b;
  const int pb = in.param_bytes;
  // zeroplan's executor reduces stages 0-1 in place over its flat gradient buffer (exec/param_layout.h): no
  // bucket copies. From stage 2 its backward writes into rotating bucket buffers, and stage 3 gathers into an
  // arena beside the persistent tensors: exactly exec/zero/zero_buffer_layout.h's (in.executor_exact).
  // Stages 0-1 keep a bucket-sized copy only for a reduction in fp32 of 16-bit gradients (communication_data_type).
  const bool in_place_reduction = in.engine == TrainingEngine::zeroplan && in.stage <= 1;
  if (in.executor_exact) {
    b.reduce_buckets = in.executor_gradient_buffer_bytes;
    if (in.stage == 3) {
      b.gathered_in_flight = sat_mul(pb, in.executor_arena);
      b.persistent_params = sat_mul(pb, in.persistent_params);
    }
  } else if (in_place_reduction) {
    // no reduce or all-gather buckets
  } else if (in.stage == 0) {
    // The engine flattens at most reduce_bucket_size gradients per all-reduce: never more than the model.
    b.reduce_buckets = sat_mul(pb, std::min(zero.reduce_bucket_size, in.params), zero.overlap_comm ? 2 : 1);
  } else if (in.stage <= 2) {
    // ipg buffers are allocated at the full reduce_bucket_size (not capped by the model's size).
    b.reduce_buckets = sat_mul(pb, zero.reduce_bucket_size, zero.overlap_comm ? 2 : 1);
    b.allgather_bucket = sat_mul(pb, std::min(zero.allgather_bucket_size, in.params));
  } else {
    b.reduce_buckets = sat_mul(pb, zero.reduce_bucket_size);
    // DeepSpeed: the most its coordinator holds gathered (its prefetcher tops up towards max_live_parameters).
    // The ideal engine: the module being computed (at most the largest) plus the prefetch bucket, bounded by
    // max_live_parameters and by what is partitioned at all.
    const std::int64_t live = in.engine == TrainingEngine::deepspeed
                                  ? in.deepspeed_gathered_live_params
                                  : std::min({zero.max_live_parameters,
                                              in.largest_module_params + zero.prefetch_bucket_size,
                                              in.gathered_params_total});
    b.gathered_in_flight = sat_mul(pb, live);
    b.persistent_params = sat_mul(pb, in.persistent_params);
  }
  // zeroplan's executor copies each reduced bucket chunk straight from its gradient partition: no staging.
  if (in.stage >= 1 && in.stage <= 2 && in.offload_optimizer != OffloadDevice::none &&
      in.engine != TrainingEngine::zeroplan) {
    b.gpu_offload_staging = sat_mul(pb, in.largest_module_params);
    b.host_pinned_staging = sat_mul(pb, in.largest_module_params);
  }
  // zeroplan's executor with offload_param cpu: the device buffers each chunk is copied into before its
  // all-gather (exec/zero/zero_buffer_layout.h: min(buffer_count, buckets) x the largest chunk).
  // nvme too: each chunk goes from its swap buffer through the same staging buffers.
  if (in.executor_exact && in.stage == 3 && in.offload_param != OffloadDevice::none)
    b.gpu_offload_staging = sat_mul(pb, in.executor_param_staging);
  if (in.offload_optimizer == OffloadDevice::nvme && in.executor_exact) {
    // zeroplan's executor (exec/offload/optimizer_swapper.h): min(buffer_count, pieces) buffers, each the three
    // fp32 states (master, exp_avg, exp_avg_sq) of the largest piece, each state rounded up to the direct-I/O
    // block (4096 B), and one block more to align them.
    constexpr std::int64_t kBlock = 4096;
    const std::int64_t state = ceil_div(sat_mul(in.executor_largest_piece, 4), kBlock) * kBlock;
    const std::int64_t buffers = std::min(zero.optimizer_buffer_count, in.executor_offload_pieces);
    b.host_pinned_staging = sat_add(b.host_pinned_staging, sat_add(sat_mul(buffers, 3, state), kBlock));
  } else if (in.offload_optimizer == OffloadDevice::nvme) {
    // Optimizer swap buffers: buffer_count x the largest sub-group x 4 B (fp32).
    const std::int64_t sub_group = std::min(zero.sub_group_size, in.stage == 0 ? in.params : in.partition_params);
    b.host_pinned_staging = sat_add(b.host_pinned_staging, sat_mul(zero.optimizer_buffer_count, sub_group, 4));
  }
  if (in.offload_param == OffloadDevice::nvme && in.executor_exact)
    // zeroplan's executor (exec/offload/param_swapper.h): min(buffer_count, chunks on NVMe) buffers of the largest
    // chunk on NVMe, each padded to the 4096-byte block, one block more to align them.
    b.host_pinned_staging = sat_add(b.host_pinned_staging, in.executor_param_swap_buffers);
  else if (in.offload_param == OffloadDevice::nvme)
    b.host_pinned_staging =
        sat_add(b.host_pinned_staging, sat_mul(zero.param_buffer_count, zero.param_buffer_size, pb));
  return b;
}

void explain_zero_buffers(const MemoryInputs& in, const ZeroConfig& zero, const ZeroBufferBytes& b,
                          std::vector<MemoryTerm>& terms) {
  const std::string pb = num(in.param_bytes);
  const std::string copies = zero.overlap_comm ? " * 2 (overlap_comm)" : "";
  if (in.executor_exact && (in.stage >= 2 || b.reduce_buckets > 0)) {
    terms.push_back({"gradient_buckets",
                     in.stage >= 2 ? "gradient bucket buffers (rotating, embeddings, accumulation scratch, fp32 "
                                     "communication copy)"
                                   : "fp32 communication copy of a bucket (communication_data_type)",
                     b.reduce_buckets, num(b.reduce_buckets) + " bytes",
                     "exec/zero/zero_buffer_layout.h (gradient_buffer_bytes)"});
    if (in.stage == 3) {
      terms.push_back({"gathered_params", "gathered-parameter arena (fetch plan peak)", b.gathered_in_flight,
                       pb + " * " + num(in.executor_arena) + " elements",
                       "core/zero3_fetch_plan.h (prefetch, live bound, reuse distance; first-fit arena)"});
      terms.push_back({"gathered_params", "persistent parameters (whole on every GPU)", b.persistent_params,
                       pb + " * tensors <= stage3_param_persistence_threshold (" +
                           num(zero.param_persistence_threshold) + ") = " + pb + " * " + num(in.persistent_params),
                       kPersistence});
    }
  } else if (in.engine == TrainingEngine::zeroplan && in.stage <= 2) {
    terms.push_back({"gradient_buckets", "gradient buckets", 0,
                     "0 (zeroplan's executor reduces in place over its flat gradient buffer)",
                     "exec/param_layout.h (flat parameter and gradient buffers)"});
  } else if (in.stage == 0) {
    terms.push_back({"gradient_buckets", "gradient all-reduce bucket", b.reduce_buckets,
                     pb + " * min(reduce_bucket_size, P)" + copies + " = " + pb + " * min(" +
                         num(zero.reduce_bucket_size) + ", " + num(in.params) + ")",
                     kStage0Buckets});
  } else if (in.stage <= 2) {
    terms.push_back({"gradient_buckets", "gradient reduce buckets (ipg buffers)", b.reduce_buckets,
                     pb + " * reduce_bucket_size" + copies + " = " + pb + " * " + num(zero.reduce_bucket_size),
                     kBuckets});
    terms.push_back({"gradient_buckets", "parameter all-gather bucket", b.allgather_bucket,
                     pb + " * min(allgather_bucket_size, P) = " + pb + " * min(" +
                         num(zero.allgather_bucket_size) + ", " + num(in.params) + ")",
                     "DeepSpeed stage_1_and_2.py all_gather_dp_groups (allgather_bucket_size)"});
  } else {
    terms.push_back({"gradient_buckets", "gradient reduce-scatter bucket", b.reduce_buckets,
                     pb + " * reduce_bucket_size = " + pb + " * " + num(zero.reduce_bucket_size), kStage3Bucket});
    if (in.engine == TrainingEngine::deepspeed) {
      terms.push_back({"gathered_params", "gathered and prefetched parameters at most at once", b.gathered_in_flight,
                       pb + " * " + num(in.deepspeed_gathered_live_params) +
                           " (the coordinator replayed module call by module call: prefetch of " +
                           num(zero.prefetch_bucket_size) + " per call up to max_live_parameters " +
                           num(zero.max_live_parameters) + ", reuse distance " + num(zero.max_reuse_distance) +
                           "; 0 at one rank with the parameters on the GPU)",
                       kStage3Coordinator});
    } else {
      terms.push_back({"gathered_params", "gathered and prefetched parameters in flight", b.gathered_in_flight,
                       pb + " * min(max_live_parameters, largest module + prefetch_bucket_size, P - persistent) = " +
                           pb + " * min(" + num(zero.max_live_parameters) + ", " + num(in.largest_module_params) +
                           " + " + num(zero.prefetch_bucket_size) + ", " + num(in.gathered_params_total) + ")",
                       kStage3Gather});
    }
    terms.push_back({"gathered_params", "persistent parameters (whole on every GPU)", b.persistent_params,
                     pb + " * params below stage3_param_persistence_threshold (" +
                         num(zero.param_persistence_threshold) + ") = " + pb + " * " + num(in.persistent_params),
                     kPersistence});
  }
  if (b.gpu_offload_staging > 0 && in.executor_exact && in.stage == 3 && in.offload_param != OffloadDevice::none)
    terms.push_back({"offload_buffers", "parameter staging buffers (host-to-device before each all-gather)",
                     b.gpu_offload_staging,
                     pb + " * min(offload_param.buffer_count, buckets) * largest chunk = " + pb + " * " +
                         num(in.executor_param_staging),
                     "exec/zero/zero_buffer_layout.h (param_staging_buffers)"});
  else if (b.gpu_offload_staging > 0)
    terms.push_back({"offload_buffers", "GPU staging buffer for offloaded gradients", b.gpu_offload_staging,
                     pb + " * largest parameter = " + pb + " * " + num(in.largest_module_params), kOffloadStaging});
}

}  // namespace zeroplan
