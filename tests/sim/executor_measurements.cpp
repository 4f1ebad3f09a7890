#include "tests/sim/executor_measurements.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "core/data_paths.h"
#include "core/json_input.h"
#include "exec/activation_accounting.h"
#include "exec/zero/zero_buffer_layout.h"
#include "sim/executor_device_memory.h"

namespace zeroplan::executor_measurements {

std::filesystem::path results(const char* folder) {
  return data_directory() / "bench" / "exec" / "results" / folder;
}

Planned plan_as_run(PlanInputs inputs, bool deterministic,
                    std::optional<std::int64_t> param_max_in_cpu, bool ran_cudnn_attention,
                    const LoraInputs& lora) {
  inputs.engine = TrainingEngine::zeroplan;
  ResolvedPlanInputs in = resolve_plan_inputs(inputs);
  resolve_lora(lora, in.model, in.training);
  in.model.transformer->dropout = 0;
  if (!ran_cudnn_attention && in.cluster.executor_kernel_attention_forward_flops > 0.0) {
    in.cluster.executor_attention_forward_flops = in.cluster.executor_kernel_attention_forward_flops;
    in.cluster.executor_attention_backward_flops = in.cluster.executor_kernel_attention_backward_flops;
  }
  in.training.deterministic = deterministic;  // `zeroplan run --deterministic` (run/training_run.cpp)
  if (param_max_in_cpu) in.training.zero.param_max_in_cpu = *param_max_in_cpu;
  const PlanChoice choice{inputs.stage.value(), inputs.offload_optimizer.value_or(OffloadDevice::none),
                          inputs.offload_param.value_or(OffloadDevice::none)};
  PlannerOptions options;
  options.search_max_micro_batch = false;
  TrainingConfig applied = in.training;
  applied.zero.stage = choice.stage;
  const bool untied = in.model.transformer && !in.model.transformer->tied_embeddings;
  const exec::ExecConfig executor = executor_planned_config(in.model, applied, choice.stage);
  const int world = static_cast<int>(inputs.gpus.value_or(1));
  return {evaluate_plan(in.model, in.cluster, in.training, choice, options),
          simulate_step(in.model, in.cluster, in.training, choice),
          exec::cudnn_attention_workspace_bytes(executor),
          choice.stage == 3 || (choice.stage == 2 && untied),
          exec::stage3_copy_engine_gathers(executor, world) ? exec::kNcclCopyEngineWindowBytes : 0,
          exec::mlp_saved_layout(executor, world).holds_gradient_partition,
          choice.stage == 3 && in.model.transformer.has_value()};
}

Planned plan_like_the_run(const std::string& cluster_file, int stage, bool offload, int gpus,
                          bool offload_param, const std::string& model,
                          OffloadDevice optimizer_device,
                          Checkpointing checkpointing, int micro_batch,
                          const std::string& ds_config, std::optional<std::int64_t> grad_accum,
                          bool ran_cudnn_attention) {
  PlanInputs inputs;
  inputs.grad_accum = grad_accum;
  inputs.checkpointing = checkpointing;
  inputs.model = model;
  inputs.cluster = (data_directory() / "configs" / "clusters" / cluster_file).string();
  inputs.gpus = gpus;
  inputs.micro_batch = micro_batch;
  if (!ds_config.empty()) inputs.ds_config = (data_directory() / ds_config).string();
  inputs.seq = 1024;
  inputs.precision = Precision::bf16;
  inputs.stage = stage;
  inputs.offload_optimizer = offload ? optimizer_device : OffloadDevice::none;
  inputs.offload_param = offload_param ? OffloadDevice::cpu : OffloadDevice::none;
  return plan_as_run(inputs, false, std::nullopt, ran_cudnn_attention);
}

void expect_comm_bytes_equal(const Planned& p, const nlohmann::json& measured) {
  std::map<std::string, std::int64_t> planned;
  for (const auto& c : p.plan.comm.collectives) planned[to_string(c.kind)] += c.bytes;
  for (const auto& [kind, bytes] : measured.at("comm_bytes_per_step").items())
    EXPECT_EQ(planned[kind], bytes.get<std::int64_t>()) << kind;
}

void expect_within(double predicted, double measured, double tolerance, const std::string& what) {
  const double error = measured == 0 ? (predicted == 0 ? 0.0 : 1.0) : predicted / measured - 1.0;
  std::printf("  %-18s predicted %16.0f measured %16.0f  %+6.2f%%\n", what.c_str(), predicted, measured,
              100.0 * error);
  EXPECT_LE(std::abs(error), tolerance) << what << ": predicted " << predicted << ", measured " << measured;
}

void expect_memory_within(const Planned& p, const nlohmann::json& m, bool offload, bool copy_engine_gathers) {
  const GpuMemoryBreakdown& g = p.plan.memory.gpu;
  const nlohmann::json& measured = m.at("gpu_bytes");
  const Bytes absent_from_the_run = (m.contains("attention_kernel") ? 0 : p.attention_workspace) +
                                       (m.value("copy_engine_gathers", copy_engine_gathers) ? 0 : p.nccl_window);
  const auto bytes = [&](const char* tag) { return measured.value(tag, std::int64_t{0}); };
  const bool earlier_layout = p.layout_changed && !m.contains("device_allocations");
  const bool earlier_gradients = p.grads_over_activations && !m.contains("gradient_partition_over_activations");
  const bool earlier_fetch = p.kept_units_fill_prefetch && !m.contains("zero3_kept_units_fill_prefetch");
  // Held, or printed for a report of the executor's layout before 2026-11-30 (Planned::layout_changed) or before
  // the gradient partition over the MLP tensors (Planned::grads_over_activations).
  const auto held_unless = [&](bool earlier, const char* since) {
    return [&, earlier, since](double predicted, double measured_bytes, double tolerance, const std::string& what) {
      if (!earlier) return expect_within(predicted, measured_bytes, tolerance, what);
      const double error = measured_bytes == 0 ? (predicted == 0 ? 0.0 : 1.0) : predicted / measured_bytes - 1.0;
      std::printf("  %-18s predicted %16.0f measured %16.0f  %+6.2f%% (not held: measured before %s)\n", what.c_str(),
                  predicted, measured_bytes, 100.0 * error, since);
    };
  };
  const auto layout_dependent = held_unless(earlier_layout, "the 2026-11-30 layout");
  const auto fetch_dependent = held_unless(earlier_layout || earlier_fetch,
                                           earlier_layout ? "the 2026-11-30 layout" : "the kept units' prefetch rule");
  const auto gradients_dependent = held_unless(earlier_gradients, "the gradient partition over the activations");
  layout_dependent(g.params, bytes("params"), kComponentTolerance, "params");
  gradients_dependent(g.grads, bytes("grads"), kComponentTolerance, "grads");
  expect_within(g.master_params, bytes("master_params"), kComponentTolerance, "master_params");
  expect_within(g.optimizer_states, bytes("optimizer_states"), kComponentTolerance, "optimizer_states");
  gradients_dependent(g.activations, bytes("activations"), kComponentTolerance, "activations");
  expect_within(g.logits, bytes("logits"), kComponentTolerance, "logits");
  fetch_dependent(g.gradient_buckets + g.gathered_params + g.offload_buffers,
                   bytes("gradient_buckets") + bytes("gathered_params") + bytes("offload_buffers"), kComponentTolerance,
                   "buffers");
  expect_within(g.runtime_overhead - absent_from_the_run, bytes("runtime_overhead"), kComponentTolerance,
                "runtime_overhead");
  held_unless(earlier_layout || earlier_gradients || earlier_fetch, "the executor's current layout")(
      g.total - absent_from_the_run, m.at("device_used_peak_bytes").get<double>(), kTotalTolerance, "device total");
  if (offload) {
    std::int64_t host = 0;
    for (const auto& [tag, b] : m.at("host_bytes").items()) host += b.get<std::int64_t>();
    // host_bytes is rank 0's; the plan counts the node, whose ranks hold equal partitions of GPT-2 here.
    host *= m.value("world_size", 1);
    const HostMemoryBreakdown& h = p.plan.memory.host;
    expect_within(h.pinned + h.pageable, host, kComponentTolerance, "host pinned");
    // What the kernel charged the ranks (VmHWM, reports since 2026-11-24): the states and each rank's process,
    // the plan's host total, within issue 12's 5%.
    double resident = 0;
    for (const nlohmann::json& rank : m.at("ranks")) resident += rank.value("host_resident_peak_bytes", 0.0);
    if (resident > 0) expect_within(h.total, resident, kTotalTolerance, "host resident");
    // The node's use at its peak (MemAvailable at launch less its lowest, reports since 2026-11-26): the plan's host
    // total with the kernel's and the driver's share of the pinned pages.
    if (m.contains("host_node_used_peak_bytes"))
      expect_within(h.total, m.at("host_node_used_peak_bytes").get<double>(), kTotalTolerance, "node host");
  }
}

void expect_stored_run_within(const std::filesystem::path& report, const char* cluster, int stage, int gpus,
                              const char* ds_config, std::int64_t grad_accum) {
  SCOPED_TRACE(report.string());
  std::printf("%s: %s\n", cluster, report.string().c_str());
  const nlohmann::json m = read_json_file(report).at("measured");
  ASSERT_EQ(m.at("stage").get<int>(), stage);
  ASSERT_EQ(m.at("world_size").get<int>(), gpus);
  const Planned p = plan_like_the_run(cluster, stage, false, gpus, false, "gpt2-1.5b", OffloadDevice::cpu,
                                      Checkpointing::none, 8, ds_config, grad_accum);
  expect_memory_within(p, m, false);
  expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, kStepTolerance, "step ms");
  expect_comm_bytes_equal(p, m);
}

