// LoRA and QLoRA plans (sim/lora_model.h): PEFT's trainable-parameter line against published outputs, the NF4 and
// int8 bytes against the published storage formats worked by hand, and which of base and adapters each ZeRO stage
// partitions.
#include <gtest/gtest.h>

#include <string>

#include "core/lora_modules.h"
#include "core/model_description.h"
#include "sim/comm_model.h"
#include "sim/lora_model.h"
#include "sim/memory_model.h"
#include "sim/simulator.h"
#include "sim_test_fixtures.h"

namespace zeroplan {
namespace {

ModelDescription llama2_7b() { return expand_transformer("llama2-7b", testing::llama2_7b_shape(), "test"); }

TrainingConfig lora_training(const ModelDescription& model, const std::string& targets, std::int64_t rank,
                             const std::string& quantize = "none") {
  TrainingConfig training;
  training.micro_batch = 1;
  training.seq_len = 1024;
  LoraInputs inputs;
  inputs.rank = rank;
  inputs.targets = targets;
  inputs.quantize_base = quantize;
  resolve_lora(inputs, model, training);
  return training;
}

// Llama-2-7b (meta-llama/Llama-2-7b-hf config: 6,738,415,616 parameters) with PEFT's defaults r=8 on q_proj and
// v_proj, as PEFT prints it. Published in many PEFT walkthroughs that call print_trainable_parameters() on this model
// (found in the stored index by the string "all params: 6,742,609,920", e.g. a LoRA tutorial's
// "trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622"), and by hand:
// 32 layers * 2 modules * 8 * (4096 + 4096) = 4,194,304.
TEST(LoraModel, PeftLineLlama2DefaultTargets) {
  const ModelDescription model = llama2_7b();
  ASSERT_EQ(model.params(), 6'738'415'616);
  TrainingConfig training;
  LoraInputs inputs;
  inputs.rank = 8;  // targets not given: PEFT's default for llama
  resolve_lora(inputs, model, training);
  ASSERT_EQ(training.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(peft_trainable_parameters_line(lora_figures(model, training)),
            "trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622");
}

// r=16 on every linear layer of Llama-2-7b: published as "trainable params: 39,976,960 || all params: 6,778,392,576
// || trainable%: 0.5898" (a QLoRA lesson's print_trainable_parameters() output for a 7B Llama with
// target_modules="all-linear", found in the stored index by "trainable params: 39,976,960"). By hand: 32 * 16 *
// (4 * (4096 + 4096) + 2 * (4096 + 11008) + (11008 + 4096)) = 39,976,960. With the base in NF4 PEFT counts each
// Params4bit as numel * 2 (peft_model.py get_nb_trainable_parameters), so "all params" is the same.
TEST(LoraModel, PeftLineLlama2AllLinearRank16LoraAndQlora) {
  const ModelDescription model = llama2_7b();
  const std::string expected = "trainable params: 39,976,960 || all params: 6,778,392,576 || trainable%: 0.5898";
  EXPECT_EQ(peft_trainable_parameters_line(lora_figures(model, lora_training(model, "all-linear", 16))), expected);
  const std::string every = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
  EXPECT_EQ(peft_trainable_parameters_line(lora_figures(model, lora_training(model, every, 16))), expected);
  EXPECT_EQ(peft_trainable_parameters_line(lora_figures(model, lora_training(model, "all-linear", 16, "nf4"))),
            expected);
}

// GPT-2 (openai-community/gpt2, 124,439,808 parameters), r=8 on c_attn (PEFT's default for gpt2): published as
// "trainable params: 294,912 || all params: 124,734,720 || trainable%: 0.2364" (a LoRA tutorial's
// print_trainable_parameters() output, found in the stored index by "all params: 124,734,720"); by hand
// 12 * 8 * (768 + 2304) = 294,912.
TEST(LoraModel, PeftLineGpt2CAttn) {
  const ModelDescription model = testing::gpt2_small();
  ASSERT_EQ(model.params(), 124'439'808);
  EXPECT_EQ(peft_trainable_parameters_line(lora_figures(model, lora_training(model, "c_attn", 8))),
            "trainable params: 294,912 || all params: 124,734,720 || trainable%: 0.2364");
  // PEFT's suffix match: c_proj is both attn.c_proj (768 -> 768) and mlp.c_proj (3072 -> 768).
  EXPECT_EQ(lora_figures(model, lora_training(model, "c_proj", 8)).trainable_params,
            12 * 8 * ((768 + 768) + (3072 + 768)));
  EXPECT_EQ(lora_figures(model, lora_training(model, "mlp.c_proj", 8)).trainable_params, 12 * 8 * (3072 + 768));
}

// One 4096 x 4096 weight in bitsandbytes' NF4 with double quantisation (QLoRA sec. 3; functional.py quantize_4bit):
// blocks of 64 values each hold 32 bytes of packed 4-bit codes and one 8-bit absmax; every 256 blocks one fp32
// absmax of the second level; one fp32 offset for the tensor. 16,777,216 values = 262,144 blocks:
// 262,144 * (32 + 1) + 4 * 262,144 / 256 + 4 = 8,650,752 + 4,096 + 4 = 8,654,852 bytes.
TEST(LoraModel, Nf4BytesOfOneLayerByHand) {
  EXPECT_EQ(nf4_double_quant_bytes(4096LL * 4096), 8'654'852);
  EXPECT_EQ(nf4_constant_bytes(4096LL * 4096), 262'144 + 4'096 + 4);
  // 4096 x 11008 (gate/up_proj): 45,088,768 values = 704,512 blocks, 2,752 second-level blocks.
  EXPECT_EQ(nf4_double_quant_bytes(4096LL * 11008), 704'512LL * 33 + 2'752LL * 4 + 4);
  // LLM.int8: one byte a value and an fp32 scale per output row (Int8Params SCB).
  EXPECT_EQ(int8_weight_bytes(4096LL * 11008, 11008), 45'088'768LL + 4 * 11008);
}

// The whole Llama-2-7b base in NF4 on one GPU at stage 0: every block linear quantised, the rest 16-bit.
TEST(LoraModel, QloraBaseBytesLlama2) {
  const ModelDescription model = llama2_7b();
  const TrainingConfig training = lora_training(model, "q_proj,v_proj", 8, "nf4");
  const LoraFigures f = lora_figures(model, training);
  const std::int64_t per_block_linear = 4 * 4096LL * 4096 + 3 * 4096LL * 11008;  // 202,375,168
  EXPECT_EQ(f.quantized_elements, 32 * per_block_linear);
  const LoraBaseBytes base = lora_base_bytes(f, training, 0, 1, false, 1024);
  // Unquantised: embeddings and head (2 * 32000 * 4096), 65 RMSNorm weights of 4096, in bf16.
  EXPECT_EQ(base.unquantized, 2 * (2 * 32000LL * 4096 + 65 * 4096LL));
  EXPECT_EQ(base.codes, 32 * (4 * 4096LL * 4096 + 3 * 4096LL * 11008) / 2);
  EXPECT_EQ(base.constants, 32 * (4 * (262'144LL + 4'096 + 4) + 3 * (704'512LL + 2'752 * 4 + 4)));
  EXPECT_EQ(base.dequantized_weight, 2 * 4096LL * 11008);
  // x*A saved for each adapted module: 1024 tokens * (8 + 8) * 2 bytes * 32 blocks.
  EXPECT_EQ(base.adapter_activations, 1024LL * 16 * 2 * 32);
}

// Stages 1-2 partition what the optimizer holds (the adapters' master, states, and at stage 2 their gradients);
// the frozen base stays whole on every GPU. Stage 3 partitions the base too. 4 GPUs, Llama-2-7b LoRA r=8 q,v.
TEST(LoraModel, StagesPartitionAdaptersAndBaseAsDeepSpeedDoes) {
  const ModelDescription model = llama2_7b();
  const TrainingConfig training = lora_training(model, "q_proj,v_proj", 8);
  const ClusterDescription cluster = with_gpu_count(load_cluster(kDefaultClusterName), 4);
  const std::int64_t adapters = 4'194'304;
  const std::int64_t base = 6'738'415'616;
  for (int stage : {1, 2}) {
    const MemoryEstimate m = estimate_memory(model, cluster, training, PlanChoice{stage});
    EXPECT_EQ(m.gpu.master_params, 4 * (adapters / 4)) << "stage " << stage;
    // The 16-bit adapters and the whole frozen base.
    EXPECT_EQ(m.gpu.params, 2 * adapters + 2 * base) << "stage " << stage;
  }
  const MemoryEstimate s3 = estimate_memory(model, cluster, training, PlanChoice{3});
  EXPECT_EQ(s3.gpu.master_params, 4 * (adapters / 4));
  EXPECT_EQ(s3.gpu.params, 2 * (adapters / 4) + 2 * (base / 4));
  // Full fine-tuning holds the 7B model's fp32 master partition: LoRA's is three orders of magnitude smaller.
  TrainingConfig full;
  full.seq_len = 1024;
  EXPECT_EQ(estimate_memory(model, cluster, full, PlanChoice{2}).gpu.master_params, 4 * ((base + 3) / 4));
}

// QLoRA at stage 3: the codes partitioned, the constants whole on every GPU.
TEST(LoraModel, QloraStage3PartitionsCodesNotConstants) {
  const ModelDescription model = llama2_7b();
  const TrainingConfig training = lora_training(model, "q_proj,v_proj", 8, "nf4");
  const LoraFigures f = lora_figures(model, training);
  const LoraBaseBytes s2 = lora_base_bytes(f, training, 2, 4, false, 1024);
  const LoraBaseBytes s3 = lora_base_bytes(f, training, 3, 4, false, 1024);
  EXPECT_EQ(s2.codes, f.quantized_code_bytes);
  EXPECT_EQ(s3.codes, (f.quantized_code_bytes + 3) / 4);
  EXPECT_EQ(s3.unquantized, (s2.unquantized + 3) / 4);
  EXPECT_EQ(s3.constants, s2.constants);
}

// --explain shows the LoRA terms with formula and source.
TEST(LoraModel, ExplainShowsBaseAndQuantisationTerms) {
  const ModelDescription model = llama2_7b();
  const TrainingConfig training = lora_training(model, "q_proj,v_proj", 8, "nf4");
  const MemoryEstimate m = explain_memory(model, load_cluster(kDefaultClusterName), training, PlanChoice{0});
  bool codes = false, constants = false, activations = false;
  for (const MemoryTerm& term : m.terms) {
    if (term.name.find("NF4 codes") != std::string::npos) {
      codes = true;
      EXPECT_NE(term.source.find("quantize_4bit"), std::string::npos);
      EXPECT_FALSE(term.formula.empty());
    }
    if (term.name.find("NF4 constants") != std::string::npos) constants = true;
    if (term.name.find("x*A") != std::string::npos) activations = true;
  }
  EXPECT_TRUE(codes && constants && activations);
}

// Stages 0-2 reduce only the adapters' gradients; stage 3 still all-gathers the frozen base.
TEST(LoraModel, CommunicationReducesAdapterGradientsOnly) {
  const ModelDescription model = llama2_7b();
  const TrainingConfig training = lora_training(model, "q_proj,v_proj", 8);
  const ClusterDescription cluster = with_gpu_count(load_cluster(kDefaultClusterName), 2);
  const CommVolume s2 = estimate_comm(model, cluster, training, PlanChoice{2});
  std::int64_t reduced = 0;
  for (const auto& c : s2.collectives)
    if (c.when.find("gradients") != std::string::npos) reduced += c.elements;
  EXPECT_EQ(reduced, 4'194'304);
  const CommVolume s3 = estimate_comm(model, cluster, training, PlanChoice{3});
  std::int64_t gathered = 0;
  for (const auto& c : s3.collectives)
    if (c.when.find("parameters") != std::string::npos) gathered += c.elements;
  EXPECT_GT(gathered, 6'000'000'000);
}

// The step: no weight gradients for the frozen base makes a LoRA step shorter than full fine-tuning's on the
// same shape; QLoRA's dequantisation passes make it longer than LoRA's, by at least their streaming time.
TEST(LoraModel, StepTimesLoraBelowFullAndQloraAddsDequantisation) {
  const ModelDescription model = llama2_7b();
  const ClusterDescription cluster = load_cluster(kDefaultClusterName);
  TrainingConfig full;
  full.seq_len = 1024;
  const TrainingConfig lora = lora_training(model, "q_proj,v_proj", 8);
  const TrainingConfig qlora = lora_training(model, "q_proj,v_proj", 8, "nf4");
  const StepSimulation full_step = simulate_step(model, cluster, full, PlanChoice{0});
  const StepSimulation lora_step = simulate_step(model, cluster, lora, PlanChoice{0});
  const StepSimulation qlora_step = simulate_step(model, cluster, qlora, PlanChoice{0});
  EXPECT_LT(lora_step.step_seconds, 0.8 * full_step.step_seconds);
  EXPECT_LT(lora_step.compute_seconds, 0.8 * full_step.compute_seconds);
  const double dequant = lora_dequantization_seconds(model, cluster, qlora);
  // Two passes (forward, backward) over 6.48e9 weights, each reading ~0.52 B (codes and constants) and writing 2 B:
  // about 32.6 GB, some 8 ms at a few TB/s.
  EXPECT_GT(dequant, 32.6e9 / 5e12);
  EXPECT_LT(dequant, 32.6e9 / 1e12);
  // On the GPU's compute lane the passes add to LoRA's work (the step itself may hide them behind the host's
  // per-module Python, which PEFT's extra modules lengthen).
  EXPECT_NEAR(qlora_step.compute_seconds, lora_step.compute_seconds + dequant, 1e-3 * lora_step.compute_seconds);
}

// Stage 3 gathers a QLoRA base's codes: a block's gathered bytes per element are its NF4 codes' (half a byte for the
// quantised linears) against 2 for bf16, so the all-gathers carry about a quarter of a 16-bit LoRA's.
TEST(LoraModel, QloraStage3GathersCodes) {
  const ModelDescription model = llama2_7b();
  const TrainingConfig lora = lora_training(model, "q_proj,v_proj", 8);
  const TrainingConfig qlora = lora_training(model, "q_proj,v_proj", 8, "nf4");
  const std::vector<double> factors = lora_gather_bytes_per_element(model, qlora);
  ASSERT_EQ(factors.size(), model.layers.size());
  EXPECT_EQ(factors.front(), 2.0);  // the embedding stays bf16
  // A block: 202,375,168 linear weights at 0.5 B, the 2 RMSNorm weights persistent (not gathered).
  EXPECT_DOUBLE_EQ(factors[1], 0.5);
  EXPECT_TRUE(lora_gather_bytes_per_element(model, lora).empty());
  const ClusterDescription cluster = with_gpu_count(load_cluster(kDefaultClusterName), 2);
  const auto gathered = [&](const TrainingConfig& training) {
    std::int64_t elements = 0;
    for (const auto& c : estimate_comm(model, cluster, training, PlanChoice{3}).collectives)
      if (c.kind == CollectiveKind::all_gather) elements += c.elements;
    return static_cast<double>(elements);
  };
  // Blocks at a quarter, the embedding and the head (2 * 131,072,000 of 6.74e9) at full size.
  EXPECT_NEAR(gathered(qlora) / gathered(lora), 0.25 + 0.75 * 2 * 131'072'000.0 / 6'738'415'616.0, 0.01);
  EXPECT_LT(estimate_memory(model, cluster, qlora, PlanChoice{3}).gpu.gathered_params,
            estimate_memory(model, cluster, lora, PlanChoice{3}).gpu.gathered_params / 2);
}

}  // namespace
}  // namespace zeroplan
