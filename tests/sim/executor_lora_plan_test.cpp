// LoRA and QLoRA plans of zeroplan's own engine (`--engine zeroplan`): every memory component of the plan is what the
// CUDA trainer allocates, as its own list has it (exec/activation_accounting.h device_allocations, which
// tests/exec/lora_cuda_test.cu holds to the allocator and tests/exec/zero_engine_allocations_test.cpp to both
// engines on the CPU backend). The list is summed here from an ExecConfig built as `zeroplan run` builds it
// (the adapted modules by their paths, the NF4 switch), at stages 0-3, on 1 and 2 ranks, with and without an NF4
// base, for a GPT-2 and a Llama shape.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/lora_modules.h"
#include "core/model_description.h"
#include "exec/activation_accounting.h"
#include "sim/executor_layout.h"
#include "sim/memory_model.h"
#include "sim/plan_choice.h"
#include "sim/simulator.h"
#include "sim_test_fixtures.h"

namespace zeroplan {
namespace {

ModelDescription small_llama() {
  TransformerShape s = testing::llama2_7b_shape();
  s.hidden = 512;
  s.layers = 4;
  s.heads = 8;
  s.kv_heads = 4;
  s.ffn_hidden = 1376;
  return expand_transformer("llama-small", s, "test");
}

TrainingConfig lora_training(const ModelDescription& model, const std::string& targets, const std::string& quantize) {
  TrainingConfig training;
  training.engine = TrainingEngine::zeroplan;
  training.micro_batch = 2;
  training.seq_len = 256;
  training.grad_accum = 2;
  LoraInputs inputs;
  inputs.rank = 8;
  inputs.targets = targets;
  inputs.quantize_base = quantize;
  resolve_lora(inputs, model, training);
  return training;
}

// The executor's configuration as run/training_run.cpp builds it for a LoRA run, independent of the planner's
// executor_exec_config: the shape, batch, precision, ZeRO settings, and LoRA's modules by their paths.
exec::ExecConfig run_config(const ModelDescription& model, const TrainingConfig& given, int stage) {
  const TrainingConfig training = apply_choice(given, PlanChoice{stage});
  exec::ExecConfig c;
  c.shape = executor_shape(model);
  c.micro_batch = training.micro_batch;
  c.seq_len = training.seq_len;
  c.grad_accum = training.grad_accum;
  c.precision = exec::ExecPrecision::bf16;
  c.zero = executor_zero_settings(training, stage);
  c.lora.enabled = true;
  c.lora.rank = training.lora.rank;
  c.lora.alpha = training.lora.alpha;
  c.lora.targets = training.lora.targets;
  for (const BlockLinear& m : adapted_modules(model, training.lora.targets)) c.lora.modules.push_back(m.path);
  c.lora.quantize_nf4 = training.lora.quantize_base == BaseQuantization::nf4;
  return c;
}

TEST(ExecutorLoraPlan, EveryComponentIsTheExecutorsAllocations) {
  const ClusterDescription h200 = load_cluster(kDefaultClusterName);
  for (const ModelDescription& model : {testing::gpt2_small(), small_llama()})
    for (const char* quantize : {"none", "nf4"})
      for (int world : {1, 2})
        for (int stage = 0; stage <= 3; ++stage) {
          const std::string targets = model.transformer->family == ModelFamily::gpt2 ? "c_attn,c_proj" : "all-linear";
          const TrainingConfig training = lora_training(model, targets, quantize);
          SCOPED_TRACE(model.name + ", " + quantize + ", " + std::to_string(world) + " ranks, stage " +
                       std::to_string(stage));
          const MemoryEstimate plan =
              estimate_memory(model, with_gpu_count(h200, world), training, PlanChoice{stage});
          std::map<std::string, std::int64_t> allocated;
          for (const exec::DeviceAllocation& a : exec::device_allocations(run_config(model, training, stage), world))
            allocated[a.component] += a.bytes;
          // Every component the executor's list names is the plan's, and the plan has nothing the list has not.
          for (const auto& [component, bytes] : plan.gpu.components()) {
            if (component == "runtime_overhead") continue;
            EXPECT_EQ(bytes, allocated[component]) << component;
          }
          // Its workspace is the runtime's: at least the allocations tagged workspace (cuBLASLt's and both engines'
          // gradient-norm buffers), beside the page round-up.
          EXPECT_GE(plan.gpu.runtime_overhead, allocated["workspace"]);
          // What the two engines hold, as DeepSpeed 0.19.8 treats frozen parameters: the adapters alone have
          // gradients, a master and moments; the frozen base adds only parameters.
          EXPECT_GT(plan.gpu.grads, 0);
          EXPECT_LT(plan.gpu.optimizer_states, plan.gpu.params);
        }
}

// --explain names each allocation by its engine: the frozen base's, the adapters' and LoRA's own buffers.
TEST(ExecutorLoraPlan, ExplainNamesBothEnginesAndLorasBuffers) {
  const ModelDescription model = small_llama();
  const MemoryEstimate plan = explain_memory(model, with_gpu_count(load_cluster(kDefaultClusterName), 2),
                                             lora_training(model, "q_proj,v_proj", "nf4"), PlanChoice{3});
  std::map<std::string, std::string> component_of;
  for (const MemoryTerm& term : plan.terms) component_of[term.name] = term.component;
  EXPECT_EQ(component_of["frozen base (unquantised tensors): parameter partition"], "params");
  EXPECT_EQ(component_of["frozen base: NF4 codes and constants"], "params");
  EXPECT_EQ(component_of["frozen base: dequantised scratch weight"], "params");
  EXPECT_EQ(component_of["frozen base (unquantised tensors): gathered-parameter arena"], "gathered_params");
  EXPECT_EQ(component_of["adapters: gradient partition"], "grads");
  EXPECT_EQ(component_of["adapters: fp32 master weights"], "master_params");
  EXPECT_EQ(component_of["adapters: AdamW momentum"], "optimizer_states");
  EXPECT_EQ(component_of["adapters: gradient bucket buffer"], "gradient_buckets");
  EXPECT_EQ(component_of["LoRA x A^T"], "activations");
  EXPECT_EQ(component_of["frozen base: gradients"], "");  // a frozen engine has none
}

// The step time comes from the simulator with LoRA's compute (sim/lora_model.h apply_lora_to_layer_compute): the
// frozen weights' gradient GEMMs are not run, and an NF4 base adds its dequantisation before every base GEMM.
TEST(ExecutorLoraPlan, StepTimeDropsFrozenGradientsAndAddsDequantisation) {
  const ModelDescription model = small_llama();
  const ClusterDescription cluster = with_gpu_count(load_cluster(kDefaultClusterName), 1);
  TrainingConfig full;
  full.engine = TrainingEngine::zeroplan;
  full.micro_batch = 2;
  full.seq_len = 256;
  full.grad_accum = 2;
  const double full_s = simulate_step(model, cluster, full, PlanChoice{0}).step_seconds;
  const double lora_s = simulate_step(model, cluster, lora_training(model, "q_proj,v_proj", "none"), PlanChoice{0}).step_seconds;
  const double qlora_s = simulate_step(model, cluster, lora_training(model, "q_proj,v_proj", "nf4"), PlanChoice{0}).step_seconds;
  EXPECT_LT(lora_s, full_s);
  EXPECT_GT(qlora_s, lora_s);
}

}  // namespace
}  // namespace zeroplan