void expect_param_nvme_run_within(const NvmeRun& run, const std::filesystem::path& folder, int gpus,
                                  double step_tolerance) {
  SCOPED_TRACE(run.report);
  std::printf("%d H200, parameters on NVMe: %s\n", gpus, run.report);
  const nlohmann::json doc = read_json_file(folder / run.report);
  const nlohmann::json& m = doc.at("measured");
  ASSERT_EQ(m.at("stage").get<int>(), 3);
  ASSERT_EQ(m.at("world_size").get<int>(), gpus);
  PlanInputs inputs;
  inputs.model = run.model;
  inputs.cluster = run.cluster.string();
  inputs.gpus = gpus;
  inputs.micro_batch = 8;
  inputs.seq = 1024;
  inputs.precision = Precision::bf16;
  inputs.stage = 3;
  inputs.offload_optimizer = OffloadDevice::cpu;
  inputs.offload_param = OffloadDevice::nvme;
  const Planned p = plan_as_run(inputs, run.deterministic, run.max_in_cpu,
                                m.value("attention_kernel", std::string()) == "cudnn_fused");
  expect_memory_within(p, m, false);
  // Host: the pinned states and swap buffers (issue 39's 3%), the ranks' resident peak (5%). The node's
  // MemAvailable drop is printed, not held: at 2.2 GiB (124M, one H200) it read 8.5% below the plan, 3.2% at 355M.
  std::int64_t pinned = 0;
  for (const auto& [tag, b] : m.at("host_bytes").items()) pinned += b.get<std::int64_t>();
  const HostMemoryBreakdown& h = p.plan.memory.host;
  const double ranks_per_node = gpus;
  expect_within(h.pinned + h.pageable, pinned * ranks_per_node, kComponentTolerance, "host pinned");
  expect_within(h.total, m.at("ranks").at(0).at("host_resident_peak_bytes").get<double>() * ranks_per_node,
                kTotalTolerance, "host resident");
  std::printf("  node host used: predicted %.0f, measured %.0f (not held)\n", static_cast<double>(h.total),
              m.at("host_node_used_peak_bytes").get<double>());
  const nlohmann::json& o = m.at("offload_seconds");
  EXPECT_EQ(p.plan.comm.nvme_read_bytes, o.at("param_nvme_read_bytes").get<double>());
  EXPECT_EQ(p.plan.comm.nvme_write_bytes, o.at("param_nvme_write_bytes").get<double>());
  expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, step_tolerance, "step ms");
}

