#include "sim/plan_json.h"

#include <cstdio>

#include "sim/lora_model.h"
#include "sim/simulation_json.h"

namespace zeroplan {

nlohmann::json plan_to_json(const PlanResult& plan, const ClusterDescription& cluster) {
  nlohmann::json gpu = nlohmann::json::object();
  for (const auto& [name, bytes] : plan.memory.gpu.components()) gpu[name] = bytes;
  gpu["total"] = plan.memory.gpu.total;

  nlohmann::json comm = {{"all_reduce", 0}, {"reduce_scatter", 0}, {"all_gather", 0}};
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveVolume& volume : plan.comm.collectives) {
    comm[to_string(volume.kind)] = comm[to_string(volume.kind)].get<Bytes>() + volume.bytes;
    collectives.push_back({{"kind", to_string(volume.kind)},
                           {"calls", volume.calls},
                           {"elements", volume.elements},
                           {"bytes", volume.bytes},
                           {"wire_bytes", volume.wire_bytes},
                           {"when", volume.when}});
  }
  comm["total"] = plan.comm.total_bytes;
  comm["wire_total"] = plan.comm.total_wire_bytes;
  comm["pcie_host_to_device"] = plan.comm.pcie_host_to_device_bytes;
  comm["pcie_device_to_host"] = plan.comm.pcie_device_to_host_bytes;
  comm["nvme_read"] = plan.comm.nvme_read_bytes;
  comm["nvme_write"] = plan.comm.nvme_write_bytes;
  comm["multiple_of_params"] = plan.comm.multiple_of_params;
  comm["paper_multiple_of_params"] = plan.comm.paper_multiple_of_params;

  nlohmann::json out = {
      {"label", plan.choice.label()},
      {"stage", plan.choice.stage},
      {"offload_optimizer", to_string(plan.choice.offload_optimizer)},
      {"offload_param", to_string(plan.choice.offload_param)},
      {"micro_batch", plan.training.micro_batch},
      {"gpu_bytes", gpu},
      {"gpu_capacity_bytes", cluster.gpu_memory_bytes},
      {"gpu_headroom_bytes", plan.gpu_headroom_bytes},
      {"gpu_margin_fraction", plan.gpu_margin},
      {"gpu_margin_bytes", plan.gpu_margin_bytes},
      {"host_bytes", plan.memory.host.total},
      {"host_pinned_bytes", plan.memory.host.pinned},
      {"host_capacity_bytes", cluster.host_memory_bytes},
      {"nvme_bytes", plan.memory.nvme_bytes},
      {"nvme_capacity_bytes", cluster.nvme_capacity_bytes},
      {"init_peak_gpu_bytes", plan.memory.init_peak_gpu_bytes},
      {"comm_bytes_per_step", comm},
      {"collectives", collectives},
      {"fits", plan.fits},
      {"gpu_fits", plan.gpu_fits},
      {"host_fits", plan.host_fits},
      {"nvme_fits", plan.nvme_fits},
      {"max_micro_batch", plan.max_micro_batch},
  };
  if (plan.deepspeed) {
    out["deepspeed_estimate"] = {{"gpu_bytes", plan.deepspeed->gpu_bytes},
                                 {"host_bytes", plan.deepspeed->host_bytes},
                                 {"row", plan.deepspeed->row},
                                 {"zero_init", plan.deepspeed->zero_init}};
  }
  if (!plan.memory.terms.empty()) {
    nlohmann::json terms = nlohmann::json::array();
    for (const MemoryTerm& term : plan.memory.terms) {
      terms.push_back({{"component", term.component},
                       {"name", term.name},
                       {"bytes", term.bytes},
                       {"formula", term.formula},
                       {"source", term.source}});
    }
    out["terms"] = terms;
  }
  return out;
}

nlohmann::json margin_json(const MemoryMargin& margin) {
  return {{"fraction", margin.fraction},
          {"source", margin.source},
          {"rule", "a plan fits when its predicted GPU peak plus fraction * peak is within the GPU's memory"}};
}

std::string margin_text(const MemoryMargin& margin) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", 100.0 * margin.fraction);
  return buffer;
}

nlohmann::json plans_document(const ModelDescription& model, const ClusterDescription& cluster,
                              const TrainingConfig& training, const std::vector<PlanResult>& plans) {
  nlohmann::json plan_array = nlohmann::json::array();
  for (const PlanResult& plan : plans) plan_array.push_back(plan_to_json(plan, cluster));
  return {
      {"params", model.params()},
      {"largest_layer_params", model.largest_layer_params()},
      {"model", {{"name", model.name}, {"source", model.source}, {"family", to_string(model.family)}}},
      {"cluster",
       {{"name", cluster.name},
        {"gpu_model", cluster.gpu_model},
        {"gpus", cluster.total_gpus()},
        {"gpus_per_node", cluster.gpus_per_node},
        {"nodes", cluster.nodes},
        {"gpu_memory_bytes", cluster.gpu_memory_bytes}}},
      {"training", training_to_json(training)},
      {"lora", lora_to_json(model, training)},
      {"notes", training.notes},
      {"warnings", training.warnings},
      {"plans", plan_array},
  };
}

nlohmann::json timed_plan_to_json(const TimedPlan& timed, const ModelDescription& model,
                                  const ClusterDescription& cluster) {
  nlohmann::json out = plan_to_json(timed.plan, cluster);
  const std::optional<StepSimulation>& simulation = timed.simulation;
  out["sum_of_worst_cases_gpu_bytes"] =
      simulation ? simulation->sum_of_worst_cases_gpu_bytes : timed.plan.memory.gpu.total;
  out["timeline_peak_gpu_bytes"] = simulation ? nlohmann::json(simulation->peak_gpu_bytes) : nlohmann::json(nullptr);
  out["gpu_bytes_source"] =
      simulation ? "timeline peak (components live at the peak)"
                 : "memory model, sum of worst cases (not simulated: " + timed.why_not_timed + ")";
  if (simulation) {
    add_time_fields(out, *simulation);
  } else {
    for (const char* key : {"step_seconds", throughput_key(model), "mfu", "exposed_comm_seconds"}) out[key] = nullptr;
  }
  return out;
}

}  // namespace zeroplan
