#include "core/cluster_description.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/data_paths.h"
#include "core/input_error.h"
#include "core/json_input.h"

namespace zeroplan {

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
  }
  return "unknown";
}

double ClusterDescription::peak_flops(const std::string& precision) const {
  if (precision == "bf16") return peak_flops_bf16;
  if (precision == "fp16") return peak_flops_fp16;
  if (precision == "fp32") return peak_flops_fp32;
  throw InputError("precision", "", "unknown precision \"" + precision + "\"; expected one of bf16, fp16, fp32");
}

namespace {

// Runtime overhead defaults, used for a field the cluster file leaves out (the loader records each one it used
// in the provenance). zero-formulas.md section 3 collects the ranges.
constexpr Bytes kDefaultCudaContextBytes = 512 * kMiB;
constexpr const char* kDefaultCudaContextSource =
    "default 512 MiB: a PyTorch process's CUDA context with lazy module loading (CUDA_MODULE_LOADING=LAZY, the "
    "default since CUDA 11.7) is about 0.5 GiB on Hopper; zero-formulas.md sec. 3 gives 0.3-2 GB";
constexpr Bytes kDefaultCublasWorkspaceBytes = 32 * kMiB;
constexpr const char* kDefaultCublasWorkspaceSource =
    "default 32 MiB: PyTorch's cuBLAS/cuBLASLt workspace on Hopper (aten/src/ATen/cuda/CublasHandlePool.cpp)";
constexpr Bytes kDefaultNcclBufferBytes = 512 * kMiB;
constexpr const char* kDefaultNcclBufferSource =
    "default 512 MiB per communicator: NVIDIA/nccl issues #864 and #964 report 0.5-1.6 GB, the low end with "
    "NVLink SHARP (NVLS) off";
constexpr double kDefaultAllocatorFragmentation = 0.0045;
constexpr const char* kDefaultAllocatorFragmentationSource =
    "default 0.0045 of the activation and logit bytes: the free space of the PyTorch caching allocator's activation "
    "segments at the allocated peak, 0.049 GiB over the planner's 10.8 GiB of activations and logits, read off "
    "torch's allocator history of DeepSpeed 0.19.8 (torch 2.11) at ZeRO stage 0 of GPT-2 350M on one H200 "
    "(bench/deepspeed/results-pending/memtrace-2026-11-26/); the loss's logit-sized segments, 2.271 GiB of that "
    "peak's 2.320 GiB reserve, are replayed with DeepSpeed's flat buffers (sim/deepspeed_memory.h)";
constexpr Bytes kDefaultHostProcessBytes = 846 * kMiB;
constexpr const char* kDefaultHostProcessSource =
    "default 846 MiB: a DeepSpeed 0.19.8 / torch 2.11 (cu130) rank's peak resident set (VmHWM) less the fp32 model "
    "it builds on the host, 6.63 GiB - 5.80 GiB (4 bytes x 1.558e9 parameters), on one H200 (bench/deepspeed/results/"
    "gpt2-1.5b_bf16_1gpu_h200x1.json)";
// NCCL's host memory, measured apart from any model (bench/deepspeed/process_footprint.py).
constexpr Bytes kDefaultNcclHostBytes = 359194624;
constexpr const char* kDefaultNcclHostSource =
    "default 342.6 MiB: a torch 2.11 (NCCL 2.28.9) rank's resident set after init_process_group with its device bound "
    "(the communicator created at once) less before it, 359,194,624 B at one rank and 358,952,960 B at two, on "
    "nvidia-h200-x2, 2026-11-26 (bench/deepspeed/footprint-2026-11-26/)";
constexpr Bytes kDefaultNcclSecondCommunicatorDeviceBytes = 408944640;
constexpr const char* kDefaultNcclSecondCommunicatorDeviceSource =
    "default 390.0 MiB: device used (cudaMemGetInfo) after a torch 2.11 (NCCL 2.28.9) rank's second communicator "
    "over the same rank (new_group) ran its first all-reduce less before it, 408,944,640 B at one rank on "
    "nvidia-h200-x2, 2026-11-26 (bench/deepspeed/footprint-2026-11-26/world1.json)";
constexpr Bytes kDefaultNcclSecondCommunicatorMultiRankDeviceBytes = 301989888;
constexpr const char* kDefaultNcclSecondCommunicatorMultiRankDeviceSource =
    "default 288.0 MiB: a DeepSpeed 0.19.8 rank's device memory outside the caching allocator before and after the "
    "first collective on its second NCCL group at two ranks (ResNet-101 at stage 3: the world group's first broadcast "
    "in _convert_to_zero_parameters; at stages 0 and 2 the harness's all-reduce after its figures), 301,989,888 B on "
    "every rank of nvidia-h200-x2, 2026-11-26 (bench/deepspeed/results-pending/probe-2026-11-26/)";
// A process that runs cuDNN's convolutions holds more than one that runs only GEMMs: torch dlopens cuDNN's engine
// libraries (libcudnn_engines_precompiled and the rest of cuDNN 9's sub-libraries) at the first convolution and
// the CUDA driver reads their kernels in. Measured, not derived: nothing in the planner sizes those libraries.
constexpr Bytes kDefaultHostConvolutionProcessBytes = 984674304;
constexpr const char* kDefaultHostConvolutionProcessSource =
    "default 939.1 MiB: the peak resident set (VmHWM) of a DeepSpeed 0.19.8 / torch 2.11 (cu130) rank training "
    "torchvision ResNet-101 (fp16, ZeRO stage 0, one H100 host, 2026-11-25: bench/deepspeed/results-pending/"
    "resnet101_fp16_1gpu_h100x1.json a1_s0, 2,230,964,224 B), reached in training once cuDNN is loaded and NCCL's "
    "communicator exists, less runtime.host_process_bytes (846 MiB, a GPT-2 rank's process) and "
    "runtime.nccl_host_bytes (342.6 MiB): what cuDNN's libraries and kernels add to a rank whose model has "
    "convolutions";

constexpr Bytes kDefaultConvolutionWorkspaceBytes = 128 * kMiB;
constexpr const char* kDefaultConvolutionWorkspaceSource =
    "default 128 MiB: the block cuDNN's convolution backward allocates and frees 22 times a step, live at the "
    "allocated peak, in torch's allocator history of DeepSpeed 0.19.8 (torch 2.11, cuDNN 9) training torchvision "
    "ResNet-101 (fp16, micro-batch 128, CIFAR-10 shapes, ZeRO stage 2) on one H100, 2026-11-26 "
    "(bench/deepspeed/results-pending/memtrace-2026-11-26/, bench/deepspeed/memtrace_replay.py: the 128.0 MiB block "
    "allocated from C++)";

// Default GEMM efficiency curve for a cluster without measured points: a fixed cost per GEMM plus throughput at
// the best rate training shapes reach, t(F) = t_fixed + F / (e_max * peak), so efficiency(F) = F / (peak * t(F)).
// Both are fitted (least squares in relative time) to the ten GEMM points measured at GPT-2 training shapes on
// the H200 (configs/clusters/h200x4.json gemm_efficiency; bench/sim/h200_compute_rates_2026-11-21.json):
// t_fixed = 8.0 us, e_max = 0.676, within 0.04 of every point. Training shapes are thin in K or N and reach less
// than a square GEMM does (0.676 against 796/989 = 0.805 for 8192^3), so a cluster that gives its measured
// large-GEMM rate gets e_max = 0.84 x measured/peak. The same curve on a GPU of the same die and peak (an H100
// SXM: GH100, 132 SMs, 989 TFLOP/s dense bf16 like the H200; NVIDIA H100/H200 datasheets) gives the same GEMM
// times, so an unmeasured H100 is never faster than the measured H200 (issue 13).
constexpr double kDefaultGemmFixedSeconds = 8.0e-6;
constexpr double kDefaultGemmMaxEfficiency = 0.676;
constexpr double kTrainingShapeOfSquareEfficiency = 0.84;
// Fused attention without a measured rate: the fraction of the bf16 peak measured on the H200 (PyTorch SDPA,
// cuDNN flash kernels, head dim 64, seq 1024: forward 298, backward 276 TFLOP/s on causal work of 989; h200x4.json
// provenance gpu.attention_flops).
constexpr double kDefaultAttentionForwardFraction = 298.0 / 989.0;
constexpr double kDefaultAttentionBackwardFraction = 276.0 / 989.0;
constexpr double kDefaultStreamingFraction = 0.89;
constexpr double kDefaultReductionFraction = 0.42;
constexpr double kDefaultKernelOverheadSeconds = 4e-6;

std::vector<GemmEfficiencyPoint> default_gemm_curve(double peak, double measured) {
  const double best =
      measured > 0.0 ? std::min(1.0, kTrainingShapeOfSquareEfficiency * measured / peak) : kDefaultGemmMaxEfficiency;
  std::vector<GemmEfficiencyPoint> curve;
  for (double flops = 1e7; flops <= 1.001e14; flops *= 10.0) {
    const double seconds = kDefaultGemmFixedSeconds + flops / (best * peak);
    curve.push_back({flops, flops / (peak * seconds)});
  }
  return curve;
}

const std::vector<std::string> kClusterKeys = {"name",       "source",     "provenance", "notes", "gpu", "topology",
                                               "intra_node", "inter_node", "host",       "nvme",  "runtime"};
const std::vector<std::string> kGpuKeys = {"model",           "memory_bytes",    "memory_mib",
                                           "memory_gib",      "peak_flops_bf16", "peak_flops_fp16",
                                           "peak_flops_fp32", "measured_gemm_flops_bf16",
                                           "hbm_bandwidth",   "gemm_efficiency", "executor_gemm_efficiency",
                                           "streaming_bandwidth", "reduction_bandwidth",
                                           "attention_forward_flops", "attention_backward_flops",
                                           "executor_attention_forward_flops", "executor_attention_backward_flops",
                                           "executor_kernel_attention_forward_flops",
                                           "executor_kernel_attention_backward_flops",
                                           "kernel_overhead_seconds", "optimizer_bandwidth",
                                           "eager_elementwise_bandwidth"};
const std::vector<std::string> kTopologyKeys = {"gpus_per_node", "nodes"};
const std::vector<std::string> kInterconnectKeys = {"name", "bus_bandwidth", "latency_seconds", "measured",
                                                    "bandwidth_fraction_beside_compute", "grouped_call_seconds"};
const std::vector<std::string> kPointKeys = {"collective", "ranks", "message_bytes", "bus_bandwidth"};
const std::vector<std::string> kHostKeys = {"memory_bytes",
                                            "memory_mib",
                                            "memory_gib",
                                            "cores",
                                            "pcie_bandwidth",
                                            "cpu_optimizer_params_per_second",
                                            "cpu_adam_params_per_second_per_thread",
                                            "cpu_optimizer_call_seconds",
                                            "torch_cpu_adamw_params_per_second",
                                            "deepspeed_module_hook_seconds",
                                            "eager_op_seconds",
                                            "multi_rank_eager_op_seconds",
                                            "probed_eager_op_seconds",
                                            "eager_forward_module_seconds",
                                            "eager_backward_module_seconds",
                                            "deepspeed_forward_module_function_seconds",
                                            "deepspeed_stage3_gradient_hook_seconds",
                                            "deepspeed_stage3_offload_gradient_hook_seconds",
                                            "deepspeed_linear_forward_seconds",
                                            "deepspeed_linear_backward_seconds",
                                            "deepspeed_step_tensor_seconds",
                                            "deepspeed_gradient_hook_seconds",
                                            "deepspeed_bookkeeping_gradient_hook_seconds",
                                            "deepspeed_offload_gradient_hook_seconds",
                                            "deepspeed_tensor_op_seconds",
                                            "pageable_pcie_bandwidth",
                                            "fresh_pageable_write_bandwidth"};
const std::vector<std::string> kNvmeKeys = {"capacity_bytes", "capacity_gib", "capacity_gb", "read_bandwidth",
                                            "write_bandwidth"};
const std::vector<std::string> kRuntimeKeys = {"cuda_context_bytes",     "cuda_context_mib",
                                               "cublas_workspace_bytes", "cublas_workspace_mib",
                                               "nccl_buffer_bytes",      "nccl_buffer_mib",
                                               "host_process_bytes",     "host_process_mib",
                                               "host_convolution_process_bytes", "host_convolution_process_mib",
                                               "nccl_host_bytes", "nccl_host_mib",
                                               "convolution_workspace_bytes", "convolution_workspace_mib",
                                               "deepspeed_process_device_bytes", "deepspeed_process_device_mib",
                                               "deepspeed_multi_rank_device_bytes", "deepspeed_multi_rank_device_mib",
                                               "nccl_second_communicator_device_bytes",
                                               "nccl_second_communicator_device_mib",
                                               "nccl_second_communicator_multi_rank_device_bytes",
                                               "nccl_second_communicator_multi_rank_device_mib",
                                               "allocator_fragmentation_of_activations",
                                               "allocator_reserve_of_activations", "allocator_reserve_fraction"};

void refuse_unknown_keys(const JsonFields& fields, const std::vector<std::string>& known) {
  const auto unknown = fields.unknown_keys(known);
  if (unknown.empty()) return;
  std::string list;
  for (const auto& key : known) list += (list.empty() ? "" : ", ") + key;
  fields.fail(unknown.front(), "unknown key; expected one of " + list);
}

// A byte size given in one unit: BASE_bytes, BASE_mib (2^20), BASE_gib (2^30) or BASE_gb (1e9); exactly one.
struct ByteUnit {
  const char* suffix;
  Bytes multiplier;
};
constexpr ByteUnit kByteUnits[] = {{"_bytes", 1}, {"_mib", kMiB}, {"_gib", kGiB}, {"_gb", 1'000'000'000}};

std::optional<Bytes> optional_bytes(const JsonFields& fields, const std::string& base, bool allow_zero) {
  std::optional<Bytes> result;
  std::string used;
  for (const ByteUnit& unit : kByteUnits) {
    const std::string key = base + unit.suffix;
    if (!fields.has(key)) continue;
    if (result) fields.fail(key, "given together with " + fields.field_path(used) + "; give the size once");
    const std::int64_t count = allow_zero ? fields.non_negative_integer(key) : fields.positive_integer(key);
    Bytes bytes = 0;
    if (__builtin_mul_overflow(count, unit.multiplier, &bytes)) {
      fields.fail(key, "absurd size: " + std::to_string(count) + unit.suffix + " overflows 64-bit bytes");
    }
    result = bytes;
    used = key;
  }
  return result;
}

Bytes required_bytes(const JsonFields& fields, const std::string& base) {
  const auto bytes = optional_bytes(fields, base, /*allow_zero=*/false);
  if (!bytes) fields.fail(base + "_bytes", "missing (required; or give " + base + "_mib / " + base + "_gib)");
  return *bytes;
}

CollectiveKind parse_collective(const JsonFields& fields, const std::string& key) {
  const std::string name = fields.one_of(key, {"all_reduce", "reduce_scatter", "all_gather"});
  if (name == "all_reduce") return CollectiveKind::all_reduce;
  if (name == "reduce_scatter") return CollectiveKind::reduce_scatter;
  return CollectiveKind::all_gather;
}

InterconnectDescription interconnect_from_json(const JsonFields& fields, int max_ranks) {
  refuse_unknown_keys(fields, kInterconnectKeys);
  InterconnectDescription link;
  link.name = fields.string("name");
  link.bus_bandwidth = fields.positive_number("bus_bandwidth");
  link.latency_seconds = fields.non_negative_number("latency_seconds");
  if (fields.has("grouped_call_seconds")) link.grouped_call_seconds = fields.non_negative_number("grouped_call_seconds");
  if (fields.has("bandwidth_fraction_beside_compute")) {
    link.bandwidth_fraction_beside_compute = fields.positive_number("bandwidth_fraction_beside_compute");
    if (link.bandwidth_fraction_beside_compute > 1.0)
      fields.fail("bandwidth_fraction_beside_compute",
                  "expected the fraction of the bus bandwidth kept beside compute, in (0, 1]");
  }
  if (fields.has("measured")) {
    const nlohmann::json& points = fields.raw("measured");
    if (!points.is_array()) fields.fail("measured", "expected an array of measured points");
    for (std::size_t i = 0; i < points.size(); ++i) {
      const JsonFields point(points[i], fields.source(), fields.field_path("measured") + "[" + std::to_string(i) + "]");
      refuse_unknown_keys(point, kPointKeys);
      CollectiveBandwidthPoint measured;
      measured.kind = parse_collective(point, "collective");
      const std::int64_t ranks = point.positive_integer("ranks");
      if (ranks < 2 || ranks > max_ranks) {
        point.fail("ranks", "expected 2.." + std::to_string(max_ranks) + " GPUs, got " + std::to_string(ranks));
      }
      measured.ranks = static_cast<int>(ranks);
      measured.message_bytes = point.positive_integer("message_bytes");
      measured.bus_bandwidth = point.positive_number("bus_bandwidth");
      link.measured.push_back(measured);
    }
  }
  return link;
}

std::string provenance_text(const JsonFields& fields) {
  if (!fields.has("provenance")) fields.fail("provenance", "missing: say where the figures come from");
  const nlohmann::json& value = fields.raw("provenance");
  std::string text;
  auto append = [&text](const std::string& line) { text += (text.empty() ? "" : "\n") + line; };
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    for (const auto& line : value) {
      if (!line.is_string()) fields.fail("provenance", "expected an array of strings");
      append(line.get<std::string>());
    }
    return text;
  }
  if (value.is_object()) {
    for (const auto& item : value.items()) {
      if (!item.value().is_string()) fields.fail("provenance." + item.key(), "expected a string");
      append(item.key() + ": " + item.value().get<std::string>());
    }
    return text;
  }
  fields.fail("provenance", "expected a string, an array of strings or an object of strings");
}

int int_field(const JsonFields& fields, const std::string& key, std::int64_t limit) {
  const std::int64_t value = fields.positive_integer(key);
  if (value > limit) fields.fail(key, "absurd value " + std::to_string(value) + "; at most " + std::to_string(limit));
  return static_cast<int>(value);
}

}  // namespace

ClusterDescription cluster_from_json(const nlohmann::json& document, const std::string& source) {
  const JsonFields fields(document, source);
  refuse_unknown_keys(fields, kClusterKeys);
  ClusterDescription cluster;
  cluster.name = fields.string("name");
  if (cluster.name.empty()) fields.fail("name", "expected a non-empty cluster name");
  cluster.source = source;
  cluster.provenance = provenance_text(fields);
  auto note = [&cluster](const std::string& line) { cluster.provenance += "\n" + line; };

  const JsonFields gpu = fields.object("gpu");
  refuse_unknown_keys(gpu, kGpuKeys);
  cluster.gpu_model = gpu.string("model");
  cluster.gpu_memory_bytes = required_bytes(gpu, "memory");
  cluster.peak_flops_bf16 = gpu.positive_number("peak_flops_bf16");
  cluster.peak_flops_fp16 = gpu.positive_number("peak_flops_fp16");
  cluster.peak_flops_fp32 = gpu.positive_number("peak_flops_fp32");
  cluster.measured_gemm_flops_bf16 = gpu.non_negative_number_or("measured_gemm_flops_bf16", 0.0);
  if (cluster.measured_gemm_flops_bf16 > cluster.peak_flops_bf16) {
    gpu.fail("measured_gemm_flops_bf16", "exceeds peak_flops_bf16; a measured rate cannot beat the peak");
  }
  cluster.hbm_bandwidth = gpu.positive_number("hbm_bandwidth");
  // A GEMM curve: points of (GEMM FLOPs, fraction of the bf16 peak), sorted by FLOPs.
  const auto read_curve = [&](const char* key) {
    std::vector<GemmEfficiencyPoint> curve;
    const nlohmann::json& points = gpu.raw(key);
    if (!points.is_array() || points.empty()) gpu.fail(key, "expected a non-empty array of points");
    for (std::size_t i = 0; i < points.size(); ++i) {
      const JsonFields point(points[i], source, gpu.field_path(key) + "[" + std::to_string(i) + "]");
      refuse_unknown_keys(point, {"flops", "efficiency"});
      const double efficiency = point.positive_number("efficiency");
      if (efficiency > 1.0) point.fail("efficiency", "expected a fraction of peak in (0, 1]");
      curve.push_back({point.positive_number("flops"), efficiency});
    }
    std::sort(curve.begin(), curve.end(),
              [](const GemmEfficiencyPoint& a, const GemmEfficiencyPoint& b) { return a.flops < b.flops; });
    return curve;
  };
  if (gpu.has("executor_gemm_efficiency")) cluster.executor_gemm_efficiency = read_curve("executor_gemm_efficiency");
  if (gpu.has("gemm_efficiency")) {
    cluster.gemm_efficiency = read_curve("gemm_efficiency");
  } else {
    cluster.gemm_efficiency = default_gemm_curve(cluster.peak_flops_bf16, cluster.measured_gemm_flops_bf16);
    note("gpu.gemm_efficiency: default curve efficiency(F) = F / (peak * (8 us + F / (e_max * peak))), fitted to the "
         "H200's GEMMs at GPT-2 training shapes (bench/sim/h200_compute_rates_2026-11-21.json), e_max = " +
         std::string(cluster.measured_gemm_flops_bf16 > 0 ? "0.84 x measured large-GEMM rate / peak"
                                                          : "0.676 (H200 training shapes)"));
  }

  // Non-GEMM rates (sim/compute_time.h). Defaults are fractions of the datasheet HBM bandwidth seen on the H200
  // (bench/sim/measure_compute_rates.py, 2026-11: copy 4.27 of 4.8 TB/s, LayerNorm 2.0 of 4.8), recorded here.
  if (gpu.has("streaming_bandwidth")) {
    cluster.streaming_bandwidth = gpu.positive_number("streaming_bandwidth");
  } else {
    cluster.streaming_bandwidth = kDefaultStreamingFraction * cluster.hbm_bandwidth;
    note("gpu.streaming_bandwidth: default 0.89 x hbm_bandwidth (H200: device copy 4.27 of 4.8 TB/s)");
  }
  if (gpu.has("reduction_bandwidth")) {
    cluster.reduction_bandwidth = gpu.positive_number("reduction_bandwidth");
  } else {
    cluster.reduction_bandwidth = kDefaultReductionFraction * cluster.hbm_bandwidth;
    note("gpu.reduction_bandwidth: default 0.42 x hbm_bandwidth (H200: LayerNorm forward 2.0 of 4.8 TB/s)");
  }
  cluster.attention_forward_flops = gpu.non_negative_number_or("attention_forward_flops", 0.0);
  cluster.attention_backward_flops = gpu.non_negative_number_or("attention_backward_flops", 0.0);
  if (cluster.attention_forward_flops > cluster.peak_flops_bf16 ||
      cluster.attention_backward_flops > cluster.peak_flops_bf16) {
    gpu.fail("attention_forward_flops", "an attention rate above peak_flops_bf16 cannot be achieved");
  }
  cluster.executor_attention_forward_flops = gpu.non_negative_number_or("executor_attention_forward_flops", 0.0);
  cluster.executor_attention_backward_flops = gpu.non_negative_number_or("executor_attention_backward_flops", 0.0);
  if (cluster.executor_attention_forward_flops > cluster.peak_flops_bf16 ||
      cluster.executor_attention_backward_flops > cluster.peak_flops_bf16) {
    gpu.fail("executor_attention_forward_flops", "an attention rate above peak_flops_bf16 cannot be achieved");
  }
  cluster.executor_kernel_attention_forward_flops =
      gpu.non_negative_number_or("executor_kernel_attention_forward_flops", 0.0);
  cluster.executor_kernel_attention_backward_flops =
      gpu.non_negative_number_or("executor_kernel_attention_backward_flops", 0.0);
  if (cluster.executor_kernel_attention_forward_flops > cluster.peak_flops_bf16 ||
      cluster.executor_kernel_attention_backward_flops > cluster.peak_flops_bf16) {
    gpu.fail("executor_kernel_attention_forward_flops", "an attention rate above peak_flops_bf16 cannot be achieved");
  }
  if (!gpu.has("attention_forward_flops")) {
    cluster.attention_forward_flops = kDefaultAttentionForwardFraction * cluster.peak_flops_bf16;
    note("gpu.attention_forward_flops: default 0.301 x peak_flops_bf16 (H200 measured: SDPA flash forward 298 of "
         "989 TFLOP/s on causal work)");
  }
  if (!gpu.has("attention_backward_flops")) {
    cluster.attention_backward_flops = kDefaultAttentionBackwardFraction * cluster.peak_flops_bf16;
    note("gpu.attention_backward_flops: default 0.279 x peak_flops_bf16 (H200 measured: SDPA flash backward 276 of "
         "989 TFLOP/s on causal work)");
  }
  if (gpu.has("kernel_overhead_seconds")) {
    cluster.kernel_overhead_seconds = gpu.non_negative_number_or("kernel_overhead_seconds", 0.0);
  } else {
    cluster.kernel_overhead_seconds = kDefaultKernelOverheadSeconds;
    note("gpu.kernel_overhead_seconds: default 4 us per memory-bound kernel (H200 eager PyTorch: 4.9 us)");
  }

  // The optimizer's kernels (torch's fused and foreach AdamW, DeepSpeed's FusedAdam: multi_tensor_apply over many
  // tensors) stream below a plain copy: on the H200, torch fused AdamW moved 2.87 TB/s against 4.27 for a copy
  // (bench/sim/h200_compute_rates_2026-11-21.json adamw_fused_bytes_per_second), 0.60 of the HBM datasheet rate.
  if (gpu.has("optimizer_bandwidth")) {
    cluster.optimizer_bandwidth = gpu.positive_number("optimizer_bandwidth");
  } else {
    cluster.optimizer_bandwidth = 0.60 * cluster.hbm_bandwidth;
    note("gpu.optimizer_bandwidth: default 0.60 x hbm_bandwidth (H200: torch fused AdamW 2.87 of 4.8 TB/s)");
  }
  // transformers' eager Llama-family modules' elementwise kernels (casts, broadcasts, strided rotary operands)
  // stream below a copy too: 2.73 of 4.8 TB/s on the H200 (bench/llama/eager_module_profile.py,
  // bench/llama/results/2026-11-29-h200x1-eager/README.md), 0.57 of the HBM datasheet rate.
  if (gpu.has("eager_elementwise_bandwidth")) {
    cluster.eager_elementwise_bandwidth = gpu.positive_number("eager_elementwise_bandwidth");
  } else {
    cluster.eager_elementwise_bandwidth = 0.57 * cluster.hbm_bandwidth;
    note("gpu.eager_elementwise_bandwidth: default 0.57 x hbm_bandwidth (H200: transformers' eager Llama modules "
         "2.73 of 4.8 TB/s)");
  }

  const JsonFields topology = fields.object("topology");
  refuse_unknown_keys(topology, kTopologyKeys);
  cluster.gpus_per_node = int_field(topology, "gpus_per_node", 1024);
  cluster.nodes = int_field(topology, "nodes", 1'000'000);

  if (fields.has("intra_node") || cluster.gpus_per_node > 1) {
    cluster.intra_node = interconnect_from_json(fields.object("intra_node"), cluster.gpus_per_node);
  } else {
    note("intra_node: none (one GPU per node)");
  }
  if (fields.has("inter_node")) {
    cluster.inter_node = interconnect_from_json(fields.object("inter_node"), cluster.total_gpus());
  } else if (cluster.nodes > 1) {
    fields.fail("inter_node", "missing: a cluster of " + std::to_string(cluster.nodes) +
                                  " nodes needs the network between them");
  }

  const JsonFields host = fields.object("host");
  refuse_unknown_keys(host, kHostKeys);
  cluster.host_memory_bytes = required_bytes(host, "memory");
  cluster.host_cores = int_field(host, "cores", 1'000'000);
  cluster.pcie_bandwidth = host.positive_number("pcie_bandwidth");
  cluster.cpu_optimizer_params_per_second = host.positive_number("cpu_optimizer_params_per_second");
  cluster.cpu_adam_params_per_second_per_thread = host.non_negative_number_or("cpu_adam_params_per_second_per_thread", 0.0);
  cluster.torch_cpu_adamw_params_per_second = host.non_negative_number_or("torch_cpu_adamw_params_per_second", 0.0);
  cluster.cpu_optimizer_call_seconds = host.non_negative_number_or("cpu_optimizer_call_seconds", 0.0);
  if (cluster.cpu_adam_params_per_second_per_thread > cluster.cpu_optimizer_params_per_second) {
    host.fail("cpu_adam_params_per_second_per_thread", "exceeds the node's cpu_optimizer_params_per_second");
  }
  if (!host.has("cpu_adam_params_per_second_per_thread"))
    note("host.cpu_adam_params_per_second_per_thread: not given; each rank's CPU optimizer gets its share of the "
         "node's rate whatever its thread count");
  cluster.deepspeed_module_hook_seconds = host.non_negative_number_or("deepspeed_module_hook_seconds", 0.0);
  cluster.eager_forward_module_seconds = host.non_negative_number_or("eager_forward_module_seconds", 0.0);
  cluster.eager_backward_module_seconds = host.non_negative_number_or("eager_backward_module_seconds", 0.0);
  cluster.deepspeed_forward_module_function_seconds =
      host.non_negative_number_or("deepspeed_forward_module_function_seconds", 0.0);
  cluster.deepspeed_stage3_gradient_hook_seconds =
      host.non_negative_number_or("deepspeed_stage3_gradient_hook_seconds", 0.0);
  cluster.deepspeed_stage3_offload_gradient_hook_seconds =
      host.non_negative_number_or("deepspeed_stage3_offload_gradient_hook_seconds", 0.0);
  cluster.deepspeed_linear_forward_seconds = host.non_negative_number_or("deepspeed_linear_forward_seconds", 0.0);
  cluster.deepspeed_linear_backward_seconds = host.non_negative_number_or("deepspeed_linear_backward_seconds", 0.0);
  cluster.deepspeed_step_tensor_seconds = host.non_negative_number_or("deepspeed_step_tensor_seconds", 0.0);
  cluster.pageable_pcie_bandwidth = host.non_negative_number_or("pageable_pcie_bandwidth", 0.0);
  cluster.fresh_pageable_write_bandwidth = host.non_negative_number_or("fresh_pageable_write_bandwidth", 0.0);
  cluster.deepspeed_gradient_hook_seconds = host.non_negative_number_or("deepspeed_gradient_hook_seconds", 0.0);
  cluster.deepspeed_bookkeeping_gradient_hook_seconds =
      host.non_negative_number_or("deepspeed_bookkeeping_gradient_hook_seconds", 0.0);
  cluster.deepspeed_offload_gradient_hook_seconds =
      host.non_negative_number_or("deepspeed_offload_gradient_hook_seconds", 0.0);
  cluster.deepspeed_tensor_op_seconds = host.non_negative_number_or("deepspeed_tensor_op_seconds", 0.0);
  cluster.eager_op_seconds = host.non_negative_number_or("eager_op_seconds", 0.0);
  cluster.multi_rank_eager_op_seconds = host.non_negative_number_or("multi_rank_eager_op_seconds", 0.0);
  cluster.probed_eager_op_seconds = host.non_negative_number_or("probed_eager_op_seconds", 0.0);
  if (!host.has("eager_forward_module_seconds") || !host.has("eager_backward_module_seconds"))
    note("host.eager_forward_module_seconds / eager_backward_module_seconds: not given; eager PyTorch's dispatch of "
         "the model's modules costs the host nothing in the step-time model (the GPU work alone bounds each pass)");
  if (!host.has("deepspeed_module_hook_seconds"))
    note("host.deepspeed_module_hook_seconds: not given; DeepSpeed's stage-3 hooks cost the host nothing in the "
         "step-time model");

  if (fields.has("nvme")) {
    const JsonFields nvme = fields.object("nvme");
    refuse_unknown_keys(nvme, kNvmeKeys);
    const auto capacity = optional_bytes(nvme, "capacity", /*allow_zero=*/true);
    if (!capacity) nvme.fail("capacity_bytes", "missing (required; or capacity_gib / capacity_gb)");
    cluster.nvme_capacity_bytes = *capacity;
    if (cluster.nvme_capacity_bytes > 0) {
      cluster.nvme_read_bandwidth = nvme.positive_number("read_bandwidth");
      cluster.nvme_write_bandwidth = nvme.positive_number("write_bandwidth");
    }
  } else {
    note("nvme: none described (capacity 0: NVMe offload does not fit)");
  }

  RuntimeOverhead& runtime = cluster.runtime;
  const nlohmann::json empty = nlohmann::json::object();
  const JsonFields runtime_fields = fields.has("runtime") ? fields.object("runtime")
                                                          : JsonFields(empty, source, "runtime");
  refuse_unknown_keys(runtime_fields, kRuntimeKeys);
  auto runtime_bytes = [&](const std::string& base, Bytes fallback, const char* why) {
    const auto bytes = optional_bytes(runtime_fields, base, /*allow_zero=*/true);
    if (bytes) return *bytes;
    note("runtime." + base + ": " + why);
    return fallback;
  };
  runtime.cuda_context_bytes = runtime_bytes("cuda_context", kDefaultCudaContextBytes, kDefaultCudaContextSource);
  runtime.cublas_workspace_bytes =
      runtime_bytes("cublas_workspace", kDefaultCublasWorkspaceBytes, kDefaultCublasWorkspaceSource);
  runtime.nccl_buffer_bytes = runtime_bytes("nccl_buffer", kDefaultNcclBufferBytes, kDefaultNcclBufferSource);
  runtime.host_process_bytes = runtime_bytes("host_process", kDefaultHostProcessBytes, kDefaultHostProcessSource);
  runtime.host_convolution_process_bytes = runtime_bytes("host_convolution_process", kDefaultHostConvolutionProcessBytes,
                                                         kDefaultHostConvolutionProcessSource);
  runtime.nccl_host_bytes = runtime_bytes("nccl_host", kDefaultNcclHostBytes, kDefaultNcclHostSource);
  runtime.nccl_second_communicator_device_bytes =
      runtime_bytes("nccl_second_communicator_device", kDefaultNcclSecondCommunicatorDeviceBytes,
                    kDefaultNcclSecondCommunicatorDeviceSource);
  runtime.nccl_second_communicator_multi_rank_device_bytes =
      runtime_bytes("nccl_second_communicator_multi_rank_device", kDefaultNcclSecondCommunicatorMultiRankDeviceBytes,
                    kDefaultNcclSecondCommunicatorMultiRankDeviceSource);
  runtime.convolution_workspace_bytes = runtime_bytes("convolution_workspace", kDefaultConvolutionWorkspaceBytes,
                                                      kDefaultConvolutionWorkspaceSource);
  if (const auto bytes = optional_bytes(runtime_fields, "deepspeed_process_device", /*allow_zero=*/true))
    runtime.deepspeed_process_device_bytes = *bytes;
  if (const auto bytes = optional_bytes(runtime_fields, "deepspeed_multi_rank_device", /*allow_zero=*/true))
    runtime.deepspeed_multi_rank_device_bytes = *bytes;
  for (const char* old_key : {"allocator_reserve_fraction", "allocator_reserve_of_activations"}) {
    if (runtime_fields.has(old_key)) {
      runtime_fields.fail(old_key,
                          "replaced by allocator_fragmentation_of_activations: only the fragmentation of the blocks "
                          "the activations leave, as a fraction of the activation and logit bytes (about 0.1); the "
                          "segments of DeepSpeed's flat buffers are now modelled from its code paths");
    }
  }
  if (runtime_fields.has("allocator_fragmentation_of_activations")) {
    runtime.allocator_reserve_fraction = runtime_fields.non_negative_number("allocator_fragmentation_of_activations");
    if (runtime.allocator_reserve_fraction >= 1.0) {
      runtime_fields.fail("allocator_fragmentation_of_activations",
                          "expected a fraction of the activation and logit bytes in [0, 1)");
    }
  } else {
    runtime.allocator_reserve_fraction = kDefaultAllocatorFragmentation;
    note(std::string("runtime.allocator_fragmentation_of_activations: ") + kDefaultAllocatorFragmentationSource);
  }
  return cluster;
}

namespace {
nlohmann::json interconnect_to_json(const InterconnectDescription& link) {
  nlohmann::json measured = nlohmann::json::array();
  for (const auto& point : link.measured) {
    measured.push_back({{"collective", to_string(point.kind)},
                        {"ranks", point.ranks},
                        {"message_bytes", point.message_bytes},
                        {"bus_bandwidth", point.bus_bandwidth}});
  }
  nlohmann::json out = {{"name", link.name},
                        {"bus_bandwidth", link.bus_bandwidth},
                        {"latency_seconds", link.latency_seconds},
                        {"measured", std::move(measured)}};
  if (link.bandwidth_fraction_beside_compute < 1.0)
    out["bandwidth_fraction_beside_compute"] = link.bandwidth_fraction_beside_compute;
  if (link.grouped_call_seconds) out["grouped_call_seconds"] = *link.grouped_call_seconds;
  return out;
}
}  // namespace

nlohmann::json cluster_to_json(const ClusterDescription& cluster) {
  const auto curve = [](const std::vector<GemmEfficiencyPoint>& points) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& point : points) out.push_back({{"flops", point.flops}, {"efficiency", point.efficiency}});
    return out;
  };
  nlohmann::json document = {
      {"name", cluster.name},
      {"source", cluster.source},
      {"provenance", cluster.provenance},
      {"gpu",
       {{"model", cluster.gpu_model},
        {"memory_bytes", cluster.gpu_memory_bytes},
        {"peak_flops_bf16", cluster.peak_flops_bf16},
        {"peak_flops_fp16", cluster.peak_flops_fp16},
        {"peak_flops_fp32", cluster.peak_flops_fp32},
        {"measured_gemm_flops_bf16", cluster.measured_gemm_flops_bf16},
        {"hbm_bandwidth", cluster.hbm_bandwidth},
        {"gemm_efficiency", curve(cluster.gemm_efficiency)},
        {"streaming_bandwidth", cluster.streaming_bandwidth},
        {"reduction_bandwidth", cluster.reduction_bandwidth},
        {"attention_forward_flops", cluster.attention_forward_flops},
        {"attention_backward_flops", cluster.attention_backward_flops},
        {"executor_attention_forward_flops", cluster.executor_attention_forward_flops},
        {"executor_attention_backward_flops", cluster.executor_attention_backward_flops},
        {"executor_kernel_attention_forward_flops", cluster.executor_kernel_attention_forward_flops},
        {"executor_kernel_attention_backward_flops", cluster.executor_kernel_attention_backward_flops},
        {"kernel_overhead_seconds", cluster.kernel_overhead_seconds},
        {"optimizer_bandwidth", cluster.optimizer_bandwidth},
        {"eager_elementwise_bandwidth", cluster.eager_elementwise_bandwidth}}},
      {"topology", {{"gpus_per_node", cluster.gpus_per_node}, {"nodes", cluster.nodes}}},
      {"host",
       {{"memory_bytes", cluster.host_memory_bytes},
        {"cores", cluster.host_cores},
        {"pcie_bandwidth", cluster.pcie_bandwidth},
        {"cpu_optimizer_params_per_second", cluster.cpu_optimizer_params_per_second},
        {"cpu_adam_params_per_second_per_thread", cluster.cpu_adam_params_per_second_per_thread},
        {"cpu_optimizer_call_seconds", cluster.cpu_optimizer_call_seconds},
        {"torch_cpu_adamw_params_per_second", cluster.torch_cpu_adamw_params_per_second},
        {"deepspeed_module_hook_seconds", cluster.deepspeed_module_hook_seconds},
        {"eager_op_seconds", cluster.eager_op_seconds},
        {"multi_rank_eager_op_seconds", cluster.multi_rank_eager_op_seconds},
        {"probed_eager_op_seconds", cluster.probed_eager_op_seconds},
        {"eager_forward_module_seconds", cluster.eager_forward_module_seconds},
        {"eager_backward_module_seconds", cluster.eager_backward_module_seconds},
        {"deepspeed_forward_module_function_seconds", cluster.deepspeed_forward_module_function_seconds},
        {"deepspeed_stage3_gradient_hook_seconds", cluster.deepspeed_stage3_gradient_hook_seconds},
        {"deepspeed_stage3_offload_gradient_hook_seconds", cluster.deepspeed_stage3_offload_gradient_hook_seconds},
        {"deepspeed_linear_forward_seconds", cluster.deepspeed_linear_forward_seconds},
        {"deepspeed_linear_backward_seconds", cluster.deepspeed_linear_backward_seconds},
        {"deepspeed_step_tensor_seconds", cluster.deepspeed_step_tensor_seconds},
        {"deepspeed_gradient_hook_seconds", cluster.deepspeed_gradient_hook_seconds},
        {"deepspeed_bookkeeping_gradient_hook_seconds", cluster.deepspeed_bookkeeping_gradient_hook_seconds},
        {"deepspeed_offload_gradient_hook_seconds", cluster.deepspeed_offload_gradient_hook_seconds},
        {"deepspeed_tensor_op_seconds", cluster.deepspeed_tensor_op_seconds},
        {"pageable_pcie_bandwidth", cluster.pageable_pcie_bandwidth},
        {"fresh_pageable_write_bandwidth", cluster.fresh_pageable_write_bandwidth}}},
      {"nvme",
       {{"capacity_bytes", cluster.nvme_capacity_bytes},
        {"read_bandwidth", cluster.nvme_read_bandwidth},
        {"write_bandwidth", cluster.nvme_write_bandwidth}}},
      {"runtime",
       {{"cuda_context_bytes", cluster.runtime.cuda_context_bytes},
        {"cublas_workspace_bytes", cluster.runtime.cublas_workspace_bytes},
        {"nccl_buffer_bytes", cluster.runtime.nccl_buffer_bytes},
        {"host_process_bytes", cluster.runtime.host_process_bytes},
        {"host_convolution_process_bytes", cluster.runtime.host_convolution_process_bytes},
        {"nccl_host_bytes", cluster.runtime.nccl_host_bytes},
        {"nccl_second_communicator_device_bytes", cluster.runtime.nccl_second_communicator_device_bytes},
        {"nccl_second_communicator_multi_rank_device_bytes",
         cluster.runtime.nccl_second_communicator_multi_rank_device_bytes},
        {"convolution_workspace_bytes", cluster.runtime.convolution_workspace_bytes},
        {"deepspeed_process_device_bytes", cluster.runtime.deepspeed_process_device_bytes},
        {"deepspeed_multi_rank_device_bytes", cluster.runtime.deepspeed_multi_rank_device_bytes},
        {"allocator_fragmentation_of_activations", cluster.runtime.allocator_reserve_fraction}}},
  };
  // A link is written only when there is one: a node of one GPU has no intra-node link (bus_bandwidth 0), and
  // cluster_from_json refuses a link whose bandwidth is not positive.
  if (cluster.intra_node.bus_bandwidth > 0.0) document["intra_node"] = interconnect_to_json(cluster.intra_node);
  if (cluster.inter_node.bus_bandwidth > 0.0) document["inter_node"] = interconnect_to_json(cluster.inter_node);
  // Written only when measured: the loader refuses an empty curve.
  if (!cluster.executor_gemm_efficiency.empty())
    document["gpu"]["executor_gemm_efficiency"] = curve(cluster.executor_gemm_efficiency);
  return document;
}

