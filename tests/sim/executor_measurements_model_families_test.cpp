// The planner's `--engine zeroplan` model against zeroplan's executor on the model families beside GPT-2 and on four
// GPUs (tests/sim/executor_measurements.h says what is held and how): the Llama family, LoRA and QLoRA, ResNet-101,
// and four H200 with the README's headline plan.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "core/data_paths.h"
#include "core/json_input.h"
#include "tests/sim/executor_measurements.h"

namespace zeroplan {
namespace {
using namespace executor_measurements;

// The Llama family on two H200 (bench/llama/results/2026-11-28-h200x2/, bench/llama/README.md gives the commands):
// TinyLlama 1.1B (GQA 32/4, untied, vocab 32,000) at micro-batch 4 x 2048, stages 0, 2 and 3, and Llama-2 7B at
// micro-batch 2 x 2048, stage 3, bf16, from their transformers config.json files. The runs planned themselves on the
// default cluster (h200x4 resized to 2 GPUs, whose runtime section predates the x2 host's calibration); planned
// here on h200x2, the description of the machine they ran on, as for GPT-2 above: each memory component within 3%,
// the device total within 5%, the step within 10%, the bytes of each collective kind exactly.
TEST(ExecutorMeasurements, TwoH200LlamaRunsWithinTolerances) {
  struct Run {
    const char* report;
    const char* model;  // under bench/llama/configs, else a bundled model
    int stage;
    int micro_batch;
    bool copy_engine_gathers = false;  // a run of the copy-engine build before its reports said so (call8)
    std::int64_t seq = 2048;
    Checkpointing checkpointing = Checkpointing::none;
    const char* ds_config = "";  // the run's --ds-config, from the repository's root
  };
  // 2026-11-28's rows, and 2026-11-30 call5's: stage 3 without a 16-bit parameter partition (each all-gather casts
  // the fp32 master), the gradient buffers rotated by a unit's partitioned buckets, cuDNN's fused attention.
  for (const Run& run : {Run{"2026-11-28-h200x2/speed_s0.json", "tinyllama-1.1b.json", 0, 4},
                         Run{"2026-11-28-h200x2/speed_s2.json", "tinyllama-1.1b.json", 2, 4},
                         Run{"2026-11-28-h200x2/speed_s3.json", "tinyllama-1.1b.json", 3, 4},
                         Run{"2026-11-28-h200x2/call2/big_s3.json", "llama2-7b.json", 3, 2},
                         Run{"2026-11-30-h200x2/call5/speed_s2.json", "tinyllama-1.1b.json", 2, 4},
                         Run{"2026-11-30-h200x2/call5/speed_s3.json", "tinyllama-1.1b.json", 3, 4},
                         Run{"2026-11-30-h200x2/call5/big_s3.json", "llama2-7b.json", 3, 2},
                         // call8: stage 3's all-gathers on the copy engines (the arena an NCCL window)
                         Run{"2026-11-30-h200x2/call8/speed_s3.json", "tinyllama-1.1b.json", 3, 4, true},
                         Run{"2026-11-30-h200x2/call8/big_s3.json", "llama2-7b.json", 3, 2, true},
                         // call11: stages 0-3 beside their peers; call14: stages 2-3 with the gradient partition over
                         // the MLP tensors, and the README's headline plan on two GPUs
                         Run{"2026-11-30-h200x2/call11/speed_s0.json", "tinyllama-1.1b.json", 0, 4},
                         Run{"2026-11-30-h200x2/call11/speed_s1.json", "tinyllama-1.1b.json", 1, 4},
                         Run{"2026-11-30-h200x2/call11/speed_s2.json", "tinyllama-1.1b.json", 2, 4},
                         Run{"2026-11-30-h200x2/call11/speed_s3.json", "tinyllama-1.1b.json", 3, 4},
                         Run{"2026-11-30-h200x2/call14/speed_s2.json", "tinyllama-1.1b.json", 2, 4},
                         Run{"2026-11-30-h200x2/call14/speed_s3.json", "tinyllama-1.1b.json", 3, 4},
                         Run{"2026-11-30-h200x2/call14/big_s3.json", "llama2-7b.json", 3, 2},
                         Run{"2026-11-30-h200x2/call14/headline/headline_run.json", "llama2-13b", 3, 2, false, 4096},
                         // call19: stage 3 with the kept units filling the prefetch bucket (core/zero3_fetch_plan.h)
                         Run{"2026-11-30-h200x2/call19/tl_s3.json", "tinyllama-1.1b.json", 3, 4},
                         Run{"2026-11-30-h200x2/call19/l7_s3.json", "llama2-7b.json", 3, 2},
                         Run{"2026-11-30-h200x2/call19/l7_s3_sel.json", "llama2-7b.json", 3, 2, false, 2048,
                             Checkpointing::selective},
                         Run{"2026-11-30-h200x2/call19/headline/headline_run.json", "llama2-13b", 3, 2, false, 4096},
                         // call21: stage 2 with DeepSpeed's default 5e8-element reduce buckets and with 5e7, stage 3
                         Run{"2026-11-30-h200x2/call21/tl_s2.json", "tinyllama-1.1b.json", 2, 4},
                         Run{"2026-11-30-h200x2/call21/tl_s2_b5e7.json", "tinyllama-1.1b.json", 2, 4, false, 2048,
                             Checkpointing::none, "bench/llama/stage2_reduce_bucket_5e7.json"},
                         Run{"2026-11-30-h200x2/call21/tl_s3.json", "tinyllama-1.1b.json", 3, 4}}) {
    SCOPED_TRACE(run.report);
    std::printf("two H200, Llama: %s\n", run.report);
    const std::filesystem::path folder = data_directory() / "bench" / "llama" / "results";
    const nlohmann::json m = read_json_file(folder / run.report).at("measured");
    ASSERT_EQ(m.at("stage").get<int>(), run.stage);
    ASSERT_EQ(m.at("world_size").get<int>(), 2);
    PlanInputs inputs;
    const std::filesystem::path config = data_directory() / "bench" / "llama" / "configs" / run.model;
    inputs.model = std::filesystem::exists(config) ? config.string() : std::string(run.model);
    inputs.cluster = (data_directory() / "configs" / "clusters" / "h200x2.json").string();
    inputs.gpus = 2;
    inputs.micro_batch = run.micro_batch;
    inputs.seq = run.seq;
    inputs.precision = Precision::bf16;
    inputs.stage = run.stage;
    inputs.checkpointing = run.checkpointing;
    if (*run.ds_config) inputs.ds_config = (data_directory() / run.ds_config).string();
    const Planned p =
        plan_as_run(inputs, false, std::nullopt, m.value("attention_kernel", std::string()) == "cudnn_fused");
    expect_memory_within(p, m, false, run.copy_engine_gathers);
    expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, kStepTolerance, "step ms");
    expect_comm_bytes_equal(p, m);
  }
}

// Four H200, 2026-11-28 (bench/exec/results/2026-11-28-four-gpu-h200/, its README gives the three calls), planned on
// the h200x4 description `zeroplan calibrate` wrote in the first of them: GPT-2 1.5B, micro-batch 8, seq 1024, bf16
// at stages 0-3 and with the optimizer (and the parameters) on the CPU on 4 ranks, the same model's stages on 1 and
// 2 of those GPUs (the scaling rows), and the README's headline plan, Llama-2 13B at micro-batch 2 x 4096, stage 3:
// each memory component within 3%, the device total within 5%, the step within 10%, the bytes of each collective
// kind equal; with offload the host's pinned states and resident peak too.
TEST(ExecutorMeasurements, FourH200RunsWithinTolerances) {
  struct Run {
    const char* report;
    int gpus;
    int stage;
    bool offload_optimizer;
    bool offload_param;
  };
  for (const Run& run : {Run{"call2/run_s0.json", 4, 0, false, false}, Run{"call2/run_s1.json", 4, 1, false, false},
                         Run{"call2/run_s2.json", 4, 2, false, false}, Run{"call2/run_s3.json", 4, 3, false, false},
                         Run{"call1/off_s2optimizercpu.json", 4, 2, true, false},
                         Run{"call1/off_s3optimizercpu.json", 4, 3, true, false},
                         Run{"call1/off_s3optimizercpuparamcpu.json", 4, 3, true, true},
                         Run{"call3/scale_1gpu_s0.json", 1, 0, false, false},
                         Run{"call3/scale_1gpu_s3.json", 1, 3, false, false},
                         Run{"call3/scale_2gpu_s0.json", 2, 0, false, false},
                         Run{"call3/scale_2gpu_s1.json", 2, 1, false, false},
                         Run{"call3/scale_2gpu_s2.json", 2, 2, false, false},
                         Run{"call3/scale_2gpu_s3.json", 2, 3, false, false}}) {
    SCOPED_TRACE(run.report);
    std::printf("four H200: %s\n", run.report);
    const nlohmann::json m = read_json_file(results("2026-11-28-four-gpu-h200") / run.report).at("measured");
    ASSERT_EQ(m.at("stage").get<int>(), run.stage);
    ASSERT_EQ(m.at("world_size").get<int>(), run.gpus);
    const Planned p = plan_like_the_run("h200x4.json", run.stage, run.offload_optimizer, run.gpus, run.offload_param);
    expect_memory_within(p, m, run.offload_optimizer);
    expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, kStepTolerance, "step ms");
    expect_comm_bytes_equal(p, m);
  }
  std::printf("four H200: call1/headline_s3.json (llama2-13b)\n");
  const nlohmann::json m =
      read_json_file(results("2026-11-28-four-gpu-h200") / "call1" / "headline_s3.json").at("measured");
  ASSERT_EQ(m.at("world_size").get<int>(), 4);
  PlanInputs inputs;
  inputs.model = "llama2-13b";
  inputs.cluster = (data_directory() / "configs" / "clusters" / "h200x4.json").string();
  inputs.gpus = 4;
  inputs.micro_batch = 2;
  inputs.seq = 4096;
  inputs.precision = Precision::bf16;
  inputs.stage = 3;
  const Planned p = plan_as_run(inputs);
  expect_memory_within(p, m, false);
  expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, kStepTolerance, "step ms");
  expect_comm_bytes_equal(p, m);
}

