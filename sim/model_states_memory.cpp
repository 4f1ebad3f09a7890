#include "sim/model_states_memory.h"

#include "sim/memory_model.h"
#include "sim/saturating.h"
#include "sim/term_format.h"

namespace zeroplan {

namespace {
constexpr std::int64_t kAdam8bitBlock = 2048;  // bitsandbytes block-wise quantization block (arXiv 2110.02861)
constexpr const char* kZeroPaper = "ZeRO paper (Rajbhandari et al., arXiv 1910.02054) sec. 3.1 and 5";
constexpr const char* kZeroOffload = "ZeRO-Offload (arXiv 2101.06840) sec. 4; zero-formulas.md sec. 3";
[[maybe_unused]] constexpr const char* kZeroInfinity = "ZeRO-Infinity (arXiv 2104.07857) sec. 5; zero-formulas.md sec. 3";

bool optimizer_offloaded(const MemoryInputs& in) { return in.offload_optimizer != OffloadDevice::none; }
// zeroplan's executor under ZeRO-Offload, to the CPU or swapped to NVMe (exec/zero/zero_engine.cpp
// setup_offload): the reduced gradient partition stays on the GPU (the reduce-scatter's target and the
// micro-steps' accumulator) and is copied to the host at the boundary.
bool executor_offload(const MemoryInputs& in) {
  return in.engine == TrainingEngine::zeroplan && in.offload_optimizer != OffloadDevice::none;
}
constexpr const char* kExecutorOffload = "exec/zero/zero_engine.cpp (setup_offload)";
// zeroplan's executor at stage 3 with the fp32 master on the device keeps no 16-bit partition: each all-gather
// casts the master's chunk (exec/zero/zero_buffer_layout.h stage3_gathers_cast_master).
bool executor_casts_master(const MemoryInputs& in) {
  return in.engine == TrainingEngine::zeroplan && in.stage == 3 && in.mixed_precision &&
         in.offload_optimizer == OffloadDevice::none && in.offload_param == OffloadDevice::none;
}
}  // namespace

Bytes optimizer_state_bytes(const MemoryInputs& in, std::int64_t params) {
  Bytes bytes = sat_mul(in.optimizer_state_bytes, params);
  if (in.optimizer == OptimizerKind::adam_8bit)
    bytes = sat_add(bytes, sat_mul(2 * 4, ceil_div(params, kAdam8bitBlock)));
  return bytes;
}

ModelStatesBytes model_states_bytes(const MemoryInputs& in) {
  ModelStatesBytes b;
  const std::int64_t P = in.params;
  const std::int64_t Pp = in.partition_params;
  const int pb = in.param_bytes;
  // Optimizer states and the fp32 master copy are partitioned from stage 1 on (P_os); stage 0 keeps them whole.
  const std::int64_t optimizer_params = in.stage == 0 ? P : Pp;

  // Parameters: whole on every GPU for stages 0-2; stage 3 keeps the rank's partition (P_os+g+p), and
  // offload_param moves that partition to host/NVMe (ZeRO-Infinity).
  if (in.stage < 3) {
    b.params = sat_mul(pb, P);
  } else if (executor_casts_master(in)) {
    b.params = 0;
  } else if (in.offload_param == OffloadDevice::none) {
    b.params = sat_mul(pb, Pp);
  } else if (in.offload_param == OffloadDevice::cpu) {
    // zeroplan's executor with offload_optimizer in fp32 training: the host master is the partition.
    if (!(executor_offload(in) && in.offload_optimizer == OffloadDevice::cpu && !in.mixed_precision))
      b.host_params = sat_mul(pb, Pp);
  } else if (in.executor_exact) {
    // zeroplan's executor (exec/zero/zero_buffer_layout.h): each chunk on NVMe padded to 4096 bytes in its file;
    // persistent tensors' chunks and max_in_cpu elements kept in host memory.
    b.nvme_params = in.executor_param_nvme_files;
    b.host_params = sat_mul(pb, in.executor_param_host_elements);
  } else {
    // DeepSpeed: the sub-groups within max_in_cpu stay in pinned host memory (memory_inputs.h).
    b.host_params = sat_mul(pb, in.deepspeed_param_host_elements);
    b.nvme_params = sat_mul(pb, Pp - in.deepspeed_param_host_elements);
  }

  // Gradients: whole for stages 0-1 (stage 1 reduces at the accumulation boundary, so every rank holds the
  // full gradient until then); the rank's partition from stage 2 (P_os+g). With the optimizer offloaded, the
  // reduced partition goes straight to the pinned host buffer (stage_1_and_2.py
  // async_accumulate_grad_in_cpu_via_gpu / stage3.py partition_grads with offload), so none stays on the GPU.
  // zeroplan's executor with fp32 gradient accumulation keeps them in fp32, and at stages 0-1 also the
  // micro-step gradients backward writes (exec/zero/zero_buffer_layout.h micro_step_gradients).
  const int gb = in.engine == TrainingEngine::zeroplan ? in.executor_grad_bytes : pb;
  if (in.stage <= 1) {
    b.grads = sat_add(sat_mul(gb, P), sat_mul(pb, in.executor_micro_step_gradients));
  } else if (in.executor_grads_over_activations) {
    b.grads = 0;  // in the activations' allocation (activation_memory.cpp)
  } else if (!optimizer_offloaded(in) || executor_offload(in)) {
    b.grads = sat_mul(gb, Pp);
  }

  // fp32 master params and optimizer states: K = 12 for mixed-precision Adam in the paper (4 master + 8
  // states). fp32 training needs no master copy (the parameters are fp32 already).
  const Bytes master = in.mixed_precision ? sat_mul(4, optimizer_params) : 0;
  const Bytes states = optimizer_state_bytes(in, optimizer_params);
  // The fp32 gradient partition at the optimizer step (zero-formulas.md sec. 3): stage 1/2 upcast the 16-bit
  // partition (stage_1_and_2.py: single_grad_partition ... .to(fp32)), stage 3 keeps a flat fp32 partition
  // (grad_partitions_flat_buffer in the gradient-accumulation dtype); stage 0 (fused_optimizer.py /
  // bf16_optimizer.py) builds an fp32 copy of all gradients. Not needed when training in fp32.
  // zeroplan's executor keeps 16-bit gradients only: its AdamW upcasts each gradient in registers
  // (exec/cuda/adamw.cu), so no fp32 gradient copy is materialized.
  const bool fp32_grad_copy = in.mixed_precision && in.engine != TrainingEngine::zeroplan;
  const Bytes grad_fp32 = fp32_grad_copy ? sat_mul(4, optimizer_params) : 0;

  if (!optimizer_offloaded(in)) {
    b.master_params = master;
    b.optimizer_states = states;
    b.grad_fp32_partition = grad_fp32;
  } else if (executor_offload(in) && in.offload_optimizer == OffloadDevice::nvme) {
    // zeroplan's executor swapping to NVMe: the fp32 master (the parameters in fp32 training) and the moments in
    // the swap files (exec/offload/optimizer_swapper.h; each piece's states padded to 4096 bytes there, not
    // counted); the host keeps the reduced gradients and the updated partition in the training precision (fp32
    // too: the swap buffer is reused before a copy from it would finish), which goes to the device; with
    // offload_param that copy is the offloaded partition (host_params).
    b.nvme_optimizer = sat_add(sat_mul(4, optimizer_params), states);
    b.host_optimizer = sat_mul(gb, optimizer_params);
    if (in.offload_param == OffloadDevice::none) b.host_optimizer = sat_add(b.host_optimizer, sat_mul(pb, optimizer_params));
  } else if (executor_offload(in)) {
    // zeroplan's executor: the fp32 master and the AdamW moments of the partition, its reduced gradients in the
    // training precision (the CPU AdamW reads 16-bit gradients), and the 16-bit copy the CPU AdamW writes for
    // the copy back (none in fp32 training: the master is copied back).
    b.host_optimizer = sat_add(sat_add(sat_mul(4, optimizer_params), states), sat_mul(gb, optimizer_params));
    // With offload_param that copy is the offloaded parameter partition (host_params).
    if (in.mixed_precision && in.offload_param == OffloadDevice::none)
      b.host_optimizer = sat_add(b.host_optimizer, sat_mul(pb, optimizer_params));
  } else if (in.offload_optimizer == OffloadDevice::cpu) {
    // ZeRO-Offload: fp32 params, fp32 grads and optimizer states of the partition live on the host
    // (16 B/param for Adam). Training in fp32 still keeps an fp32 partition copy and gradient there.
    b.host_optimizer = sat_add(sat_add(sat_mul(4, optimizer_params), states), sat_mul(4, optimizer_params));
  } else {
    // ZeRO-Infinity: fp32 master and optimizer states swapped to NVMe; the fp32 gradient partition is
    // accumulated in (pinned) host memory.
    b.nvme_optimizer = sat_add(sat_mul(4, optimizer_params), states);
    b.host_optimizer = sat_mul(4, optimizer_params);
  }
  return b;
}

void explain_model_states(const MemoryInputs& in, const ModelStatesBytes& b, std::vector<MemoryTerm>& terms) {
  const std::string P = num(in.params), N = num(in.world_size), pb = num(in.param_bytes);
  const std::string part = in.stage == 0 ? "P" : "P/N";
  const std::string opt_params = in.stage == 0 ? P : num(in.partition_params);
  const std::string pname = in.mixed_precision ? "16-bit parameters" : "fp32 parameters";
  const std::string gname = in.mixed_precision ? "16-bit gradients" : "fp32 gradients";

  if (in.stage < 3) {
    terms.push_back({"params", pname, b.params, pb + " * P = " + pb + " * " + P, kZeroPaper});
  } else if (executor_casts_master(in)) {
    terms.push_back({"params", pname + " (no partition: each all-gather casts the fp32 master's chunk)", 0, "0",
                     "exec/zero/zero_buffer_layout.h (stage3_gathers_cast_master)"});
  } else if (in.offload_param == OffloadDevice::none) {
    terms.push_back({"params", pname + " (partition)", b.params,
                     pb + " * ceil(P/N) = " + pb + " * ceil(" + P + " / " + N + ")", kZeroPaper});
  } else {
    terms.push_back({"params", pname + " (partition offloaded to " +
                                   std::string(in.offload_param == OffloadDevice::cpu ? "host" : "NVMe") + ")",
                     0, "0 (offload_param moves the partition off the GPU)", kZeroInfinity});
  }

  // zeroplan's executor with fp32 gradient accumulation (exec/zero/zero_engine.h).
  const bool fp32_accumulation = in.engine == TrainingEngine::zeroplan && in.executor_grad_bytes != in.param_bytes;
  const std::string gb = num(fp32_accumulation ? in.executor_grad_bytes : in.param_bytes);
  if (fp32_accumulation && in.stage <= 1) {
    terms.push_back({"grads", "fp32 gradients (data_types.grad_accum_dtype) and the micro-step gradients", b.grads,
                     gb + " * P + " + pb + " * P = (" + gb + " + " + pb + ") * " + P,
                     "exec/zero/zero_buffer_layout.h (micro_step_gradients)"});
  } else if (in.stage <= 1) {
    terms.push_back({"grads", gname, b.grads,
                     pb + " * P = " + pb + " * " + P +
                         (in.stage == 1 ? " (stage 1 reduces at the accumulation boundary)" : ""),
                     kZeroPaper});
  } else if (in.executor_grads_over_activations) {
    terms.push_back({"grads", gname + " (partition, over the kept blocks' MLP tensors as the backward frees them)", 0,
                     "0 (" + gb + " * ceil(P/N) = " + gb + " * ceil(" + P + " / " + N +
                         ") laid over the activations; see activations)",
                     "exec/activation_accounting.h (mlp_saved_layout)"});
  } else if (in.offload_optimizer == OffloadDevice::none || executor_offload(in)) {
    terms.push_back({"grads", (fp32_accumulation ? std::string("fp32 gradients") : gname) + " (partition)", b.grads,
                     gb + " * ceil(P/N) = " + gb + " * ceil(" + P + " / " + N + ")",
                     executor_offload(in) ? kExecutorOffload : kZeroPaper});
  } else {
    terms.push_back({"grads", gname + " (partition offloaded)", 0,
                     "0 (reduced partitions are copied to pinned host memory per bucket)", kZeroOffload});
  }
  if (in.mixed_precision && in.offload_optimizer == OffloadDevice::none && in.engine == TrainingEngine::zeroplan)
    terms.push_back({"grads", "fp32 gradient partition at the optimizer step", 0,
                     fp32_accumulation ? "0 (AdamW reads the fp32 accumulated gradients above)"
                                       : "0 (zeroplan's AdamW upcasts the 16-bit gradients in registers)",
                     "exec/cuda/adamw.cu"});
  else if (in.mixed_precision && in.offload_optimizer == OffloadDevice::none)
    terms.push_back({"grads", "fp32 gradient partition at the optimizer step", b.grad_fp32_partition,
                     "4 * " + part + " = 4 * " + opt_params,
                     "zero-formulas.md sec. 3 (DeepSpeed stage_1_and_2.py / stage3.py)"});

  if (in.offload_optimizer == OffloadDevice::none) {
    if (in.mixed_precision)
      terms.push_back({"master_params", "fp32 master parameters", b.master_params,
                       "4 * " + part + " = 4 * " + opt_params, kZeroPaper});
    else
      terms.push_back({"master_params", "fp32 master parameters", 0, "0 (training in fp32: no master copy)",
                       kZeroPaper});
    std::string formula = num(in.optimizer_state_bytes) + " * " + part + " = " + num(in.optimizer_state_bytes) +
                          " * " + opt_params;
    if (b.optimizer_states != sat_mul(in.optimizer_state_bytes, in.stage == 0 ? in.params : in.partition_params))
      formula += " + 2 states * 4 B * ceil(" + opt_params + " / 2048) (8-bit block-wise absmax, arXiv 2110.02861)";
    terms.push_back({"optimizer_states", "optimizer states", b.optimizer_states, formula, kZeroPaper});
  } else {
    terms.push_back({"master_params", "fp32 master parameters (offloaded)", 0,
                     "0 (offload_optimizer moves them to the host/NVMe)", kZeroOffload});
    terms.push_back({"optimizer_states", "optimizer states (offloaded)", 0,
                     "0 (offload_optimizer moves them to the host/NVMe)", kZeroOffload});
  }
}

}  // namespace zeroplan
