// The cluster description (configs/clusters/*.json): the GPUs, how they are connected, the host and its
// storage, and the runtime overhead a real process carries. Every rate is one the simulator uses; measured
// figures name where they were measured ("provenance" in the file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/units.h"

namespace zeroplan {

enum class CollectiveKind { all_reduce, reduce_scatter, all_gather };
std::string to_string(CollectiveKind kind);

// One measured point of a collective's bus bandwidth (nccl-tests' busbw) at a message size (the full buffer S,
// as nccl-tests counts it), for a group of `ranks` GPUs.
struct CollectiveBandwidthPoint {
  CollectiveKind kind = CollectiveKind::all_reduce;
  int ranks = 0;
  Bytes message_bytes = 0;
  double bus_bandwidth = 0.0;  // bytes/s
};

// A link class (NVLink inside a node, the network between nodes): asymptotic bus bandwidth and per-collective
// latency alpha, plus optional measured points that override the asymptote at their sizes.
struct InterconnectDescription {
  std::string name;                     // "NVLink 4 (NV18)", "4x HDR InfiniBand"
  double bus_bandwidth = 0.0;           // bytes/s, large-message busbw
  double latency_seconds = 0.0;         // alpha per collective call
  std::vector<CollectiveBandwidthPoint> measured;  // may be empty
  // The share of the bandwidth above that a collective keeps while compute kernels run on the same GPUs (NCCL's
  // kernels and the GEMMs share the SMs and HBM): measured as the in-run rate of collectives overlapping the
  // backward pass against the isolated rate at their size (JSON: bandwidth_fraction_beside_compute, in (0, 1];
  // absent: 1, the isolated rate).
  double bandwidth_fraction_beside_compute = 1.0;
  // What each collective beyond the first adds inside one NCCL group (ncclGroupStart/End: the group launches once,
  // every call still costs NCCL its own work setup), measured by `zeroplan calibrate` as (t(k calls grouped) -
  // t(1 call)) / (k - 1) at small sizes (JSON: grouped_call_seconds; absent: latency_seconds, each call timed as if
  // issued alone).
  std::optional<double> grouped_call_seconds;
  double grouped_call() const { return grouped_call_seconds.value_or(latency_seconds); }
};

// Achievable GEMM rate as a fraction of peak, by problem size (FLOPs of one GEMM): the simulator interpolates
// in log(flops). Default curve in the loader when the file has none.
struct GemmEfficiencyPoint {
  double flops = 0.0;
  double efficiency = 0.0;  // 0..1 of the dense peak of the precision in use
};

// What every GPU process carries beyond tensors (zero-formulas.md section 3): CUDA context, cuBLAS(Lt)
// workspace, NCCL communicator buffers, and an allocator reserve for fragmentation/caching.
struct RuntimeOverhead {
  Bytes cuda_context_bytes = 0;
  Bytes cublas_workspace_bytes = 0;
  Bytes nccl_buffer_bytes = 0;          // per communicator; 0 when world size is 1
  // The PyTorch caching allocator's reserved-but-unallocated memory at the peak that the activations' blocks leave
  // (split and reused by other sizes, they are not whole again when the next forward pass asks), as a fraction of
  // the bytes the forward pass saves and the backward pass frees (JSON: allocator_fragmentation_of_activations).
  // The segments of DeepSpeed's flat buffers come on top, from its code paths (sim/deepspeed_memory.h).
  double allocator_reserve_fraction = 0.0;
  // A training process's own resident host memory (torch, the CUDA libraries) before it builds the model.
  Bytes host_process_bytes = 0;
  // NCCL's host memory once a communicator exists (its library state, proxy and bootstrap; JSON: nccl_host_bytes or
  // _mib): a process's resident set after init_process_group with the device bound less before it.
  Bytes nccl_host_bytes = 0;
  // What a process that runs cuDNN convolutions holds on the host beyond host_process_bytes: cuDNN's libraries, which
  // torch loads at the first convolution, and their kernels (JSON: host_convolution_process_bytes or _mib). Counted
  // for models with convolutions (a layer list: the planner's ResNets), measured under DeepSpeed.
  Bytes host_convolution_process_bytes = 0;
  // The workspace cuDNN asks torch's caching allocator for while a convolution's backward runs (JSON:
  // convolution_workspace_bytes or _mib): allocated and freed around each call (aten/src/ATen/native/cudnn/
  // Conv_v8.cpp), so live at the backward pass's peak, not at the optimizer step's. It depends on the engine cuDNN's
  // heuristics pick for the model's shapes on this GPU: measured, not derived. Counted for models with
  // convolutions (a layer list), in the backward working set (sim/activation_memory.h).
  Bytes convolution_workspace_bytes = 0;
  // A DeepSpeed rank's device memory outside torch's caching allocator: the CUDA context with the kernel modules
  // torch and its libraries load as they are used, their handles, and NCCL's communicator, which DeepSpeed
  // creates at one rank too (deepspeed.init_distributed; its engine calls collectives whatever the world size).
  // Measured as device used (cudaMemGetInfo) less torch.cuda.max_memory_reserved under DeepSpeed (JSON:
  // deepspeed_process_device_bytes or _mib). The DeepSpeed engine counts it in place of cuda_context_bytes (NCCL's
  // buffers of a communicator of more ranks on top, as before); 0: not given (cuda_context_bytes).
  Bytes deepspeed_process_device_bytes = 0;
  // What a DeepSpeed rank holds outside the caching allocator at more than one rank beyond
  // deepspeed_process_device_bytes (JSON: deepspeed_multi_rank_device_bytes or _mib): its communicators connected
  // to peers. Measured as device used less torch.cuda.max_memory_reserved of the 2-rank DeepSpeed rows less the
  // 1-rank rows on the same machine; the DeepSpeed engine counts it in place of nccl_buffer_bytes (a whole
  // communicator, which deepspeed_process_device_bytes already holds at one rank). 0: not given (nccl_buffer_bytes).
  Bytes deepspeed_multi_rank_device_bytes = 0;
  // What a second NCCL group over the same ranks adds on the device once a collective runs on it (a DeepSpeed rank
  // runs collectives on two at stage 3 when the model was built whole or trains in fp16: sim/deepspeed_memory.h
  // deepspeed_uses_second_communicator). At one rank (JSON: nccl_second_communicator_device_bytes or _mib) torch
  // creates a group's communicator at its first collective, so this is a whole communicator; at more than one rank
  // (nccl_second_communicator_multi_rank_device_bytes or _mib) both communicators exist from the start (the device is
  // bound; DeepSpeed's clone is made at deepspeed.initialize) and this is what the second one's first collective
  // connects. Defaults: measured with torch's NCCL on 2x H200 (bench/deepspeed/process_footprint.py, and
  // bench/deepspeed/results-pending/probe-2026-11-26/ at two ranks).
  Bytes nccl_second_communicator_device_bytes = 0;
  Bytes nccl_second_communicator_multi_rank_device_bytes = 0;
};

struct ClusterDescription {
  std::string name;
  std::string source;
  std::string provenance;  // where the figures come from

