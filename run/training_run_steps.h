// The steps of one `zeroplan run` (run/training_run.h) and what they hand each other: resolve the inputs, launch
// the ranks, build a rank's engine and train (run/training_run.cpp), then report measured beside predicted
// (run/training_report.cpp). Internal to run/: cli/ reads run/training_run.h only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "exec/exec_config.h"
#include "exec/image_data.h"
#include "exec/token_data.h"
#include "exec/trainer.h"
#include "run/applied_step_comm.h"
#include "run/checkpoint.h"
#include "run/hf_checkpoint.h"
#include "run/launcher.h"
#include "run/process_memory.h"
#include "run/rank_guard.h"
#include "run/training_run.h"
#include "sim/planner.h"
#include "sim/simulator.h"

namespace zeroplan {

// printf of one number into a string; bytes as GiB with three decimals (the report's tables, the plan line).
inline std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
inline std::string gib(Bytes b) { return fmt("%.3f", to_gib(b)); }

// The run's inputs resolved and checked before any rank starts: every problem is an InputError naming the flag
// or the file, raised by the launcher (or the only rank) before anything is allocated or written.
struct ResolvedRun {
  RankEnvironment env;
  int world = 1;
  std::unique_ptr<CheckpointReader> resume;
  std::int64_t first_step = 0;  // the checkpoint's step when resuming
  std::int64_t run_steps = 0;   // steps this run makes
  // Where the NVMe path came from, for its errors.
  std::string nvme_source = "--ds-config", nvme_field = "zero_optimization.offload_optimizer.nvme_path";
  // --init-from, checked against the layout every rank builds.
  std::unique_ptr<exec::ParamLayout> init_layout;
  std::unique_ptr<HfCheckpointSource> init_from;
  // --init-adapter, checked against the adapters' layout (LoRA's trained parameters).
  std::unique_ptr<exec::ParamLayout> adapter_layout;
  std::unique_ptr<HfCheckpointSource> init_adapter;
};

// One rank's engine: its plan, communicators, trainer and data. The communicators are declared before the
// trainer so that they outlive it: the trainer's destructor waits on the communicator's stream (a destroyed NCCL
// stream crashed every 2-GPU run at its end, and every rank that failed by an exception, on the first 2xH200 run).
struct RankEngine {
  // The node's available host memory from here to the report (start-up included: a plan's host peak may come
  // while the offloaded states are allocated). The baseline is the launcher's reading before it started the ranks.
  std::unique_ptr<HostMemoryWatch> host_watch;
  std::int64_t host_available_at_start = 0;
  exec::ExecConfig cfg;
  int offload_threads = 0;
  // offload_param nvme: rank 0's NVMe bytes per step as the planner counts them (sim/executor_layout.h).
  Bytes param_nvme_read_predicted = 0, param_nvme_write_predicted = 0;
  PlanChoice choice;
  PlanResult plan;
  std::optional<StepSimulation> sim;
  std::unique_ptr<exec::Communicator> mpi, comm;
  std::unique_ptr<exec::Trainer> trainer;
  exec::TokenSource data;                   // transformers
  std::optional<exec::CifarDataset> images; // layer lists with --data (else synthetic images)
  std::string data_description;
  double flops_per_token = 0, peak = 0, job_peak = 0;
  std::int64_t tokens_per_step = 0;  // the global batch
  exec::Communicator* ranks_comm = nullptr;
};

// What the timed steps measured, per step after the warm-up.
struct TrainingRecord {
  std::vector<double> losses, step_s, fwd_s, bwd_s, opt_s, to_host_s, cpu_adamw_s, to_device_s;
  std::vector<double> param_h2d_s, param_d2h_s, nvme_wait_s, nvme_read_bytes, nvme_write_bytes;
  std::vector<double> param_nvme_wait_s, param_nvme_read_bytes, param_nvme_write_bytes;
  std::vector<double> comm_s[exec::kCommKinds], exposed_s;
  AppliedStepComm comm_per_step;  // collective bytes per applied optimizer step (run/applied_step_comm.h)
  // --trace: each timed step's times and timeline, and its step number (1-based).
  std::vector<std::pair<exec::StepTimes, std::int64_t>> traced;
};

// Step 5, report: measured beside predicted (memory per component and per rank, step time and its phases,
// communication per collective kind), and the --report document.
void report(RunOptions& o, ResolvedRun& r, RankEngine& e, const TrainingRecord& t, RankGuard& guard);

}  // namespace zeroplan
