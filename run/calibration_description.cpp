#include "run/calibration_description.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <stdexcept>

#include "exec/offload/cpu_adamw.h"

namespace zeroplan {

std::string format_number(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

namespace {

// The GEMM efficiency curve (sim/compute_time.h: efficiency of the precision's dense peak, interpolated in
// log FLOPs). With --model the planner's GEMMs are those shapes, so the curve is the model's training passes,
// plus the square GEMMs smaller than them (the launch-bound end); without it, the square sweep.
nlohmann::json efficiency_curve(const LocalFigures& f) {
  // The curve is looked up at the FLOPs of one GEMM (sim/compute_time.cpp gemm_seconds): a training pass's
  // point is its rate (three GEMMs' FLOPs over their time) at the FLOPs of each of its GEMMs.
  const auto one_gemm_flops = [](const GemmPoint& p) { return p.model_shape ? p.flops / 3.0 : p.flops; };
  double smallest_model = std::numeric_limits<double>::infinity();
  for (const GemmPoint& p : f.gemm)
    if (p.model_shape) smallest_model = std::min(smallest_model, one_gemm_flops(p));
  std::map<double, std::vector<double>> by_flops;
  for (const GemmPoint& p : f.gemm) {
    if (!p.model_shape && p.flops >= smallest_model) continue;
    const double efficiency = p.flops / p.seconds / f.peak_bf16;
    if (!(efficiency > 0.0) || efficiency > 1.0)
      throw std::runtime_error("calibrate: " + p.label + " ran at " +
                               format_number("%.1f", p.flops / p.seconds / 1e12) + " TFLOP/s, above the peak of " +
                               format_number("%.1f", f.peak_bf16 / 1e12) + " (" + f.peak_source +
                               "): the peak is wrong for this GPU; give --base with its own");
    by_flops[one_gemm_flops(p)].push_back(efficiency);
  }
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& [flops, efficiencies] : by_flops) {
    double sum = 0.0;
    for (double e : efficiencies) sum += e;
    curve.push_back({{"flops", flops}, {"efficiency", sum / static_cast<double>(efficiencies.size())}});
  }
  return curve;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M UTC", &tm);
  return buffer;
}

}  // namespace

nlohmann::json describe_calibration(const CalibrationOptions& o, const LocalFigures& f,
                                    const std::optional<ClusterDescription>& base,
                                    const std::optional<nlohmann::json>& ranks,
                                    const std::optional<nlohmann::json>& intra_node, int world) {
  nlohmann::json doc = base ? cluster_to_json(*base) : nlohmann::json::object();
  doc.erase("source");
  doc.erase("inter_node");  // a calibration describes this one machine
  doc.erase("intra_node");
  for (const char* section : {"gpu", "host", "runtime"})
    if (!doc.contains(section)) doc[section] = nlohmann::json::object();
  nlohmann::json provenance = nlohmann::json::object();
  provenance["calibrate"] = "zeroplan calibrate --backend " + o.backend + (o.quick ? " --quick" : "") + " on " +
                            std::to_string(world) + " rank(s), " + utc_now() +
                            (o.model ? ", GEMM shapes of " + *o.model : std::string());
  if (base)
    provenance["base"] = "fields calibrate does not measure come from cluster " + base->name + " (" + base->source +
                         "), whose provenance was: " + base->provenance;
  doc["name"] = o.name ? *o.name : "calibrated " + f.gpu_model + " x" + std::to_string(world);

  nlohmann::json& gpu = doc["gpu"];
  gpu["model"] = f.gpu_model;
  gpu.erase("memory_mib");
  gpu.erase("memory_gib");
  gpu["memory_bytes"] = f.gpu_memory_bytes;
  provenance["gpu.memory_bytes"] = f.gpu_memory_source;
  gpu["peak_flops_bf16"] = f.peak_bf16;
  gpu["peak_flops_fp16"] = f.peak_fp16;
  gpu["peak_flops_fp32"] = f.peak_fp32;
  provenance["gpu.peak_flops"] = f.peak_source;
  gpu["hbm_bandwidth"] = f.hbm_bandwidth;
  provenance["gpu.hbm_bandwidth"] = f.hbm_source;
  // The GEMMs measured are the executor's own (cuBLASLt): its curve, and, since nothing here runs PyTorch's, the
  // curve of the engines that do as well (a base's PyTorch curve belongs to its own machine).
  gpu["gemm_efficiency"] = efficiency_curve(f);
  gpu["executor_gemm_efficiency"] = gpu["gemm_efficiency"];
  provenance["gpu.gemm_efficiency"] =
      f.gemm_source + (o.model ? "; the training passes (forward, input and weight gradient) of " + *o.model +
                                     "'s linear layers and the square GEMMs below their size"
                               : std::string("; square GEMMs")) +
      "; zeroplan's executor GEMMs (cuBLASLt), written as executor_gemm_efficiency and, standing in for PyTorch's "
      "GEMMs, which this command does not run, as gemm_efficiency";
  // measured_gemm_flops_bf16 is the large square GEMM's rate (the cluster files' 8192^3 figure): on the CPU
  // backend it is the stand-in peak itself, which says nothing, so it is left out there.
  double largest_square = 0.0, largest_rate = 0.0;
  for (const GemmPoint& p : f.gemm)
    if (!p.model_shape && p.flops > largest_square) largest_square = p.flops, largest_rate = p.flops / p.seconds;
  if (o.backend == "cuda") {
    gpu["measured_gemm_flops_bf16"] = largest_rate;
    provenance["gpu.measured_gemm_flops_bf16"] = "the largest square bf16 GEMM of the sweep above";
  } else {
    gpu.erase("measured_gemm_flops_bf16");
  }
  gpu["streaming_bandwidth"] = f.streaming_bandwidth;
  provenance["gpu.streaming_bandwidth"] = f.streaming_source;
  if (f.executor_attention_forward > 0.0) {
    gpu["executor_attention_forward_flops"] = f.executor_attention_forward;
    gpu["executor_attention_backward_flops"] = f.executor_attention_backward;
    provenance["gpu.executor_attention_flops"] = f.executor_attention_source;
  } else {
    gpu.erase("executor_attention_forward_flops");  // a base's figures belong to another machine
    gpu.erase("executor_attention_backward_flops");
  }
  if (f.executor_kernel_attention_forward > 0.0) {
    gpu["executor_kernel_attention_forward_flops"] = f.executor_kernel_attention_forward;
    gpu["executor_kernel_attention_backward_flops"] = f.executor_kernel_attention_backward;
    provenance["gpu.executor_kernel_attention_flops"] = f.executor_kernel_attention_source;
  } else {
    gpu.erase("executor_kernel_attention_forward_flops");
    gpu.erase("executor_kernel_attention_backward_flops");
  }
  // A GPU base's fused-attention rates (PyTorch's SDPA kernels) describe its GPU, not a CPU backend rank, whose
  // peak is its own GEMM rate (above them, they would be refused); without them attention is timed at that rate.
  if (o.backend == "cpu" && (gpu.contains("attention_forward_flops") || gpu.contains("attention_backward_flops"))) {
    gpu.erase("attention_forward_flops");
    gpu.erase("attention_backward_flops");
    provenance["gpu.attention_flops"] = "not measured on the CPU backend; --base's rates describe its GPU and are "
                                        "left out";
  }

  doc["topology"] = {{"gpus_per_node", world}, {"nodes", 1}};
  if (ranks && intra_node) {
    doc["intra_node"] = *intra_node;
    provenance["intra_node"] = "measured by calibrate's " + std::to_string(world) + " ranks (" +
                               ranks->at("link").get<std::string>() +
                               "): nccl-tests' busbw (doc/PERFORMANCE.md) per collective and size, in place, the "
                               "slowest rank's time; bus_bandwidth: all-reduce at the largest size; latency_seconds: "
                               "t(smallest) - S x factor / busbw(largest), the least over the collectives";
  } else {
    provenance["intra_node"] = "not measured: one GPU, no collectives";
  }

  nlohmann::json& host = doc["host"];
  host.erase("memory_mib");
  host.erase("memory_gib");
  host["memory_bytes"] = f.host.memory_bytes;
  host["cores"] = f.host.logical_cores;
  provenance["host"] = f.host.cpu_model + ": memory a run can use (/proc/meminfo MemAvailable at calibration; " +
                       std::to_string(f.host.physical_memory_bytes) +
                       " bytes physical, sysconf) and logical cores (hardware_concurrency)";
  host["pcie_bandwidth"] = f.pcie_bandwidth;
  provenance["host.pcie_bandwidth"] = f.pcie_source;
  // The node's rate is at least one thread's (a single-core host measures the same thing twice).
  host["cpu_optimizer_params_per_second"] = std::max(f.adamw_node, f.adamw_thread);
  host["cpu_adam_params_per_second_per_thread"] = f.adamw_thread;
  provenance["host.cpu_optimizer"] = "exec::offload::CpuAdamw (" +
                                     std::string(exec::offload::cpu_isa_name(exec::offload::detect_cpu_isa())) +
                                     ") over fp32 parameters, gradients and moments with the bf16 copy written, " +
                                     std::to_string(f.adamw_node_threads) + " threads for the node, 1 for the per-thread rate";
  if (f.adamw_call_seconds > 0.0) {
    host["cpu_optimizer_call_seconds"] = f.adamw_call_seconds;
    provenance["host.cpu_optimizer_call_seconds"] =
        "exec::offload::CpuAdamw with " + std::to_string(f.adamw_node_threads) +
        " threads over 1,024 parameters (its thread pool woken and joined, the update itself negligible), median";
  }
  // The costs hold on the host of host.eager_op_seconds at one rank, of multi_rank_eager_op_seconds at more.
  const char* reference_field = world > 1 ? "multi_rank_eager_op_seconds" : "eager_op_seconds";
  const double reference = host.contains(reference_field) ? host[reference_field].get<double>() : 0.0;
  if (const HostProbe* probe = std::get_if<HostProbe>(&f.host_probe)) {
    host["probed_eager_op_seconds"] = probe->eager_op_seconds;
    provenance["host.probed_eager_op_seconds"] =
        format_number("%.3f", probe->eager_op_seconds * 1e6) +
        " us per small eager CUDA operation (x.add_ on 256 floats, median of 5 x 20,000; a small Python call " +
        format_number("%.3f", probe->python_call_seconds * 1e6) + " us): " +
        probe->command + " on GPU 0 before the other measurements; DeepSpeed's stage-3 per-call host costs are " +
        "scaled by it over host." + reference_field +
        (reference > 0.0 ? " (" + format_number("%.3f", reference * 1e6) + " us, the host they hold on)"
                         : std::string(", which this description does not give: nothing is scaled until it does"));
  } else {
    host.erase("probed_eager_op_seconds");  // a base's figure belongs to another machine
    provenance["host.probed_eager_op_seconds"] = "not measured: " + std::get<std::string>(f.host_probe) +
                                                 "; plans time DeepSpeed's host costs for host." + reference_field +
                                                 "'s host";
  }
  provenance["host.memory_copy"] = "host memory copy " + format_number("%.2f", f.host_copy_bandwidth / 1e9) +
                                   " GB/s (read + write, " + std::to_string(f.host.logical_cores) + " threads)";

  if (f.disk) {
    doc["nvme"] = {{"capacity_bytes", f.disk->available_bytes},
                   {"read_bandwidth", f.disk->read_bytes_per_second},
                   {"write_bandwidth", f.disk->write_bytes_per_second}};
    provenance["nvme"] = "measured under " + *o.nvme_path + " through exec::offload::NvmeStore (O_DIRECT, io_uring, " +
                         std::to_string(f.disk->block_bytes) + "-byte blocks, " +
                         std::to_string(f.disk->queue_depth) + " in flight); capacity: the free space there";
  } else if (!base) {
    doc.erase("nvme");
    provenance["nvme"] = "not measured (no --nvme-path)";
  } else {
    provenance["nvme"] = "not measured (no --nvme-path): --base's";
  }

  nlohmann::json& runtime = doc["runtime"];
  if (o.backend == "cpu") {
    runtime = nlohmann::json::object();
    if (base) runtime["allocator_fragmentation_of_activations"] = base->runtime.allocator_reserve_fraction;
    runtime["cuda_context_bytes"] = 0;
    runtime["cublas_workspace_bytes"] = 0;
    runtime["nccl_buffer_bytes"] = 0;
    provenance["runtime"] = "the CPU backend has no CUDA context, cuBLAS workspace or NCCL buffers";
  } else {
    for (const char* key : {"cuda_context_mib", "nccl_buffer_mib"}) runtime.erase(key);
    runtime["cuda_context_bytes"] = *f.cuda_context_bytes;
    provenance["runtime.cuda_context_bytes"] = "cudaMemGetInfo total - free on GPU 0 after cudaFree(0), before any allocation";
    if (ranks && ranks->contains("nccl_buffer_bytes")) {
      runtime["nccl_buffer_bytes"] = ranks->at("nccl_buffer_bytes").get<Bytes>();
      provenance["runtime.nccl_buffer_bytes"] = "rank 0's free device memory before the NCCL communicator against "
                                                "after every collective ran at every size";
    }
    if (ranks && ranks->contains("nccl_host_bytes")) {
      runtime.erase("nccl_host_mib");
      runtime["nccl_host_bytes"] = ranks->at("nccl_host_bytes").get<Bytes>();
      provenance["runtime.nccl_host_bytes"] = "rank 0's resident set (VmRSS) before the NCCL communicator against "
                                              "after every collective ran at every size";
    }
  }
  if (runtime.empty()) doc.erase("runtime");
  doc["provenance"] = std::move(provenance);
  return doc;
}

}  // namespace zeroplan