  // GPU
  std::string gpu_model;
  Bytes gpu_memory_bytes = 0;      // usable device memory as cudaMemGetInfo reports total
  double peak_flops_bf16 = 0.0;    // dense, FLOP/s (datasheet)
  double peak_flops_fp16 = 0.0;
  double peak_flops_fp32 = 0.0;
  double measured_gemm_flops_bf16 = 0.0;  // 0 when not measured
  double hbm_bandwidth = 0.0;      // bytes/s
  // The GEMM curve of PyTorch's GEMMs (cuBLAS through torch), which the DeepSpeed and ideal engines' plans use.
  std::vector<GemmEfficiencyPoint> gemm_efficiency;
  // The same curve for zeroplan's executor (its cuBLASLt GEMMs, autotuned per shape), which `zeroplan calibrate`
  // measures and the zeroplan engine's plans use; empty: not measured (gemm_efficiency). Both are measured on the
  // machine: at GPT-2 1.5B's shapes on one H200 the executor's reached 10-15% more of the peak than PyTorch's
  // (docs/planner-vs-deepspeed.md).
  std::vector<GemmEfficiencyPoint> executor_gemm_efficiency;
  // Achievable rates of the non-GEMM work of a training step (the simulator's compute model, sim/compute_time.h).
  // 0 in a description built in code means "not given": streaming and reduction kernels then run at
  // hbm_bandwidth, attention at the GEMM curve, and kernels cost no fixed time. The file loader fills defaults
  // (recorded in the provenance) for files that leave them out.
  double streaming_bandwidth = 0.0;   // bytes/s (read + write) of elementwise kernels: copies, adds, activations,
                                      //   casts, the fused optimizer step
  double reduction_bandwidth = 0.0;   // bytes/s of row-reduction kernels: norms, softmax/cross-entropy, bias and
                                      //   norm-weight gradients (reduced over tokens)
  double attention_forward_flops = 0.0;   // FLOP/s of fused (flash) attention forward, counted on the work a
                                          //   causal kernel does (half of the s^2 products), 16-bit
  double attention_backward_flops = 0.0;  // the same for its backward (2.5x the forward's work)
  // The same two rates of the attention zeroplan's executor runs where cuDNN's fused attention is offered (16-bit,
  // T a multiple of 128, not --deterministic: exec/activation_accounting.h cudnn_attention_offered), which
  // `zeroplan calibrate --model` measures at the model's shape; the zeroplan engine's plans use them. 0: not
  // measured (the rates above).
  double executor_attention_forward_flops = 0.0;
  double executor_attention_backward_flops = 0.0;
  // And of the executor's own kernels (exec/cuda/attention.cu), which it runs where cuDNN's is not offered (fp32,
  // --deterministic, other sequence lengths). 0: not measured (the executor_attention rates).
  double executor_kernel_attention_forward_flops = 0.0;
  double executor_kernel_attention_backward_flops = 0.0;
  double kernel_overhead_seconds = 0.0;   // fixed time per memory-bound kernel (launch and ramp)
  // bytes/s (read + write) of PyTorch's eager elementwise kernels as transformers' Llama-family modules issue them
  // (LlamaRMSNorm's fp32 casts and broadcasts, rotary embeddings over transposed q and k, SwiGLU, the autograd
  // accumulations): TensorIterator's kernels over mixed dtypes, broadcast or strided operands run below a device
  // copy's rate. The DeepSpeed engine times `--model-code transformers` Llama/Mistral/Qwen2 blocks at it
  // (sim/compute_time.cpp eager_llama_block). 0: not measured (streaming_bandwidth).
  double eager_elementwise_bandwidth = 0.0;
  double optimizer_bandwidth = 0.0;       // bytes/s (read + write) the optimizer's multi-tensor kernels reach
                                          //   (torch fused AdamW measured); 0: streaming_bandwidth