void expect_two_h200_offload_and_param_nvme_runs(const std::filesystem::path& folder, const char* label) {
  for (const char* report : {"off_s2optimizercpu.json", "off_s3optimizercpu.json", "off_s3optimizercpuparamcpu.json"}) {
    SCOPED_TRACE(report);
    std::printf("two H200, %s: %s\n", label, report);
    const nlohmann::json m = read_json_file(folder / report).at("measured");
    const bool param = std::string(report).find("param") != std::string::npos;
    const Planned p = plan_like_the_run("h200x2.json", m.at("stage").get<int>(), true, 2, param, "gpt2-1.5b",
                                        OffloadDevice::cpu, Checkpointing::none, 8, "", {},
                                        m.value("attention_kernel", std::string()) == "cudnn_fused");
    expect_memory_within(p, m, true);
    expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, kStepTolerance, "step ms");
    expect_comm_bytes_equal(p, m);
  }
  const std::filesystem::path cluster = data_directory() / "configs" / "clusters" / "h200x2.json";
  for (const NvmeRun& run : {NvmeRun{"pnvme_gpt2-124m.json", "gpt2-124m", cluster, true},
                             NvmeRun{"pnvme_gpt2-355m.json", "gpt2-355m", cluster, true}})
    expect_param_nvme_run_within(run, folder, 2, kStepTolerance);
}

void expect_two_h200_gpt2_run(const std::filesystem::path& folder, const Gpt2Run& run, const char* label,
                              std::initializer_list<const char*> required) {
  SCOPED_TRACE(run.report);
  std::printf("two H200, %s: %s\n", label, run.report);
  const nlohmann::json m = read_json_file(folder / run.report).at("measured");
  ASSERT_EQ(m.at("stage").get<int>(), run.stage);
  ASSERT_EQ(m.at("world_size").get<int>(), run.gpus);
  for (const char* field : required) ASSERT_TRUE(m.contains(field)) << field;
  const Planned p = plan_like_the_run("h200x2.json", run.stage, false, run.gpus, false, "gpt2-1.5b", OffloadDevice::cpu,
                                      run.mode, 8, run.ds_config, run.grad_accum,
                                      m.value("attention_kernel", std::string()) == "cudnn_fused");
  expect_memory_within(p, m, false);
  expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, kStepTolerance, "step ms");
  expect_comm_bytes_equal(p, m);
}

}  // namespace zeroplan::executor_measurements
