#include "sim/host_memory.h"

#include <cmath>

#include "sim/memory_model.h"
#include "sim/runtime_overhead_memory.h"
#include "sim/saturating.h"
#include "sim/term_format.h"

namespace zeroplan {

namespace {
constexpr const char* kInitSource =
    "DeepSpeed estimate_zero{2,3}_model_states_mem_needs cpu term (each rank builds the model in fp32; "
    "zero.Init keeps only the largest layer whole); zero-formulas.md sec. 2";

bool built_whole(const MemoryInputs& in, const ZeroConfig& zero) { return in.stage < 3 || !zero.zero_init; }
}  // namespace

HostAndNvmeBytes host_and_nvme_bytes(const MemoryInputs& in, const ZeroConfig& zero, const ModelStatesBytes& s,
                                     const ZeroBufferBytes& buffers, Bytes runtime_fixed_bytes) {
  HostAndNvmeBytes h;
  const std::int64_t ranks = in.ranks_per_node;
  const Bytes states_per_rank = sat_add(s.host_optimizer, s.host_params);
  // Offloaded states are pinned when pin_memory is on (DeepSpeed's default); swap and staging buffers are
  // always page-locked.
  const Bytes pinned_per_rank = sat_add(zero.pin_memory ? states_per_rank : 0, buffers.host_pinned_staging);
  h.pinned = sat_mul(pinned_per_rank, ranks);
  h.pageable = sat_mul(zero.pin_memory ? 0 : states_per_rank, ranks);
  h.nvme = sat_mul(sat_add(s.nvme_optimizer, s.nvme_params), ranks);
  // Every rank first builds the model on the host in fp32 (4 B/param); under zero.Init (stage 3) only the
  // largest layer exists whole at any time.
  h.init_peak_host = sat_mul(4, built_whole(in, zero) ? in.params : in.largest_module_params, ranks);
  // Stage 3 without zero.Init: the whole 16-bit model sits on each GPU before the engine partitions it.
  if (in.stage == 3 && !zero.zero_init)
    h.init_peak_gpu = sat_add(sat_mul(in.param_bytes, in.params), runtime_fixed_bytes);
  return h;
}

Bytes executor_process_host_bytes(std::int64_t world_size, bool convolutions) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return static_cast<Bytes>(((world_size > 1 ? 0.746 : 0.380) + (convolutions ? 0.442 : 0.0)) * kGiB);
}

Bytes pinned_kernel_share_bytes(Bytes pinned_per_rank) {
  constexpr double kShare = 0.0184;  // measured, sim/host_memory.h
  return static_cast<Bytes>(std::ceil(kShare * static_cast<double>(pinned_per_rank)));
}

void explain_executor_process_host(const MemoryInputs& in, Bytes pinned_per_rank, std::vector<MemoryTerm>& terms) {
  const Bytes per_rank = executor_process_host_bytes(in.world_size, in.convolutions);
  terms.push_back({"host",
                   "each rank's process (CUDA runtime and libraries" +
                       std::string(in.world_size > 1 ? ", NCCL's host side" : "") +
                       std::string(in.convolutions ? ", cuDNN's convolution engines)" : ")"),
                   sat_mul(per_rank, in.ranks_per_node),
                   num(per_rank) + " * ranks per node " + num(in.ranks_per_node),
                   "measured: resident peak (VmHWM) less the pinned states, " +
                       std::string(in.world_size > 1 ? "0.723-0.746 GiB per rank on 2x H200 (2026-11-24)"
                                                     : "0.380 GiB on one H100 (2026-11-25)") +
                       "; bench/exec/results/" +
                       std::string(in.convolutions ? "; a layer list adds 0.442 GiB (ResNet-101 on one H200, "
                                                     "bench/resnet/results/2026-11-29-h200x2/call15)"
                                                   : "")});
  if (pinned_per_rank > 0)
    terms.push_back({"host", "the kernel's page tables of each rank's pinned states",
                     sat_mul(pinned_page_table_bytes(pinned_per_rank), in.ranks_per_node),
                     "ceil(" + num(pinned_per_rank) + " / 4096) * 8 * ranks per node " + num(in.ranks_per_node),
                     "x86-64 4-level paging: 8-byte entries for 4 KiB pages (Intel SDM vol. 3A sec. 4.5)"});
  if (pinned_per_rank > 0)
    terms.push_back({"host", "the kernel's and the GPU driver's share of each rank's pinned states",
                     sat_mul(pinned_kernel_share_bytes(pinned_per_rank), in.ranks_per_node),
                     "0.0184 * " + num(pinned_per_rank) + " * ranks per node " + num(in.ranks_per_node),
                     "measured: the node's MemAvailable drop beyond the states, processes and page tables, 4.30 GiB "
                     "at 234.24 GiB pinned on 2x H200 (2026-11-26); bench/exec/results/2026-11-26-offload-h200/"});
}