  // Topology
  int gpus_per_node = 0;
  int nodes = 0;
  InterconnectDescription intra_node;
  InterconnectDescription inter_node;  // bus_bandwidth 0 when nodes == 1 is allowed

  // Host (per node)
  Bytes host_memory_bytes = 0;
  int host_cores = 0;
  double pcie_bandwidth = 0.0;              // bytes/s per direction, pinned host memory, per GPU
  double cpu_optimizer_params_per_second = 0.0;  // Adam parameter updates per second for the node (all its cores)
  // One CPU Adam thread's rate (DeepSpeedCPUAdam, OpenMP): a rank with t threads steps at min(t x this, the node's
  // rate / its ranks). 0: not given (each rank gets its share of the node's rate).
  double cpu_adam_params_per_second_per_thread = 0.0;
  // Seconds one call of the executor's CPU AdamW costs whatever its size (exec/offload/cpu_adamw.h: its thread
  // pool woken and joined; zeroplan calibrate times a 1,024-parameter update with the node's threads). The executor
  // calls it once per offload piece (each bucket's chunk cut at 2^24 elements): ResNet-101's ~180 pieces at stage 3
  // make it milliseconds. 0: not given.
  double cpu_optimizer_call_seconds = 0.0;
  // torch.optim.AdamW stepping CPU tensors, the node's rate with all its cores: what DeepSpeed's ZeRO-Offload runs
  // when the config asks for torch_adam (engine.py returns torch's AdamW before it looks at the CPU optimizer), in
  // torch's default implementation for CPU tensors, the for-loop one (torch/optim/optimizer.py
  // _default_to_fused_or_foreach picks foreach only for CUDA tensors). 0: not given.
  double torch_cpu_adamw_params_per_second = 0.0;
  // DeepSpeed's Python on this host (seconds per call; 0: not given, the call costs the host nothing in the
  // step-time model). Stage 3 (sim/deepspeed_schedule.cpp host_hooks):
  // - module_hook: per module and pass, the parameter coordinator's fetch and release
  //   (partitioned_param_coordinator.py fetch_sub_module and release_sub_module, which parameter_offload.py's
  //   pre/post forward hooks and its PreBackwardFunctionForModule / PostBackwardFunctionModule call);
  // - forward_module_function: per module in forward, applying those two autograd Functions to its inputs and
  //   outputs (parameter_offload.py _pre_backward_module_hook and _post_backward_module_hook);
  // - stage3_gradient_hook: per parameter tensor in backward, its AccumulateGrad with the post-accumulate hook
  //   (stage3.py reduce_partition_and_remove_grads -> __add_grad_to_ipg_bucket);
  // - stage3_offload_gradient_hook: the same hook's extra host work with the optimizer offloaded
  //   (stage3.py partition_grads: the copy of each gradient partition to the host buffer and back, its norm and
  //   its fp32 copy, _offload_grad_partition_at_boundary), launched asynchronously;
  // - linear_forward / linear_backward: per linear call under zero.Init, which replaces F.linear by
  //   zero/linear.py LinearFunctionForZeroStage3 (a Python autograd Function), its GEMM launches included;
  // - step_tensor: per parameter tensor at the optimizer step, the two small device operations the host issues
  //   for the gradient norm (stage3.py get_grad_norm_direct: cast to fp32 and norm; with the optimizer offloaded,
  //   complete_grad_norm_calculation_for_cpu_offload: square and add).
  // Stages 1-2: the gradient hook per parameter tensor (stage_1_and_2.py grad_handling_hook), and its extra host
  // cost with the optimizer offloaded (copy_grads_in_partition and the per-parameter norm and overflow checks of
  // the CPU-offload path, each read back to the host), beside the fp32 gradient copy it waits for, which the model
  // times at pcie_bandwidth.
  double deepspeed_module_hook_seconds = 0.0;
  // Eager PyTorch's host cost per module call (a ResNet's conv, BatchNorm, ReLU, pooling and container modules; a
  // transformer block's norms, linears and the block itself): the Python module call and the dispatch of its
  // operators in forward (the kernels' launches included), and of their autograd nodes in backward. Measured on the
  // machine as the synchronised phase time of a host-bound forward or backward (where the GPU works for a fraction
  // of it) over the module calls of a pass.
  double eager_forward_module_seconds = 0.0;
  double eager_backward_module_seconds = 0.0;
  double deepspeed_forward_module_function_seconds = 0.0;
  double deepspeed_stage3_gradient_hook_seconds = 0.0;
  double deepspeed_stage3_offload_gradient_hook_seconds = 0.0;
  double deepspeed_linear_forward_seconds = 0.0;
  double deepspeed_linear_backward_seconds = 0.0;
  double deepspeed_step_tensor_seconds = 0.0;
  // Stages 1-2's gradient hook (stage_1_and_2.py grad_handling_hook) per parameter tensor and micro-step: where it
  // copies the gradient into the reduce bucket (stage 2; stage 1 with overlap_comm at the boundary), and where it
  // only keeps DeepSpeed's bookkeeping (stage 1 otherwise: process_gradients -> setup_buckets, no reduction).
  double deepspeed_gradient_hook_seconds = 0.0;
  double deepspeed_bookkeeping_gradient_hook_seconds = 0.0;
  double deepspeed_offload_gradient_hook_seconds = 0.0;
  // One small eager PyTorch operation that DeepSpeed's Python issues per parameter tensor outside autograd, at the
  // accumulation boundary of stages 0-2 (sim/deepspeed_step.h deepspeed_tensor_ops): the gradient reduction's
  // copies back (engine.py allreduce_and_copy, stage_1_and_2.py allreduce_and_copy_with_multiple_ranks and
  // copy_grads_in_partition) and the step's overflow test, norm, casts and copies (fp16/unfused_optimizer.py step,
  // stage_1_and_2.py has_overflow_partitioned_grads_serial and get_grad_norm_direct). 0: not given (the GPU's
  // kernel launches bound those loops).
  double deepspeed_tensor_op_seconds = 0.0;
  // The speed of the host whose Python the DeepSpeed per-call costs above hold on at one rank: seconds per small
  // eager CUDA operation issued back to back (x.add_ on 256 floats), bench/deepspeed/host_probe.py. Machines of
  // one kind differ here by half and more, and DeepSpeed's stage-3 steps with them; a plan for another host
  // (TrainingConfig::host_eager_op_seconds) scales stage 3's per-call costs above (module_hook,
  // forward_module_function, stage3_gradient_hook, stage3_offload_gradient_hook, linear_forward, linear_backward,
  // step_tensor) by the ratio, the ones seen to follow it (sim/simulator.cpp says where). 0: not given.
  double eager_op_seconds = 0.0;
  // The same at more than one rank. DeepSpeed's stage-3 hooks cost the host more per call where there are peers
  // (each fetch, release and gradient hook issues collectives; a two-rank profile's calls took 1.3-1.9x the
  // one-rank ones'), so the costs above hold on a host whose probe reads less: on h200x2, 6.895 us from two-rank
  // rows against 8.7 us from one-rank rows. 0: not given (the costs are not scaled at more than one rank).
  double multi_rank_eager_op_seconds = 0.0;
  // This cluster's own training host on the same probe, where `zeroplan calibrate` measured it (the machine it ran
  // on; run/host_probe.h): the host plans are timed for unless TrainingConfig::host_eager_op_seconds names
  // another. 0: not measured (the host of eager_op_seconds).
  double probed_eager_op_seconds = 0.0;
  // Host-to-device copies from pageable (not page-locked) memory, bytes/s: the driver stages them through its own
  // pinned buffers and the calling thread waits. 0: not given (pcie_bandwidth).
  double pageable_pcie_bandwidth = 0.0;
  // Bytes/s at which the host writes a freshly allocated pageable buffer (each first-touched page faulted in and
  // zeroed by the kernel, then written: a cast into a new tensor of the result's size). 0: not given (the
  // streaming rate of the CPU passes, 30 bytes per CPU Adam parameter update).
  double fresh_pageable_write_bandwidth = 0.0;

