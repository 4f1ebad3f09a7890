// Communication per GPU per optimizer step (ZeRO paper, arXiv 1910.02054, sec. 7: 2P elements for stages
// 0-2, 3P for stage 3) and the offload traffic (ZeRO-Offload, arXiv 2101.06840 sec. 4: 16-bit gradients
// down and 16-bit parameters up, 4 bytes per parameter of the partition per step; ZeRO-Infinity,
// arXiv 2104.07857, for NVMe).
//
// Gradient accumulation (A micro-steps per optimizer step), as DeepSpeed does it:
//   stage 0: the engine all-reduces at the accumulation boundary only (engine.py allreduce_gradients is
//            called when is_gradient_accumulation_boundary()): once per step.
//   stage 1: gradients stay whole and are reduced at the boundary (engine.py: stage 1 calls
//            optimizer.reduce_gradients() only at the boundary): once per step.
//   stage 2: gradients are partitioned, so each micro-step's backward reduces its buckets
//            (stage_1_and_2.py reduce_ready_partitions_and_remove_grads runs in every backward): A times.
//   stage 3: parameters are gathered for every forward and every backward, gradients reduce-scattered in
//            every backward: A times; persistent parameters are never gathered.
//   stages 1-3 all-gather the updated parameters once per step (stage 3 does it lazily in the next forward,
//   counted with the forward gathers).
#include "sim/comm_model.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "sim/deepspeed_engine.h"
#include "sim/deepspeed_param_coordinator.h"
#include "sim/executor_layout.h"
#include "sim/lora_model.h"
#include "sim/memory_inputs.h"
#include "sim/zero_schedule.h"
#include "sim/model_states_memory.h"
#include "sim/saturating.h"

