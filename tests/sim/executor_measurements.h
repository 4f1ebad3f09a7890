// The planner's `--engine zeroplan` model against what zeroplan's own executor measured on GPUs: what the tests in
// tests/sim/executor_measurements_*_test.cpp share. A stored report of `zeroplan run` (bench/exec/results/,
// bench/llama/results/, bench/lora/results/, bench/resnet/results/; each folder's README gives its command) is planned
// as the run planned itself, and each memory component (the allocator's peak per tag) is held within 3%, the device
// total (cudaMemGetInfo used at its peak) within 5%, the step within 10%, the bytes of each collective kind exactly.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/lora_modules.h"
#include "core/plan_inputs.h"
#include "sim/planner.h"
#include "sim/simulator.h"

namespace zeroplan::executor_measurements {

inline constexpr double kComponentTolerance = 0.03;
inline constexpr double kTotalTolerance = 0.05;
inline constexpr double kStepTolerance = 0.10;

// The parameter-NVMe steps' tolerance (executor_measurements_one_gpu_test.cpp says why).
inline constexpr double kNvmeStepTolerance = 0.20;

std::filesystem::path results(const char* folder = "2026-11-23-one-gpu");

struct Planned {
  PlanResult plan;
  StepSimulation step;
  // The workspace of cuDNN's fused attention in the plan (exec/activation_accounting.h): runs measured before the
  // executor used it (2026-11-29; their reports have no attention_kernel) allocated none.
  std::int64_t attention_workspace = 0;
  // Whether the executor's layout for this plan changed on 2026-11-30 (stage 3 keeps no 16-bit parameter partition
  // and rotates gradient buffers by a unit's partitioned buckets alone; an untied model's embeddings bucket takes a
  // rotating buffer where it fits one: exec/zero/zero_buffer_layout.*). Reports from before then have no
  // device_allocations list: their parameters, buffers and device total are printed, not held; every other
  // component, the step and the bytes still are.
  bool layout_changed = false;
  // NCCL's resources beside the copy-engine window the plan counts (exec::kNcclCopyEngineWindowBytes): reports from
  // before the copy-engine gathers (no copy_engine_gathers in them, and not marked so below) had none.
  std::int64_t nccl_window = 0;
  // Whether the plan lays the gradient partition over the MLP tensors (exec/activation_accounting.h mlp_saved_layout,
  // since 2026-11-30's second session): reports from before then (no gradient_partition_over_activations in them)
  // allocated the partition apart; their gradients, activations and device total are printed, not held.
  bool grads_over_activations = false;
  // Whether the plan is a transformer's at stage 3, whose fetch plan counts the units kept gathered toward the prefetch bucket
  // (core/zero3_fetch_plan.h "kept units", since 2026-11-30's third session): reports from before then (no
  // zero3_kept_units_fill_prefetch in them) gathered the first unit not kept beside them at the forward's end; their
  // buffers and device total are printed, not held.
  bool kept_units_fill_prefetch = false;
};

// What `zeroplan run` plans for `inputs` (run/training_run.cpp): the executor's engine, dropout 0, the stage and
// offload choice the inputs give.
// ran_cudnn_attention: the run's report says attention_kernel cudnn_fused. Runs before 2026-11-29 ran the executor's
// own attention kernels: they are timed at the cluster's executor_kernel_attention rates where it has them.
// lora: the run's --lora-* flags (core/lora_modules.h resolve_lora, as run/training_run.cpp resolves them).
Planned plan_as_run(PlanInputs inputs, bool deterministic = false,
                    std::optional<std::int64_t> param_max_in_cpu = std::nullopt, bool ran_cudnn_attention = false,
                    const LoraInputs& lora = {});

// The runs of GPT-2 1.5B (or `model`), micro-batch 8, seq 1024, bf16, on a bundled cluster.
Planned plan_like_the_run(const std::string& cluster_file, int stage, bool offload, int gpus = 1,
                          bool offload_param = false, const std::string& model = "gpt2-1.5b",
                          OffloadDevice optimizer_device = OffloadDevice::cpu,
                          Checkpointing checkpointing = Checkpointing::none, int micro_batch = 8,
                          const std::string& ds_config = "", std::optional<std::int64_t> grad_accum = {},
                          bool ran_cudnn_attention = false);

// The bytes of each collective kind a stored report measured per step, equal to the plan's.
void expect_comm_bytes_equal(const Planned& p, const nlohmann::json& measured);

void expect_within(double predicted, double measured, double tolerance, const std::string& what);

// Each memory component of a stored report (the allocator's peak per tag) against the plan, the device total and,
// with offload, the host's pinned states.
void expect_memory_within(const Planned& p, const nlohmann::json& m, bool offload, bool copy_engine_gathers = false);

// A stored run of stages 0-2 without offload (`report` under bench/exec/results/), planned as it ran on
// `cluster`: memory per component, the device total, the step and the bytes of each collective kind.
void expect_stored_run_within(const std::filesystem::path& report, const char* cluster, int stage, int gpus,
                              const char* ds_config = "", std::int64_t grad_accum = 1);

struct StoredRun {
  const char* report;
  int stage;
  bool offload;
};

// One run of `zeroplan run --stage 3 --offload-optimizer cpu --offload-param nvme` (micro-batch 8 x 1024, bf16)
// against its plan: each memory component, the device total, the host's pinned states (issue 39's 3%) and resident
// peak, the disk's bytes per step (equal), the step within step_tolerance.
struct NvmeRun {
  const char* report;
  std::string model;
  std::filesystem::path cluster;
  bool deterministic;  // bench/exec/device_run_multi.sh param_nvme runs with --deterministic
  // max_in_cpu the run had: 0 (every chunk on NVMe: the runs before chunks were kept in host memory, and the
  // "stream" rows since), or none: DeepSpeed's default (1e9 elements), which keeps all of these models' partitions,
  // as the swap buffers' budget the runs of 2026-11-29 had in its place did
  std::optional<std::int64_t> max_in_cpu = 0;
};

void expect_param_nvme_run_within(const NvmeRun& run, const std::filesystem::path& folder, int gpus,
                                  double step_tolerance);

// The offload and parameter-NVMe rows `bench/exec/device_run_multi.sh offload param_nvme` writes into `folder` on two
// H200 (GPT-2 1.5B at stage 2 and 3 with the optimizer on the CPU, stage 3 with the parameters too; GPT-2 124M and 355M
// with every parameter chunk on the disk), each planned as it ran: memory, host, step and bytes held.
void expect_two_h200_offload_and_param_nvme_runs(const std::filesystem::path& folder, const char* label);

// A GPT-2 1.5B run (micro-batch 8 x 1024, bf16, no offload) of a two-H200 folder, planned as it ran on h200x2: its
// report must carry each of `required` (the layout fields the held components depend on; zeroplan run writes
// zero3_kept_units_fill_prefetch only as true); memory, step and bytes held.
struct Gpt2Run {
  const char* report;
  int stage, gpus;
  const char* ds_config = "";
  std::optional<std::int64_t> grad_accum = {};
  Checkpointing mode = Checkpointing::none;
};

void expect_two_h200_gpt2_run(const std::filesystem::path& folder, const Gpt2Run& run, const char* label,
                              std::initializer_list<const char*> required);

}  // namespace zeroplan::executor_measurements