std::vector<std::string> bundled_cluster_names() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(bundled_clusters_directory(), error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

ClusterDescription load_cluster(const std::string& name_or_path) {
  const auto names = bundled_cluster_names();
  if (std::find(names.begin(), names.end(), name_or_path) != names.end()) {
    const auto path = bundled_clusters_directory() / (name_or_path + ".json");
    return cluster_from_json(read_json_file(path, /*allow_comments=*/true), path.string());
  }
  std::error_code error;
  if (!name_or_path.empty() && std::filesystem::exists(name_or_path, error)) {
    return cluster_from_json(read_json_file(name_or_path, /*allow_comments=*/true), name_or_path);
  }
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  throw InputError("--cluster", "",
                   "unknown cluster \"" + name_or_path + "\": not a bundled cluster (" +
                       (list.empty() ? std::string("none found in ") + bundled_clusters_directory().string() : list) +
                       ") and no such file");
}

ClusterDescription with_gpu_count(const ClusterDescription& cluster, int gpus) {
  if (gpus < 1) throw InputError("--gpus", "", "expected at least 1 GPU, got " + std::to_string(gpus));
  ClusterDescription resized = cluster;
  if (gpus <= cluster.gpus_per_node) {
    // Fewer GPUs than a node: one partially used node (its host and NVMe are still the whole node's).
    resized.gpus_per_node = gpus;
    resized.nodes = 1;
    return resized;
  }
  if (gpus % cluster.gpus_per_node != 0) {
    throw InputError("--gpus", "",
                     std::to_string(gpus) + " GPUs is more than one node of cluster \"" + cluster.name +
                         "\" and not a multiple of its " + std::to_string(cluster.gpus_per_node) +
                         " GPUs per node; expected whole nodes");
  }
  if (cluster.inter_node.bus_bandwidth <= 0.0) {
    throw InputError("--gpus", "",
                     std::to_string(gpus) + " GPUs needs several nodes but cluster \"" + cluster.name +
                         "\" describes no inter-node network; at most " + std::to_string(cluster.gpus_per_node));
  }
  resized.nodes = gpus / cluster.gpus_per_node;
  return resized;
}

}  // namespace zeroplan