// LoRA and QLoRA on the executor (issue 38; bench/lora/results/2026-11-29-h200x1/ and -h200x2/, their READMEs give
// the commands): r 16, alpha 32 on q/k/v/o, bf16, stage 0, TinyLlama 1.1B at micro-batch 4 x 1024 and Llama-2 7B at
// 2 x 1024, on one H200 (the calls whose LoRA and NF4 kernels are today's: call4's TinyLlama QLoRA ran the NF4
// dequantisation before 07847d1 and is left out) and on two. Each memory component within 3%, the device total
// within 5%, the step within 10%, the bytes of each collective kind exactly.
TEST(ExecutorMeasurements, LoraRunsWithinTolerances) {
  struct Run {
    const char* report;
    const char* model;
    int micro_batch;
    const char* quantize_base;
  };
  const std::filesystem::path lora = data_directory() / "bench" / "lora" / "results";
  for (const Run& run : {Run{"2026-11-29-h200x1/call4/ours_tl_lora.json", "tinyllama-1.1b.json", 4, "none"},
                         Run{"2026-11-29-h200x1/call5/ours_l7_lora.json", "llama2-7b.json", 2, "none"},
                         Run{"2026-11-29-h200x1/call7/ours_l7_qlora.json", "llama2-7b.json", 2, "nf4"},
                         Run{"2026-11-29-h200x2/ours_tl_lora.json", "tinyllama-1.1b.json", 4, "none"},
                         Run{"2026-11-29-h200x2/ours_tl_qlora.json", "tinyllama-1.1b.json", 4, "nf4"},
                         Run{"2026-11-29-h200x2/ours_l7_lora.json", "llama2-7b.json", 2, "none"},
                         Run{"2026-11-29-h200x2/ours_l7_qlora.json", "llama2-7b.json", 2, "nf4"}}) {
    SCOPED_TRACE(run.report);
    std::printf("LoRA: %s\n", run.report);
    const nlohmann::json doc = read_json_file(lora / run.report);
    const nlohmann::json& m = doc.at("measured");
    const int gpus = m.at("world_size").get<int>();
    ASSERT_EQ(m.at("stage").get<int>(), 0);
    ASSERT_EQ(doc.at("lora").at("quantize_base").get<std::string>(), run.quantize_base);
    PlanInputs inputs;
    inputs.model = (data_directory() / "bench" / "llama" / "configs" / run.model).string();
    inputs.cluster = (data_directory() / "configs" / "clusters" / (gpus == 1 ? "h200x1.json" : "h200x2.json")).string();
    inputs.gpus = gpus;
    inputs.micro_batch = run.micro_batch;
    inputs.seq = 1024;
    inputs.precision = Precision::bf16;
    inputs.stage = 0;
    LoraInputs adapters;
    adapters.rank = 16;
    adapters.alpha = 32.0;
    adapters.targets = "q_proj,k_proj,v_proj,o_proj";
    adapters.quantize_base = run.quantize_base;
    const Planned p = plan_as_run(inputs, false, std::nullopt, m.contains("attention_kernel"), adapters);
    expect_memory_within(p, m, false);
    expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, kStepTolerance, "step ms");
    expect_comm_bytes_equal(p, m);
  }
}

