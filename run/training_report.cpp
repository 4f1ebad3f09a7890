// Step 5 of one `zeroplan run` (run/training_run_steps.h): measured beside predicted, printed by rank 0, and the
// --report document.
#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/units.h"
#include "exec/activation_accounting.h"
#include "run/measured_trace.h"
#include "run/process_memory.h"
#include "run/training_run_steps.h"
#include "sim/compute_time.h"
#include "sim/plan_json.h"

namespace zeroplan {

namespace {

std::string err_pct(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? "0.0%" : "n/a";
  return fmt("%+.1f%%", 100.0 * (predicted - measured) / measured);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

// Step 5, report: measured beside predicted (memory per component and per rank, step time and its phases,
// communication per collective kind), and the --report document.
void report(RunOptions& o, ResolvedRun& r, RankEngine& e, const TrainingRecord& t, RankGuard& guard) {
  ResolvedPlanInputs& in = o.inputs;
  TrainingConfig& tr = in.training;
  const RankEnvironment& env = r.env;
  const int world = r.world;
  const exec::ExecConfig& cfg = e.cfg;
  exec::Trainer* trainer = e.trainer.get();
  exec::Communicator* ranks_comm = e.ranks_comm;
  const PlanResult& plan = e.plan;
  const GpuMemoryBreakdown& pred = plan.memory.gpu;
  const std::optional<StepSimulation>& sim = e.sim;
  const double flops_per_token = e.flops_per_token, peak = e.peak, job_peak = e.job_peak;
  const std::int64_t tokens_per_step = e.tokens_per_step;
  const int offload_threads = e.offload_threads;
  const HostMemoryWatch& host_watch = *e.host_watch;
  const std::int64_t host_available_at_start = e.host_available_at_start;
  const auto& [losses, step_s, fwd_s, bwd_s, opt_s, to_host_s, cpu_adamw_s, to_device_s, param_h2d_s, param_d2h_s,
               nvme_wait_s, nvme_read_bytes, nvme_write_bytes, param_nvme_wait_s, param_nvme_read_bytes,
               param_nvme_write_bytes, comm_s, exposed_s, comm_per_step, traced] = t;
  RankGuard* guard_ptr = &guard;
  guard_ptr->set_phase("report");
  const exec::MemoryReport mem = trainer->memory();
  const double step_med = median(step_s);
  const double tps = tokens_per_step / step_med;
  const double mfu = job_peak > 0 ? tps * flops_per_token / job_peak : 0.0;
  // Measured runtime overhead: the executor's workspace (backward scratch, cuBLASLt workspace) plus what the
  // device reports beyond our allocations (CUDA context, libraries), i.e. the planner's runtime_overhead.
  const Bytes device_extra = mem.device_total > 0 ? std::max<Bytes>(0, mem.device_used_peak - mem.peak_total) : 0;
  const Bytes measured_runtime = mem.component("workspace") + device_extra;
  const Bytes measured_total = mem.device_total > 0 ? mem.device_used_peak : mem.peak_total;
  // Communication per optimizer step after warm-up (model-state bytes per collective kind, counted where issued),
  // over the timed steps that applied their update (fp16's skipped steps gather no updated parameters).
  std::int64_t measured_comm[exec::kCommKinds];
  for (int k = 0; k < exec::kCommKinds; ++k) measured_comm[k] = comm_per_step.per_step(k);
  const std::int64_t applied_steps = comm_per_step.applied(), skipped_steps = comm_per_step.skipped();
  // Every rank's figures, gathered on every rank (a sum of one-hot rows: each rank fills its own).
  const std::vector<std::string> rank_fields = {"params", "grads", "master_params", "optimizer_states", "gathered_params", "activations",
                                                "logits", "gradient_buckets", "workspace"};
  const int F = static_cast<int>(rank_fields.size()) + 6 + exec::kCommKinds;
  std::vector<double> per_rank(static_cast<std::size_t>(world) * F, 0.0);
  {
    double* mine = per_rank.data() + static_cast<std::size_t>(env.rank) * F;
    for (std::size_t i = 0; i < rank_fields.size(); ++i) mine[i] = static_cast<double>(mem.component(rank_fields[i]));
    const int base = static_cast<int>(rank_fields.size());
    mine[base + 0] = static_cast<double>(mem.device_used_peak);
    mine[base + 1] = static_cast<double>(mem.peak_total);
    mine[base + 2] = step_med;
    for (int k = 0; k < exec::kCommKinds; ++k) mine[base + 3 + k] = static_cast<double>(measured_comm[k]);
    mine[base + 3 + exec::kCommKinds] = static_cast<double>(read_process_memory().resident_peak_bytes);
    mine[base + 4 + exec::kCommKinds] = static_cast<double>(host_available_at_start);
    mine[base + 5 + exec::kCommKinds] = static_cast<double>(host_watch.lowest_bytes());
    if (ranks_comm && world > 1)
      for (std::size_t at = 0; at < per_rank.size(); at += 64)
        ranks_comm->all_reduce_host(per_rank.data() + at, static_cast<int>(std::min<std::size_t>(64, per_rank.size() - at)));
  }
  // What the node used at its peak: the baseline (the launcher's reading) less the lowest reading of any rank's
  // watch. All ranks share this node when our launcher started them (or there is one); under mpirun they may span
  // nodes, and the figure is not formed.
  Bytes node_host_used = -1;
  if (!env.by_mpi || world == 1) {
    std::int64_t baseline = 0, lowest = 0;
    for (int r = 0; r < world; ++r) {
      const double* row = per_rank.data() + static_cast<std::size_t>(r) * F + rank_fields.size() + 4 + exec::kCommKinds;
      baseline = std::max(baseline, static_cast<std::int64_t>(row[0]));
      if (row[1] > 0) lowest = lowest == 0 ? static_cast<std::int64_t>(row[1]) : std::min(lowest, static_cast<std::int64_t>(row[1]));
    }
    if (baseline > 0 && lowest > 0) node_host_used = std::max<std::int64_t>(0, baseline - lowest);
  }
  struct Row {
    std::string name;
    Bytes predicted, measured;
  };
  const std::vector<Row> rows = {
      {"params", pred.params, mem.component("params")},
      {"grads", pred.grads, mem.component("grads")},
      {"master_params", pred.master_params, mem.component("master_params")},
      {"optimizer_states", pred.optimizer_states, mem.component("optimizer_states")},
      {"activations", pred.activations, mem.component("activations")},
      {"logits", pred.logits, mem.component("logits")},
      // The engine tags its bucket buffers gradient_buckets, stage 3's arena and persistent tensors
      // gathered_params, and offload_param's staging buffers offload_buffers (exec/zero/zero_engine.cpp).
      {"buffers (buckets, gathered, offload)", pred.gradient_buckets + pred.gathered_params + pred.offload_buffers,
       mem.component("gradient_buckets") + mem.component("gathered_params") + mem.component("offload_buffers")},
      {"runtime_overhead (workspace + context)", pred.runtime_overhead, measured_runtime},
      {"total (device view)", pred.total, measured_total}};
  if (trainer->backend() == "cpu") {
    // The CPU reference keeps every tensor in fp32 on the host: a different program from the GPU plan, so its
    // memory is listed, not compared.
    std::cout << "\nhost memory of the CPU reference backend (fp32 tensors; not compared with the GPU plan)\n";
    for (const auto& [name, bytes] : mem.peak_by_component)
      std::printf("  %-38s %12s bytes (%s)\n", name.c_str(), format_integer(bytes).c_str(), format_bytes(bytes).c_str());
    std::printf("  %-38s %12s bytes (%s)\n", "total", format_integer(mem.peak_total).c_str(),
                format_bytes(mem.peak_total).c_str());
  } else {
    std::cout << "\nmemory per GPU (GiB = 2^30 bytes)      predicted   measured   error\n";
    for (const auto& r : rows)
      std::printf("  %-38s %9s %10s %7s\n", r.name.c_str(), gib(r.predicted).c_str(), gib(r.measured).c_str(),
                  err_pct(static_cast<double>(r.predicted), static_cast<double>(r.measured)).c_str());
    std::printf("  (allocator peak %s GiB; device baseline before allocating %s GiB; measured = allocator peaks per "
                "component, total = cudaMemGetInfo used at its peak)\n",
                gib(mem.peak_total).c_str(), gib(mem.device_used_baseline).c_str());
  }
  if (cfg.zero.offload_optimizer || cfg.zero.offload_param) {
    // Offloaded states: every rank's host bytes (the plan counts the node: ranks per node x per rank).
    double host_all = static_cast<double>(mem.host_total());
    if (ranks_comm && world > 1) ranks_comm->all_reduce_host(&host_all, 1);
    const HostMemoryBreakdown& ph = plan.memory.host;
    const Bytes states_predicted = ph.pinned + ph.pageable;
    std::printf("\nhost memory of the offloaded states, all %d rank(s)     predicted   measured   error\n", world);
    if (trainer->backend() == "cpu" && cfg.precision != exec::ExecPrecision::fp32)
      std::printf("  %-38s %9s %10s  (the CPU backend keeps fp32 gradients; not compared)\n",
                  cfg.zero.offload_pin_memory ? "pinned" : "pageable", gib(states_predicted).c_str(),
                  gib(static_cast<Bytes>(host_all)).c_str());
    else
      std::printf("  %-38s %9s %10s %7s\n", cfg.zero.offload_pin_memory ? "pinned" : "pageable",
                  gib(states_predicted).c_str(), gib(static_cast<Bytes>(host_all)).c_str(),
                  err_pct(static_cast<double>(states_predicted), host_all).c_str());
    for (const auto& [name, bytes] : mem.host_by_component)
      std::printf("    rank %d %-30s %s bytes\n", env.rank, name.c_str(), format_integer(bytes).c_str());
    // What the kernel charges the ranks: the states above plus each process's own (runtime, libraries, batch).
    double resident_all = 0;
    for (int r = 0; r < world; ++r)
      resident_all += per_rank[static_cast<std::size_t>(r) * F + rank_fields.size() + 3 + exec::kCommKinds];
    // The plan's host total is the states plus each rank's process (sim/host_memory.h executor_process_host_bytes)
    // and the page tables of its pinned states (1/512 of them), which VmHWM leaves out; on the CPU backend the
    // process is not the CUDA executor's, so it is printed without a prediction.
    if (trainer->backend() == "cpu")
      std::printf("  %-38s %9s %10s  (the states and each rank's process)\n", "resident peak (VmHWM), all ranks", "",
                  gib(static_cast<Bytes>(resident_all)).c_str());
    else
      std::printf("  %-38s %9s %10s %7s  (the states and each rank's process)\n", "resident peak (VmHWM), all ranks",
                  gib(ph.total).c_str(), gib(static_cast<Bytes>(resident_all)).c_str(),
                  err_pct(static_cast<double>(ph.total), resident_all).c_str());
    if (node_host_used >= 0 && trainer->backend() != "cpu")
      std::printf("  %-38s %9s %10s %7s  (MemAvailable at launch less its lowest: the kernel's and the GPU "
                  "driver's share too)\n", "node host memory used at its peak", gib(ph.total).c_str(),
                  gib(node_host_used).c_str(), err_pct(static_cast<double>(ph.total), static_cast<double>(node_host_used)).c_str());
    if (!cfg.zero.nvme_path.empty() || !cfg.zero.param_nvme_path.empty()) {
      // The swap files of every rank (the plan counts the node's ranks, like the host memory).
      double nvme_all = static_cast<double>(mem.nvme_bytes);
      if (ranks_comm && world > 1) ranks_comm->all_reduce_host(&nvme_all, 1);
      std::printf("  %-38s %9s %10s %7s\n", "NVMe (swap files under nvme_path)", gib(plan.memory.nvme_bytes).c_str(),
                  gib(static_cast<Bytes>(nvme_all)).c_str(),
                  err_pct(static_cast<double>(plan.memory.nvme_bytes), nvme_all).c_str());
      std::printf("    rank %d %-30s %s bytes\n", env.rank, "nvme swap files", format_integer(mem.nvme_bytes).c_str());
    }
  }
  std::cout << "\nstep time (median of " << step_s.size() << " steps after " << *o.warmup_steps << " warm-up)\n";
  if (sim && trainer->backend() == "cpu")
    std::printf("  (the plan predicts %.1f ms on the cluster's GPU; the CPU backend is not compared with it)\n",
                sim->step_seconds * 1e3);
  else if (sim)
    std::printf("  step %.1f ms predicted, %.1f ms measured (%s); tokens/s %.0f predicted, %.0f measured\n",
                sim->step_seconds * 1e3, step_med * 1e3, err_pct(sim->step_seconds, step_med).c_str(),
                sim->tokens_per_second, tps);
  std::printf("  forward %.1f ms, backward %.1f ms, optimizer %.1f ms\n", median(fwd_s) * 1e3, median(bwd_s) * 1e3,
              median(opt_s) * 1e3);
  if (cfg.zero.offload_optimizer)
    std::printf("  offload (busy time, summed over the partition's pieces): gradients to host %.1f ms, CPU AdamW "
                "%.1f ms (%d threads), parameters to device %.1f ms\n",
                median(to_host_s) * 1e3, median(cpu_adamw_s) * 1e3, offload_threads, median(to_device_s) * 1e3);
  if (!cfg.zero.nvme_path.empty())
    std::printf("  NVMe swapping (rank %d): %s bytes read, %s bytes written per step, the CPU waiting for it %.1f ms "
                "(offload_optimizer.buffer_count %lld)\n",
                env.rank, format_integer(static_cast<Bytes>(median(nvme_read_bytes))).c_str(),
                format_integer(static_cast<Bytes>(median(nvme_write_bytes))).c_str(), median(nvme_wait_s) * 1e3,
                static_cast<long long>(cfg.zero.optimizer_buffer_count));
  if (cfg.zero.offload_param)
    std::printf("  parameter offload (busy time): host to device before the all-gathers %.1f ms, updated parameters "
                "device to host %.1f ms\n",
                median(param_h2d_s) * 1e3, median(param_d2h_s) * 1e3);
  if (!cfg.zero.param_nvme_path.empty())
    // The planner's figure is the executor's own (exec/zero/zero_buffer_layout.h): both count whole 4096-byte
    // blocks of every chunk read for the fetch plan's all-gathers and written after the update.
    std::printf("  parameter NVMe swapping (rank %d): %s bytes read, %s bytes written per step (predicted %s and %s), "
                "the host waiting for it %.1f ms (offload_param.buffer_count %lld)\n",
                env.rank, format_integer(static_cast<Bytes>(median(param_nvme_read_bytes))).c_str(),
                format_integer(static_cast<Bytes>(median(param_nvme_write_bytes))).c_str(),
                format_integer(e.param_nvme_read_predicted).c_str(), format_integer(e.param_nvme_write_predicted).c_str(),
                median(param_nvme_wait_s) * 1e3, static_cast<long long>(cfg.zero.param_buffer_count));
  std::printf("  %.0f %s/s, %.1f TFLOP/s, MFU %.1f%% (%s; peak = datasheet dense %s %.0f TFLOP/s of %s x %d)\n",
              tps, cfg.network ? "samples" : "tokens", tps * flops_per_token / 1e12, 100 * mfu,
              model_flops_convention(in.model, tr).c_str(),
              to_string(tr.precision).c_str(), peak / 1e12, in.cluster.gpu_model.c_str(), world);
  std::printf("  loss %.4f -> %.4f\n", losses.front(), losses.back());
  if (world > 1) {
    std::printf("\ncommunication per step and GPU (bytes of the full buffer per collective, nccl-tests' convention)%s\n",
                skipped_steps > 0 ? (", measured over the " + std::to_string(applied_steps) + " timed steps applied (" +
                                     std::to_string(skipped_steps) + " skipped on fp16 overflow)").c_str()
                                  : "");
    std::printf("  %-16s %16s %16s  %s\n", "collective", "predicted", "measured", "measured time (median)");
    const char* names[exec::kCommKinds] = {"all_reduce", "reduce_scatter", "all_gather"};
    const CollectiveKind kinds[exec::kCommKinds] = {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter,
                                                    CollectiveKind::all_gather};
    for (int k = 0; k < exec::kCommKinds; ++k) {
      Bytes predicted = 0;
      for (const auto& c : plan.comm.collectives)
        if (c.kind == kinds[k]) predicted += c.bytes;
      if (predicted == 0 && measured_comm[k] == 0) continue;
      std::printf("  %-16s %16s %16s  %.2f ms\n", names[k], format_integer(predicted).c_str(),
                  format_integer(measured_comm[k]).c_str(), median(comm_s[k]) * 1e3);
    }
    std::printf("  exposed communication (compute waiting): %.2f ms per step (median)\n", median(exposed_s) * 1e3);
    if (trainer->backend() == "cpu" && cfg.precision != exec::ExecPrecision::fp32)
      std::printf("  (the CPU backend moves fp32 elements; the plan counts %s, so the two columns differ by design)\n",
                  to_string(tr.precision).c_str());
    std::printf("\nper rank                device used peak   allocator peak   step ms   host resident peak (VmHWM)\n");
    const int base = static_cast<int>(rank_fields.size());
    for (int r = 0; r < world; ++r) {
      const double* row = per_rank.data() + static_cast<std::size_t>(r) * F;
      std::printf("  rank %-3d %22s GiB %12s GiB %9.1f %18s GiB\n", r, gib(static_cast<Bytes>(row[base])).c_str(),
                  gib(static_cast<Bytes>(row[base + 1])).c_str(), row[base + 2] * 1e3,
                  gib(static_cast<Bytes>(row[base + 3 + exec::kCommKinds])).c_str());
    }
  }

  if (o.report && env.rank == 0) {
    nlohmann::json doc = plans_document(in.model, in.cluster, tr, {plan});
    nlohmann::json m;
    m["backend"] = trainer->backend();
    m["device"] = trainer->device_name();
    if (const std::string k = trainer->attention_kernel(); !k.empty()) {
      m["attention_kernel"] = k;
      m["attention_kernel_note"] = trainer->attention_kernel_note();
    }
    m["steps"] = o.steps;
    m["warmup_steps"] = *o.warmup_steps;
    m["data"] = e.data_description;
    if (!cfg.network) m["padded_vocab"] = cfg.shape.padded_vocab;
    nlohmann::json comp;
    for (const auto& [name, bytes] : mem.peak_by_component) comp[name] = bytes;
    comp["runtime_overhead"] = measured_runtime;
    m["gpu_bytes"] = comp;
    m["allocator_peak_bytes"] = mem.peak_total;
    m["device_total_bytes"] = mem.device_total;
    m["device_used_baseline_bytes"] = mem.device_used_baseline;
    m["device_used_peak_bytes"] = mem.device_used_peak;
    nlohmann::json expected;
    for (const auto& [name, bytes] : exec::expected_device_memory(cfg).components()) expected[name] = bytes;
    m["executor_formula_bytes"] = expected;
    // Every buffer the executor allocated for training, as it lists them (exec/activation_accounting.h
    // device_allocations): what a later planner is checked against when the executor's layout has changed since.
    if (trainer->backend() == "cuda") {
      // Whether its stage-3 all-gathers ran on the copy engines (the arena an NCCL window).
      m["copy_engine_gathers"] = exec::stage3_copy_engine_gathers(cfg, world);
      // Whether the gradient partition lay over the MLP tensors (exec/activation_accounting.h mlp_saved_layout).
      m["gradient_partition_over_activations"] = exec::mlp_saved_layout(cfg, world).holds_gradient_partition;
      // Stage 3: the fetch plan counted the units kept gathered toward the prefetch bucket (core/zero3_fetch_plan.h
      // "kept units", since 2026-11-30's third session): what a later planner is checked against.
      if (cfg.zero.stage == 3) m["zero3_kept_units_fill_prefetch"] = true;
      nlohmann::json allocations = nlohmann::json::array();
      for (const exec::DeviceAllocation& a : exec::device_allocations(cfg, world))
        allocations.push_back({{"component", a.component}, {"what", a.what}, {"bytes", a.bytes}});
      m["device_allocations"] = allocations;
    }
    m["step_seconds"] = step_med;
    m["step_seconds_all"] = step_s;
    m["forward_seconds"] = median(fwd_s);
    m["backward_seconds"] = median(bwd_s);
    m["optimizer_seconds"] = median(opt_s);
    m["tokens_per_second"] = tps;
    m["model_flops_per_token"] = flops_per_token;
    m["flop_convention"] = model_flops_convention(in.model, tr);
    m["peak_flops"] = peak;
    m["peak_name"] = "datasheet dense " + to_string(tr.precision);
    m["mfu"] = mfu;
    m["loss"] = losses;
    m["world_size"] = world;
    m["stage"] = cfg.zero.stage;
    nlohmann::json cb;
    for (int k = 0; k < exec::kCommKinds; ++k) cb[exec::to_string(static_cast<exec::CommKind>(k))] = measured_comm[k];
    m["comm_bytes_per_step"] = cb;
    m["comm_applied_steps"] = applied_steps;  // the timed steps comm_bytes_per_step is over
    m["skipped_steps"] = skipped_steps;       // timed steps fp16's loss scaler skipped
    nlohmann::json cs;
    for (int k = 0; k < exec::kCommKinds; ++k) cs[exec::to_string(static_cast<exec::CommKind>(k))] = median(comm_s[k]);
    m["comm_seconds_per_step"] = cs;
    m["exposed_comm_seconds"] = median(exposed_s);
    if (cfg.zero.offload_optimizer || cfg.zero.offload_param) {
      nlohmann::json host;
      for (const auto& [name, bytes] : mem.host_by_component) host[name] = bytes;
      m["host_bytes"] = host;  // rank 0's
      if (!cfg.zero.nvme_path.empty() || !cfg.zero.param_nvme_path.empty())
        m["nvme_bytes"] = mem.nvme_bytes;  // rank 0's swap files
      nlohmann::json os;
      if (cfg.zero.offload_optimizer)
        os = {{"to_host", median(to_host_s)},
              {"cpu_adamw", median(cpu_adamw_s)},
              {"to_device", median(to_device_s)},
              {"cpu_threads", offload_threads}};
      if (!cfg.zero.nvme_path.empty()) {
        os["nvme_wait"] = median(nvme_wait_s);
        os["nvme_read_bytes"] = median(nvme_read_bytes);
        os["nvme_write_bytes"] = median(nvme_write_bytes);
      }
      if (!cfg.zero.param_nvme_path.empty()) {
        os["param_nvme_wait"] = median(param_nvme_wait_s);
        os["param_nvme_read_bytes"] = median(param_nvme_read_bytes);
        os["param_nvme_write_bytes"] = median(param_nvme_write_bytes);
        os["param_nvme_read_bytes_predicted"] = e.param_nvme_read_predicted;
        os["param_nvme_write_bytes_predicted"] = e.param_nvme_write_predicted;
      }
      if (cfg.zero.offload_param) {
        os["param_to_device"] = median(param_h2d_s);
        os["param_to_host"] = median(param_d2h_s);
      }
      m["offload_seconds"] = os;
    }
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      const double* row = per_rank.data() + static_cast<std::size_t>(r) * F;
      const int base = static_cast<int>(rank_fields.size());
      nlohmann::json rj, gb, rc;
      for (std::size_t i = 0; i < rank_fields.size(); ++i) gb[rank_fields[i]] = static_cast<Bytes>(row[i]);
      for (int k = 0; k < exec::kCommKinds; ++k)
        rc[exec::to_string(static_cast<exec::CommKind>(k))] = static_cast<Bytes>(row[base + 3 + k]);
      rj["rank"] = r;
      rj["gpu_bytes"] = gb;
      rj["device_used_peak_bytes"] = static_cast<Bytes>(row[base]);
      rj["allocator_peak_bytes"] = static_cast<Bytes>(row[base + 1]);
      rj["step_seconds"] = row[base + 2];
      rj["comm_bytes_per_step"] = rc;
      rj["host_resident_peak_bytes"] = static_cast<Bytes>(row[base + 3 + exec::kCommKinds]);
      rj["host_available_at_start_bytes"] = static_cast<Bytes>(row[base + 4 + exec::kCommKinds]);
      rj["host_available_lowest_bytes"] = static_cast<Bytes>(row[base + 5 + exec::kCommKinds]);
      ranks.push_back(rj);
    }
    m["ranks"] = ranks;
    // The node's host memory at its peak (MemAvailable at launch less its lowest during the run); absent under
    // mpirun, whose ranks may span nodes.
    if (node_host_used >= 0) m["host_node_used_peak_bytes"] = node_host_used;
    if (sim) {
      m["predicted_step_seconds"] = sim->step_seconds;
      m["predicted_tokens_per_second"] = sim->tokens_per_second;
    }
    doc["measured"] = m;
    std::ofstream f(*o.report);
    if (!f) throw InputError(*o.report, "--report", "cannot open for writing");
    f << doc.dump(2) << '\n';
    std::cout << "report written to " << *o.report << '\n';
  }
  if (o.trace && !traced.empty()) {
    // The timed step whose step time is the median (the lower of the two middle ones), each rank its own.
    std::vector<std::size_t> order(traced.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    const auto middle = order.begin() + static_cast<std::ptrdiff_t>((order.size() - 1) / 2);
    std::nth_element(order.begin(), middle, order.end(),
                     [&](std::size_t a, std::size_t b) { return traced[a].first.step_s < traced[b].first.step_s; });
    const auto& [times, step] = traced[*middle];
    const std::filesystem::path file = rank_trace_path(*o.trace, env.rank);
    write_run_trace(file, sim ? &*sim : nullptr, in.model, "predicted: " + e.choice.label(), times, env.rank, step);
    if (env.rank == 0)
      std::cout << "trace written to " << file.string()
                << (world > 1 ? " (the other ranks' beside it, as <name>.rank<r>.json)" : "")
                << ": the median step measured beside the plan's timeline (open it in ui.perfetto.dev)\n";
  }
}

}  // namespace zeroplan
