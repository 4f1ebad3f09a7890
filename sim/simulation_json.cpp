#include "sim/simulation_json.h"

#include "sim/timeline.h"

namespace zeroplan {

const char* throughput_key(const ModelDescription& model) {
  return model.transformer ? "tokens_per_second" : "samples_per_second";
}

void add_time_fields(nlohmann::json& plan, const StepSimulation& simulation) {
  plan["step_seconds"] = simulation.step_seconds;
  plan[simulation.token_unit == "tokens" ? "tokens_per_second" : "samples_per_second"] = simulation.tokens_per_second;
  plan["throughput_unit"] = simulation.token_unit;
  plan["mfu"] = simulation.mfu;
  plan["exposed_comm_seconds"] = simulation.exposed_comm_seconds;
}

nlohmann::json simulation_json(const StepSimulation& simulation) {
  nlohmann::json document;
  add_time_fields(document, simulation);
  document["tokens_per_step"] = simulation.tokens_per_step;
  document["token_unit"] = simulation.token_unit;
  document["model_flops_per_token"] = simulation.model_flops_per_token;
  document["flop_convention"] = simulation.flop_convention;
  document["model_flops_per_second_per_gpu"] = simulation.model_flops_per_second_per_gpu;
  document["peak_flops"] = simulation.peak_flops;
  document["peak"] = simulation.peak_name;
  if (simulation.mfu_of_measured_gemm > 0.0) document["mfu_of_measured_gemm"] = simulation.mfu_of_measured_gemm;
  document["compute_seconds"] = simulation.compute_seconds;
  document["recompute_seconds"] = simulation.recompute_seconds;
  document["communication_seconds"] = simulation.communication_seconds;
  document["offload_wait_seconds"] = simulation.offload_wait_seconds;
  nlohmann::json busy = nlohmann::json::object();
  const char* keys[kResourceCount] = {"gpu_compute", "nccl", "host_to_device", "device_to_host", "host_cpu", "nvme",
                                      "host_python"};
  for (int r = 0; r < kResourceCount; ++r) busy[keys[r]] = simulation.busy_seconds[static_cast<std::size_t>(r)];
  document["busy_seconds"] = busy;
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveTiming& timing : simulation.collectives) {
    collectives.push_back({{"collective", to_string(timing.kind)},
                           {"ranks", timing.ranks},
                           {"calls", timing.calls},
                           {"bytes", timing.bytes},
                           {"seconds", timing.seconds},
                           {"algbw", timing.algbw},
                           {"busbw", timing.busbw}});
  }
  document["collectives"] = collectives;
  document["bandwidth_convention"] =
      "algbw = S / t, busbw = algbw * 2(n-1)/n (all-reduce) or (n-1)/n (all-gather, reduce-scatter); bytes/s";
  document["static_gpu_bytes"] = simulation.static_gpu_bytes;
  document["peak_gpu_bytes"] = simulation.peak_gpu_bytes;
  document["peak_memory_at_seconds"] = simulation.peak_memory_at_seconds;
  return document;
}

}  // namespace zeroplan