namespace zeroplan {

double ring_factor(CollectiveKind kind, int ranks) {
  if (ranks <= 1) return 0.0;
  const double n = static_cast<double>(ranks);
  // nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter).
  return kind == CollectiveKind::all_reduce ? 2.0 * (n - 1.0) / n : (n - 1.0) / n;
}

int communication_element_bytes(const TrainingConfig& training) {
  return training.autocast_fp32_params ? 4 : precision_bytes(training.precision);
}

int gradient_communication_bytes(const TrainingConfig& training) {
  // DeepSpeed reduces gradients in communication_data_type when given (engine.py communication_data_type;
  // stage_1_and_2.py allreduce_bucket and stage3.py __avg_scatter_grads convert to it), and so does zeroplan's
  // executor (exec/zero/zero_engine.cpp reduce_bucket; it implements fp32 or the model's precision).
  if (training.communication_dtype && !training.autocast_fp32_params) return precision_bytes(*training.communication_dtype);
  return communication_element_bytes(training);
}

namespace {

void add(CommVolume& volume, CollectiveKind kind, std::int64_t calls, std::int64_t elements, int element_bytes,
         int ranks, const char* when) {
  CollectiveVolume c;
  c.kind = kind;
  c.calls = calls;
  c.elements = elements;
  c.bytes = sat_mul(elements, element_bytes);
  c.wire_bytes = static_cast<Bytes>(static_cast<double>(c.bytes) * ring_factor(kind, ranks));
  c.when = when;
  volume.total_bytes = sat_add(volume.total_bytes, c.bytes);
  volume.total_wire_bytes = sat_add(volume.total_wire_bytes, c.wire_bytes);
  volume.collectives.push_back(std::move(c));
}

std::int64_t buckets(std::int64_t elements, std::int64_t bucket_size) {
  return elements <= 0 ? 0 : ceil_div(elements, std::max<std::int64_t>(1, bucket_size));
}

}  // namespace

CommVolume estimate_comm(const ModelDescription& model, const ClusterDescription& cluster,
                         const TrainingConfig& training, const PlanChoice& choice) {
  MemoryInputs in = gather_memory_inputs(model, cluster, training, choice);
  // LoRA: only the adapters have gradients to reduce and an update to gather (stage 3 still gathers the whole
  // model, from its coordinator below).
  if (training.lora.enabled) apply_lora_to_memory_inputs(lora_figures(model, training), in);
  const ZeroConfig& zero = training.zero;
  const std::int64_t P = in.params;
  const std::int64_t A = std::max<std::int64_t>(1, training.grad_accum);
  const int e = communication_element_bytes(training);
  const int grad_e = gradient_communication_bytes(training);  // gradient reductions (communication_data_type)
  const int n = static_cast<int>(in.world_size);
  CommVolume v;
  // zeroplan's executor (in.executor_exact): P is its flat buffer, one collective per gradient bucket of its
  // partition (exec/zero/zero_partition.h), and stage 3 follows its fetch plan (core/zero3_fetch_plan.h).
  auto reductions = [&](std::int64_t elements) {
    return in.executor_exact ? in.executor_buckets : buckets(elements, zero.reduce_bucket_size);
  };
  double elements_one_micro_step = 0.0;  // the paper's multiple, without accumulation (all-reduce = 2 passes)
  v.paper_multiple_of_params = in.stage == 3 ? 3.0 : 2.0;

  // DeepSpeed's engine: the collectives its code runs (deepspeed_engine.h, and the schedule that times them).
  const bool deepspeed = training.engine == TrainingEngine::deepspeed && n > 1;
  if (deepspeed) {
    const DeepSpeedEnginePath path = deepspeed_engine_path(apply_choice(training, choice));
    const int eg = path.communication_bytes;
    const CollectiveKind reduction = path.gradient_collective;
    const double reduction_passes = reduction == CollectiveKind::all_reduce ? 2.0 : 1.0;
    if (path.reduces_after_backward || in.stage == 1) {
      // Stage 0 and BF16_Optimizer (engine.py allreduce_gradients) and stage 1 (reduce_gradients, or its hooks at
      // the boundary with overlap_comm): once per step.
      add(v, reduction, buckets(P, path.reduction_bucket_elements), P, eg, n,
          "gradients, at the accumulation boundary, per bucket");
      elements_one_micro_step = reduction_passes * P;
    } else if (in.stage == 2) {
      add(v, reduction, sat_mul(A, buckets(P, zero.reduce_bucket_size)), sat_mul(A, P), eg, n,
          "gradients, every micro-step's backward, per bucket");
      elements_one_micro_step = reduction_passes * P;
    } else {
      // Stage 3: what its parameter coordinator gathers in a micro-step (sim/deepspeed_param_coordinator.h: every
      // module before its forward, and in backward those not still gathered since), one all-gather per module's
      // parameters; gradients reduce-scattered every micro-step.
      const CoordinatorReplay& coordinator = *replay_deepspeed_param_coordinator(model, zero);
      // A quantised LoRA base gathers its codes: counted here as the 16-bit elements of the same bytes.
      std::int64_t gathered = coordinator.gathered_elements;
      const std::vector<double> factors = lora_gather_bytes_per_element(model, training);
      if (!factors.empty()) {
        double bytes = 0.0;
        for (const auto* pass : {&coordinator.forward, &coordinator.backward})
          for (const CoordinatorPosition& position : *pass)
            for (const CoordinatorGather& g : position.gathers)
              bytes += static_cast<double>(g.elements) * factors[static_cast<std::size_t>(g.layer)];
        gathered = static_cast<std::int64_t>(std::llround(bytes / e));
      }
      add(v, CollectiveKind::all_gather, sat_mul(A, coordinator.gathered_modules), sat_mul(A, gathered), e, n,
          factors.empty() ? "parameters, as DeepSpeed's coordinator fetches and prefetches them, every micro-step"
                          : "parameters (a quantised base's codes, in 16-bit elements of their bytes), as "
                            "DeepSpeed's coordinator fetches and prefetches them, every micro-step");
      add(v, reduction, sat_mul(A, buckets(P, zero.reduce_bucket_size)), sat_mul(A, P), eg, n,
          "gradients, every micro-step's backward, per bucket (reduce_scatter_coalesced)");
      elements_one_micro_step = static_cast<double>(gathered) + reduction_passes * P;
    }
    if (in.stage == 1 || in.stage == 2 || path.wrapper == DeepSpeedOptimizerWrapper::bf16_optimizer) {
      // One all_gather_into_tensor of the flat 16-bit group after the step (runtime/utils.py).
      add(v, CollectiveKind::all_gather, 1, P, e, n, "updated parameters, after the optimizer step (one call)");
      elements_one_micro_step += P;
    }
  }

  // LoRA on zeroplan's executor: its two engines, each over its own layout (sim/executor_layout.h
  // executor_lora_layout_figures). The adapters' engine issues what the executor's engine issues for any trained
  // layout (reductions per bucket, the parameter all-gathers after the step, stage 3's fetch plan and persistent
  // tensors); the frozen base's engine never reduces nor updates, so it communicates only at stage 3, where its
  // fetch plan gathers its partitioned units before each forward and backward use (exec/zero/zero_engine.h
  // Trainability::frozen, as DeepSpeed 0.19.8 zero/parameter_offload.py's pre-forward / pre-backward hooks gather
  // frozen parameters like any other).
  std::optional<ExecutorLoraFigures> lora_engines;
  if (training.lora.enabled && training.engine == TrainingEngine::zeroplan && n > 1)
    lora_engines = executor_lora_layout_figures(model, training, n, in.stage);
  if (lora_engines) {
    const ExecutorLayoutFigures& adapters = lora_engines->adapters;
    const ExecutorLayoutFigures& base = lora_engines->base;
    const std::int64_t PA = adapters.flat_elements;
    const std::int64_t gather_calls = buckets(PA, zero.allgather_bucket_size);
    switch (in.stage) {
      case 0:
        add(v, CollectiveKind::all_reduce, adapters.buckets, PA, grad_e, n,
            "adapters' gradients, at the accumulation boundary, per bucket");
        break;
      case 1:
      case 2:
        add(v, CollectiveKind::reduce_scatter, in.stage == 1 ? adapters.buckets : sat_mul(A, adapters.buckets),
            in.stage == 1 ? PA : sat_mul(A, PA), grad_e, n,
            in.stage == 1 ? "adapters' gradients, at the accumulation boundary, per bucket"
                          : "adapters' gradients, every micro-step's backward, per bucket");
        add(v, CollectiveKind::all_gather, gather_calls, PA, e, n, "updated adapters, after the optimizer step");
        break;
      default:
        add(v, CollectiveKind::all_gather, sat_mul(A, base.gathers), sat_mul(A, base.gathered_elements), e, n,
            "frozen base's parameters, by its fetch plan, before forward and backward units, every micro-step");
        add(v, CollectiveKind::all_gather, sat_mul(A, adapters.gathers), sat_mul(A, adapters.gathered_elements), e, n,
            "adapters, by their fetch plan (one unit per block), every micro-step");
        if (adapters.persistent_elements > 0)
          add(v, CollectiveKind::all_gather, adapters.persistent_buckets, adapters.persistent_elements, e, n,
              "persistent adapters, after the optimizer step");
        add(v, CollectiveKind::reduce_scatter, sat_mul(A, adapters.buckets), sat_mul(A, PA), grad_e, n,
            "adapters' gradients, every micro-step's backward, per bucket");
        break;
    }
    elements_one_micro_step = in.stage == 3 ? static_cast<double>(base.gathered_elements + adapters.gathered_elements) + PA
                                            : 2.0 * PA;
    v.multiple_of_params = PA > 0 ? elements_one_micro_step / static_cast<double>(PA) : 0.0;
    return v;  // nothing offloaded (the frozen engine offloads nothing, exec/zero/zero_engine.cpp)
  }

  // One GPU has nobody to reduce with or gather from: no collective runs (the simulator schedules none either).
  switch (n > 1 && !deepspeed ? in.stage : -1) {
    case -1:
      break;
    case 0:
      add(v, CollectiveKind::all_reduce, reductions(P), P, grad_e, n,
          "gradients, at the accumulation boundary, per bucket");
      elements_one_micro_step = 2.0 * P;
      break;
    case 1:
      add(v, CollectiveKind::reduce_scatter, reductions(P), P, grad_e, n,
          "gradients, at the accumulation boundary, per bucket");
      add(v, CollectiveKind::all_gather, buckets(P, zero.allgather_bucket_size), P, e, n,
          "updated parameters, after the optimizer step");
      elements_one_micro_step = 2.0 * P;
      break;
    case 2:
      add(v, CollectiveKind::reduce_scatter, sat_mul(A, reductions(P)), sat_mul(A, P), grad_e, n,
          "gradients, every micro-step's backward, per bucket");
      add(v, CollectiveKind::all_gather, buckets(P, zero.allgather_bucket_size), P, e, n,
          "updated parameters, after the optimizer step");
      elements_one_micro_step = 2.0 * P;
      break;
    default: {
      if (in.executor_exact) {
        // The fetch plan's gathers (units kept within stage3_max_reuse_distance are not gathered again), the
        // persistent tensors once per step after the optimizer, the gradients every micro-step.
        add(v, CollectiveKind::all_gather, sat_mul(A, in.executor_gathers_per_micro),
            sat_mul(A, in.executor_gathered_per_micro), e, n,
            "parameters, by the fetch plan, before forward and backward units, every micro-step");
        if (in.persistent_params > 0)
          add(v, CollectiveKind::all_gather, in.executor_persistent_buckets, in.persistent_params, e, n,
              "persistent parameters, after the optimizer step");
        add(v, CollectiveKind::reduce_scatter, sat_mul(A, reductions(P)), sat_mul(A, P), grad_e, n,
            "gradients, every micro-step's backward, per bucket");
        elements_one_micro_step = static_cast<double>(in.executor_gathered_per_micro) + P;
        break;
      }
      const std::int64_t G = in.gathered_params_total;
      add(v, CollectiveKind::all_gather, sat_mul(2 * A, in.gathered_modules), sat_mul(2 * A, G), e, n,
          "parameters, before each module's forward and backward, every micro-step");
      add(v, CollectiveKind::reduce_scatter, sat_mul(A, buckets(P, zero.reduce_bucket_size)), sat_mul(A, P), grad_e, n,
          "gradients, every micro-step's backward, per bucket");
      elements_one_micro_step = 2.0 * G + P;
      break;
    }
  }
  v.multiple_of_params = P > 0 ? elements_one_micro_step / static_cast<double>(P) : 0.0;

  // Offload traffic over PCIe, per GPU per step, on the rank's partition.
  const std::int64_t Pp = in.partition_params;
  const Bytes partition_16bit = sat_mul(e, Pp);
  if (in.offload_optimizer != OffloadDevice::none) {
    // Gradients down: stage 1 once (reduced at the boundary), stages 2-3 every micro-step (accumulated on the
    // host). Parameters up after the CPU step, unless the parameter partition itself lives off the GPU.
    v.pcie_device_to_host_bytes = in.stage == 1 ? partition_16bit : sat_mul(A, partition_16bit);
    if (in.offload_param == OffloadDevice::none) v.pcie_host_to_device_bytes = partition_16bit;
    if (in.offload_optimizer == OffloadDevice::nvme) {
      // fp32 master + optimizer states swapped in and out of NVMe once per step.
      const Bytes swapped = sat_add(sat_mul(4, in.stage == 0 ? P : Pp), optimizer_state_bytes(in, Pp));
      v.nvme_read_bytes = sat_add(v.nvme_read_bytes, swapped);
      v.nvme_write_bytes = sat_add(v.nvme_write_bytes, swapped);
    }
  }
  if (in.offload_param != OffloadDevice::none) {
    // Every forward and backward gather fetches the rank's (non-persistent) partition from host/NVMe.
    const Bytes fetched = sat_mul(2 * A, sat_mul(e, ceil_div(in.gathered_params_total, in.world_size)));
    v.pcie_host_to_device_bytes = sat_add(v.pcie_host_to_device_bytes, fetched);
    if (in.offload_param == OffloadDevice::nvme && in.executor_exact) {
      // zeroplan's executor: every chunk on NVMe of every all-gather of the fetch plan read unless still in a swap
      // buffer, and every chunk on NVMe written once after the update, in whole 4096-byte blocks
      // (exec/offload/param_swapper.h; exec/zero/zero_buffer_layout.h param_nvme_traffic replays a step).
      v.nvme_read_bytes = sat_add(v.nvme_read_bytes, in.executor_param_nvme_read_per_step);
      v.nvme_write_bytes = sat_add(v.nvme_write_bytes, in.executor_param_nvme_write_per_step);
    } else if (in.offload_param == OffloadDevice::nvme) {
      // DeepSpeed: only the sub-groups beyond max_in_cpu live in the swap files (memory_inputs.h
      // deepspeed_param_elements_in_cpu): their share of every fetch is read, of the updated partition written.
      const double on_nvme = Pp > 0 ? static_cast<double>(Pp - in.deepspeed_param_host_elements) / static_cast<double>(Pp) : 1.0;
      auto share = [on_nvme](Bytes b) { return static_cast<Bytes>(std::llround(static_cast<double>(b) * on_nvme)); };
      v.nvme_read_bytes = sat_add(v.nvme_read_bytes, share(fetched));
      v.nvme_write_bytes = sat_add(v.nvme_write_bytes, share(partition_16bit));  // the updated partition
    }
    // Optimizer on the GPU: the step updates the partition there, and the 16-bit copy goes back to its home on
    // the host (stage3.py with offload_param only).
    if (in.offload_optimizer == OffloadDevice::none) {
      v.pcie_device_to_host_bytes = sat_add(v.pcie_device_to_host_bytes, partition_16bit);
    }
  }
  return v;
}

}  // namespace zeroplan