void explain_init_peaks(const MemoryInputs& in, const ZeroConfig& zero, const HostAndNvmeBytes& h,
                        std::vector<MemoryTerm>& terms) {
  const std::string ranks = num(in.ranks_per_node);
  terms.push_back({"host_init", "host peak while each rank builds the model (fp32)", h.init_peak_host,
                   "4 * " + std::string(built_whole(in, zero) ? "P" : "largest layer (zero.Init)") +
                       " * ranks per node = 4 * " +
                       num(built_whole(in, zero) ? in.params : in.largest_module_params) + " * " + ranks,
                   kInitSource});
  if (h.init_peak_gpu > 0)
    terms.push_back({"gpu_init", "GPU peak at init: whole model before partitioning (zero_init off)",
                     h.init_peak_gpu,
                     num(in.param_bytes) + " * P + context/workspace/NCCL = " + num(in.param_bytes) + " * " +
                         num(in.params) + " + " + num(h.init_peak_gpu - in.param_bytes * in.params),
                     "DeepSpeed stage3.py without zero.Init (engine moves the module to the GPU, then partitions)"});
}

void explain_host_and_nvme(const MemoryInputs& in, const ZeroConfig& zero, const ModelStatesBytes& s,
                           const ZeroBufferBytes& buffers, const HostAndNvmeBytes& h,
                           std::vector<MemoryTerm>& terms) {
  const std::string ranks = num(in.ranks_per_node);
  const std::string where = zero.pin_memory ? " (pinned)" : " (pageable: pin_memory false)";
  const std::string K = num(in.optimizer_state_bytes);
  const std::string part = in.stage == 0 ? "P" : "P/N";
  if (in.offload_optimizer == OffloadDevice::cpu && in.engine == TrainingEngine::zeroplan) {
    const std::string pb = num(in.param_bytes);
    // With offload_param the 16-bit copy is the offloaded parameter partition (its own term below; in fp32
    // training the master is the partition).
    const bool copy = in.mixed_precision && in.offload_param == OffloadDevice::none;
    terms.push_back({"host", "offloaded fp32 master + AdamW moments + reduced gradients" +
                                 std::string(copy ? " + 16-bit copy" : "") + where,
                     sat_mul(s.host_optimizer, in.ranks_per_node),
                     "(4 + " + K + " + " + pb + (copy ? " + " + pb : "") + ") * " + part +
                         " * ranks per node = " + num(s.host_optimizer) + " * " + ranks,
                     "exec/zero/zero_engine.cpp (setup_offload)"});
  } else if (in.offload_optimizer == OffloadDevice::cpu)
    terms.push_back({"host", "offloaded fp32 master params + optimizer states + fp32 gradient partition" + where,
                     sat_mul(s.host_optimizer, in.ranks_per_node),
                     "(4 + " + K + " + 4) * " + part + " * ranks per node = " + num(s.host_optimizer) + " * " + ranks,
                     "ZeRO-Offload (arXiv 2101.06840); zero-formulas.md sec. 3"});
  if (in.offload_optimizer == OffloadDevice::nvme && in.engine == TrainingEngine::zeroplan) {
    const std::string pb = num(in.param_bytes);
    const bool copy = in.offload_param == OffloadDevice::none;
    terms.push_back({"host", "reduced gradients" + std::string(copy ? " + updated partition" : "") + where,
                     sat_mul(s.host_optimizer, in.ranks_per_node),
                     "(" + pb + (copy ? " + " + pb : "") + ") * " + part + " * ranks per node = " +
                         num(s.host_optimizer) + " * " + ranks,
                     "exec/zero/zero_engine.cpp (setup_offload)"});
    terms.push_back({"nvme", "fp32 master params + AdamW moments in the swap files",
                     sat_mul(s.nvme_optimizer, in.ranks_per_node),
                     "(4 + " + K + ") * " + part + " * ranks per node = " + num(s.nvme_optimizer) + " * " + ranks,
                     "exec/offload/optimizer_swapper.h"});
  } else if (in.offload_optimizer == OffloadDevice::nvme) {
    terms.push_back({"host", "fp32 gradient partition" + where, sat_mul(s.host_optimizer, in.ranks_per_node),
                     "4 * " + part + " * ranks per node = " + num(s.host_optimizer) + " * " + ranks,
                     "ZeRO-Infinity (arXiv 2104.07857)"});
    terms.push_back({"nvme", "fp32 master params + optimizer states on NVMe", sat_mul(s.nvme_optimizer, in.ranks_per_node),
                     "(4 + " + K + ") * " + part + " * ranks per node = " + num(s.nvme_optimizer) + " * " + ranks,
                     "ZeRO-Infinity (arXiv 2104.07857)"});
  }
  const bool executor_param_nvme = in.executor_exact && in.offload_param == OffloadDevice::nvme;
  if (s.host_params > 0 && executor_param_nvme)
    terms.push_back({"host", "parameter chunks kept in host memory (persistent tensors, max_in_cpu)" + where,
                     sat_mul(s.host_params, in.ranks_per_node),
                     num(in.param_bytes) + " * " + num(in.executor_param_host_elements) + " * ranks per node " + ranks,
                     "exec/zero/zero_buffer_layout.h (param_host_offset)"});
  else if (s.host_params > 0 && in.offload_param == OffloadDevice::nvme)
    terms.push_back({"host", "parameter sub-groups kept in host memory (max_in_cpu " + num(zero.param_max_in_cpu) +
                         ")" + where,
                     sat_mul(s.host_params, in.ranks_per_node),
                     num(in.param_bytes) + " * " + num(in.deepspeed_param_host_elements) + " * ranks per node " + ranks,
                     "DeepSpeed stage3.py _create_param_groups_fp16_flat_cpu_memory"});
  else if (s.host_params > 0)
    terms.push_back({"host", "offloaded parameter partition" + where, sat_mul(s.host_params, in.ranks_per_node),
                     num(in.param_bytes) + " * ceil(P/N) * ranks per node = " + num(s.host_params) + " * " + ranks,
                     "ZeRO-Infinity (arXiv 2104.07857)"});
  if (s.nvme_params > 0 && executor_param_nvme)
    terms.push_back({"nvme", "parameter chunks in the swap files (each padded to 4096 B)",
                     sat_mul(s.nvme_params, in.ranks_per_node),
                     num(s.nvme_params) + " * ranks per node " + ranks, "exec/offload/param_swapper.h"});
  else if (s.nvme_params > 0)
    terms.push_back({"nvme", "parameter partition on NVMe (beyond max_in_cpu)", sat_mul(s.nvme_params, in.ranks_per_node),
                     num(in.param_bytes) + " * (ceil(P/N) - kept in host " + num(in.deepspeed_param_host_elements) +
                         ") * ranks per node = " + num(s.nvme_params) + " * " + ranks,
                     "ZeRO-Infinity (arXiv 2104.07857)"});
  if (buffers.host_pinned_staging > 0) {
    std::string formula;
    if (in.stage <= 2 && in.offload_optimizer != OffloadDevice::none)
      formula += num(in.param_bytes) + " * largest parameter " + num(in.largest_module_params);
    if (in.offload_optimizer == OffloadDevice::nvme && in.executor_exact)
      formula += std::string(formula.empty() ? "" : " + ") + "min(buffer_count " + num(zero.optimizer_buffer_count) +
                 ", pieces " + num(in.executor_offload_pieces) + ") * 3 states * 4 * largest piece " +
                 num(in.executor_largest_piece) + " (each state to 4096 B) + 4096";
    else if (in.offload_optimizer == OffloadDevice::nvme)
      formula += std::string(formula.empty() ? "" : " + ") + num(zero.optimizer_buffer_count) +
                 " * min(sub_group_size " + num(zero.sub_group_size) + ", partition " +
                 num(in.stage == 0 ? in.params : in.partition_params) + ") * 4";
    if (executor_param_nvme)
      formula += std::string(formula.empty() ? "" : " + ") + "parameter swap buffers " +
                 num(in.executor_param_swap_buffers) + " (min(buffer_count, chunks on NVMe) * largest chunk, to 4096 B, "
                 "+ 4096)";
    else if (in.offload_param == OffloadDevice::nvme)
      formula += std::string(formula.empty() ? "" : " + ") + num(zero.param_buffer_count) + " * " +
                 num(zero.param_buffer_size) + " * " + num(in.param_bytes);
    terms.push_back({"host", "pinned staging / swap buffers", sat_mul(buffers.host_pinned_staging, in.ranks_per_node),
                     "(" + formula + ") * ranks per node " + ranks,
                     "DeepSpeed offload_param/offload_optimizer buffer_count, buffer_size; zero-formulas.md sec. 3"});
  }
  explain_init_peaks(in, zero, h, terms);
}

}  // namespace zeroplan