  // NVMe (per node)
  Bytes nvme_capacity_bytes = 0;
  double nvme_read_bandwidth = 0.0;   // bytes/s
  double nvme_write_bandwidth = 0.0;  // bytes/s

  RuntimeOverhead runtime;

  int total_gpus() const { return gpus_per_node * nodes; }
  // The probe reading of the host on which the stage-3 per-call costs hold at this cluster's world size:
  // eager_op_seconds on one GPU, multi_rank_eager_op_seconds on more (0: not given).
  double cost_host_eager_op_seconds() const {
    return total_gpus() > 1 ? multi_rank_eager_op_seconds : eager_op_seconds;
  }
  // Its field in the description, for messages: "host.eager_op_seconds" or "host.multi_rank_eager_op_seconds".
  const char* cost_host_field() const {
    return total_gpus() > 1 ? "host.multi_rank_eager_op_seconds" : "host.eager_op_seconds";
  }
  double peak_flops(const std::string& precision) const;  // "bf16" | "fp16" | "fp32"
};

ClusterDescription cluster_from_json(const nlohmann::json& document, const std::string& source);
nlohmann::json cluster_to_json(const ClusterDescription& cluster);

// Resolves --cluster: a bundled name (configs/clusters/NAME.json) or a file.
ClusterDescription load_cluster(const std::string& name_or_path);
std::vector<std::string> bundled_cluster_names();
inline constexpr const char* kDefaultClusterName = "h200x4";

// The cluster resized to `gpus` GPUs of the same kind (--gpus): fills nodes of gpus_per_node first; a count
// below one node makes a single partial node. Throws InputError for gpus < 1.
ClusterDescription with_gpu_count(const ClusterDescription& cluster, int gpus);

}  // namespace zeroplan