// ResNet-101, fp16, micro-batch 128 per GPU, 32x32 images on two H200 at stages 0, 2, 3 and 3 with the optimizer on
// the CPU (each folder's README gives the commands): 2026-11-29 call15 and call16 (two machines; each layer's tensors
// placed largest first) and 2026-11-30 call25 (the prefetch of a layer list at most two units ahead,
// exec/zero/zero_buffer_layout.cpp). Held: each memory component within 3%, the device total within 5%, the host's
// pinned states within 3% and the ranks' resident peaks (VmHWM) within 5%, the bytes of each collective kind exactly
// (at stage 3 the persistent BatchNorm tensors and small convolutions are not gathered with their units), and the
// step within 10% at issue 37's rows: stages 0 and 2, and stage 3 with the optimizer on the CPU where the executor
// spreads its prefetch (call25: -5.5%). Printed, not held: stage 3 with the optimizer on the CPU before that
// (-17..-22%: the burst of all-gathers held the compute lane, bench/resnet/results/2026-11-30-h200x2/call21);
// stage 3 without offload (-11..-22%: its per-layer reduce-scatter groups beside the small kernels cost the backward
// more than the planner charges, call21's traces); and the node's host memory at its peak, which counts cuDNN's
// library pages once where each rank's VmHWM counts them (+12..+24%).
TEST(ExecutorMeasurements, TwoH200ResNet101MemoryAndCommunication) {
  struct Call {
    const char* date;
    const char* call;
    bool spread_prefetch;  // the executor of 4ae0def on: stage 3 with the optimizer on the CPU held
    bool stage3_only;      // call26: stage 3 again after the 2026-11-30 layout (Planned::layout_changed)
  };
  int offload_steps_held = 0;
  for (const Call& c : {Call{"2026-11-29-h200x2", "call15", false, false},
                        Call{"2026-11-29-h200x2", "call16", false, false},
                        Call{"2026-11-30-h200x2", "call25", true, false}, Call{"2026-11-30-h200x2", "call26", true, true}})
  for (const StoredRun& run : {StoredRun{"ours_s0.json", 0, false}, StoredRun{"ours_s2.json", 2, false},
                               StoredRun{"ours_s3.json", 3, false}, StoredRun{"ours_s3o.json", 3, true}}) {
    if (c.stage3_only && run.stage < 3) continue;
    const char* call = c.call;
    const std::filesystem::path folder = data_directory() / "bench" / "resnet" / "results" / c.date / call;
    SCOPED_TRACE(std::string(call) + "/" + run.report);
    std::printf("ResNet-101: %s/%s\n", call, run.report);
    const nlohmann::json m = read_json_file(folder / run.report).at("measured");
    ASSERT_EQ(m.at("stage").get<int>(), run.stage);
    ASSERT_EQ(m.at("world_size").get<int>(), 2);
    PlanInputs inputs;
    inputs.model = "resnet101";
    inputs.cluster = (data_directory() / "configs" / "clusters" / "h200x2.json").string();
    inputs.gpus = 2;
    inputs.micro_batch = 128;
    inputs.precision = Precision::fp16;
    inputs.stage = run.stage;
    inputs.offload_optimizer = run.offload ? OffloadDevice::cpu : OffloadDevice::none;
    const Planned p = plan_as_run(inputs);
    expect_memory_within(p, m, false);
    const HostMemoryBreakdown& h = p.plan.memory.host;
    if (run.offload) {
      std::int64_t host = 0;
      for (const auto& [tag, b] : m.at("host_bytes").items()) host += b.get<std::int64_t>();
      expect_within(h.pinned, host * 2.0, kComponentTolerance, "host pinned");
    }
    double resident = 0;
    for (const nlohmann::json& rank : m.at("ranks")) resident += rank.at("host_resident_peak_bytes").get<double>();
    expect_within(h.total, resident, kTotalTolerance, "host resident");
    const double node = m.at("host_node_used_peak_bytes").get<double>();
    std::printf("  node host: predicted %.3f GiB, measured %.3f GiB (%+.1f%%, not held)\n", h.total / 1073741824.0,
                node / 1073741824.0, 100.0 * (h.total / node - 1.0));
    const bool offload_held = run.stage == 3 && run.offload && c.spread_prefetch;
    if (run.stage < 3 || offload_held) {
      expect_within(p.step.step_seconds * 1e3, m.at("step_seconds").get<double>() * 1e3, kStepTolerance, "step ms");
      offload_steps_held += offload_held;
    } else {
      std::printf("  step: predicted %.1f ms, measured %.1f ms (not held)\n", p.step.step_seconds * 1e3,
                  m.at("step_seconds").get<double>() * 1e3);
    }
    expect_comm_bytes_equal(p, m);
  }
  EXPECT_EQ(offload_steps_held, 2);
}

}  // namespace
}  // namespace zeroplan
