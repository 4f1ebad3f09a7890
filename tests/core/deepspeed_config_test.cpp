// core/deepspeed_config and core/training_config: DeepSpeed configs as users write them (comments, "auto"
// resolved as the HF integration does, each resolution noted), the batch-size rule, contradictions, unknown keys,
// and the config written back for a plan.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/data_paths.h"
#include "core/deepspeed_config.h"
#include "core/input_error.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "tests/core/input_error_expectations.h"

namespace zeroplan {
namespace {

const std::string kData = ZEROPLAN_TEST_DATA_DIR;

std::filesystem::path example(const std::string& name) {
  return data_directory() / "configs" / "deepspeed" / name;
}

TEST(DeepSpeedConfig, HfZero2AutoResolvesFromTrainingAndModel) {
  const ModelDescription model = load_model("gpt2-124m");  // hidden 768
  TrainingConfig training;
  training.micro_batch = 8;
  training.grad_accum = 2;
  training.precision = Precision::bf16;
  training.learning_rate = 6e-4;
  apply_deepspeed_config(example("zero2_hf_auto.json"), model, 4, training);
  EXPECT_EQ(training.micro_batch, 8);
  EXPECT_EQ(training.grad_accum, 2);
  EXPECT_EQ(training.precision, Precision::bf16);  // fp16 auto -> false, bf16 auto -> true
  EXPECT_EQ(training.zero.stage, 2);
  EXPECT_EQ(training.zero.offload_optimizer, OffloadDevice::cpu);
  EXPECT_EQ(training.zero.reduce_bucket_size, 768 * 768);
  EXPECT_EQ(training.zero.allgather_bucket_size, 200'000'000);  // 2e8 written as a float
  EXPECT_DOUBLE_EQ(training.learning_rate, 6e-4);
  EXPECT_TRUE(training.zero.overlap_comm);
  EXPECT_TRUE(any_contains(training.notes, "reduce_bucket_size auto -> hidden^2 = 589,824"));
  EXPECT_TRUE(any_contains(training.notes, "train_batch_size auto -> 8 * 2 * 4 GPUs = 64"));
  EXPECT_TRUE(any_contains(training.notes, "bf16.enabled auto -> true"));
  EXPECT_TRUE(training.warnings.empty()) << training.warnings.front();
}

TEST(DeepSpeedConfig, HfZero3AutoBucketRules) {
  const ModelDescription model = load_model("llama2-7b");  // hidden 4096
  TrainingConfig training;
  apply_deepspeed_config(example("zero3_hf_auto.json"), model, 4, training);
  EXPECT_EQ(training.zero.stage, 3);
  EXPECT_EQ(training.zero.offload_param, OffloadDevice::cpu);
  EXPECT_EQ(training.zero.offload_optimizer, OffloadDevice::cpu);
  EXPECT_EQ(training.zero.reduce_bucket_size, 4096LL * 4096);
  EXPECT_EQ(training.zero.prefetch_bucket_size, 15'099'494);  // int(0.9 * 4096^2) = int(15099494.4)
  EXPECT_EQ(training.zero.param_persistence_threshold, 40'960);
  EXPECT_EQ(training.zero.max_live_parameters, 1'000'000'000);
}

TEST(DeepSpeedConfig, AllBundledExamplesRead) {
  const ModelDescription model = load_model("gpt2-124m");
  for (const std::string name : {"zero1_bf16.json", "zero2_hf_auto.json", "zero3_hf_auto.json", "zero3_nvme.json",
                                 "cifar10_resnet.json"}) {
    TrainingConfig training;
    EXPECT_NO_THROW(apply_deepspeed_config(example(name), model, 4, training)) << name;
    EXPECT_TRUE(training.warnings.empty()) << name << ": " << training.warnings.front();
  }
}

TEST(DeepSpeedConfig, ExplicitBatchSizesAndNoAutos) {
  TrainingConfig training;
  apply_deepspeed_config(example("zero1_bf16.json"), load_model("gpt2-124m"), 4, training);
  EXPECT_EQ(training.micro_batch, 8);
  EXPECT_EQ(training.grad_accum, 4);
  EXPECT_FALSE(training.zero.overlap_comm);  // DeepSpeed's default below stage 3
  EXPECT_TRUE(any_contains(training.notes, "overlap_comm not set: each plan takes its engine's default: DeepSpeed's"));
  EXPECT_DOUBLE_EQ(training.adam_beta2, 0.95);
}

TEST(DeepSpeedConfig, NvmeOffloadAndFp16LossScale) {
  TrainingConfig training;
  apply_deepspeed_config(example("zero3_nvme.json"), load_model("gpt2-124m"), 1, training);
  EXPECT_EQ(training.precision, Precision::fp16);
  EXPECT_DOUBLE_EQ(training.loss_scale.initial_scale_power, 12);
  EXPECT_EQ(training.zero.offload_param, OffloadDevice::nvme);
  EXPECT_EQ(training.zero.offload_optimizer, OffloadDevice::nvme);
  EXPECT_EQ(training.zero.param_buffer_size, 100'000'000);
  EXPECT_TRUE(training.zero.overlap_comm);  // stage 3 default
}

TEST(DeepSpeedConfig, TrainBatchAndMicroDetermineAccumulation) {
  TrainingConfig training;
  const auto config = nlohmann::json::parse(R"({"train_batch_size": 96, "train_micro_batch_size_per_gpu": 4})");
  apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 4, training);
  EXPECT_EQ(training.grad_accum, 6);
  EXPECT_TRUE(any_contains(training.notes, "gradient_accumulation_steps derived"));
}

TEST(DeepSpeedConfig, TrainBatchAndAccumulationDetermineMicro) {
  TrainingConfig training;
  const auto config = nlohmann::json::parse(R"({"train_batch_size": 96, "gradient_accumulation_steps": 3})");
  apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 4, training);
  EXPECT_EQ(training.micro_batch, 8);
}

TEST(DeepSpeedConfig, TrainBatchAloneSplitsOverGpus) {
  TrainingConfig training;
  apply_deepspeed_config(example("cifar10_resnet.json"), load_model("resnet101"), 4, training);
  EXPECT_EQ(training.micro_batch, 4);
  EXPECT_EQ(training.grad_accum, 1);
  EXPECT_EQ(training.zero.stage, 0);
  EXPECT_EQ(training.precision, Precision::fp16);
}

TEST(DeepSpeedConfig, NoPrecisionSectionMeansFp32) {
  TrainingConfig training;
  const auto config = nlohmann::json::parse(R"({"train_micro_batch_size_per_gpu": 2})");
  apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 1, training);
  EXPECT_EQ(training.precision, Precision::fp32);
  EXPECT_TRUE(any_contains(training.notes, "DeepSpeed trains in fp32"));
  EXPECT_TRUE(any_contains(training.notes, "ZeRO stage 0"));
}

TEST(DeepSpeedConfig, UnknownKeysWarnWithTheirPath) {
  TrainingConfig training;
  apply_deepspeed_config(kData + "/ds_unknown_keys.json", load_model("gpt2-124m"), 2, training);
  EXPECT_EQ(training.zero.stage, 2);
  EXPECT_TRUE(any_contains(training.warnings, "'my_custom_trainer_flag'"));
  EXPECT_TRUE(any_contains(training.warnings, "'zero_optimization.reduce_bucket_sizes'"));
  EXPECT_TRUE(any_contains(training.warnings, "ds_unknown_keys.json"));
  EXPECT_EQ(training.zero.reduce_bucket_size, 500'000'000);  // the misspelt key changed nothing
}

TEST(DeepSpeedConfig, AutoNeedsAHiddenSize) {
  TrainingConfig training;
  const auto config = nlohmann::json::parse(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})");
  expect_input_error([&] { apply_deepspeed_config(config, "ds.json", load_model("resnet101"), 1, training); },
                     {"ds.json", "zero_optimization.reduce_bucket_size", "hidden size"});
}

TEST(DeepSpeedConfig, LegacyCpuOffloadFlag) {
  TrainingConfig training;
  const auto config = nlohmann::json::parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})");
  apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 1, training);
  EXPECT_EQ(training.zero.offload_optimizer, OffloadDevice::cpu);
}

TEST(DeepSpeedConfig, SgdAndUnmodelledOptimizers) {
  TrainingConfig training;
  apply_deepspeed_config(nlohmann::json::parse(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}})"),
                         "ds.json", load_model("gpt2-124m"), 1, training);
  EXPECT_EQ(training.optimizer, OptimizerKind::sgd_momentum);
  expect_input_error(
      [&] {
        apply_deepspeed_config(nlohmann::json::parse(R"({"optimizer": {"type": "Shampoo"}})"), "ds.json",
                               load_model("gpt2-124m"), 1, training);
      },
      {"ds.json", "optimizer.type", "Shampoo"});
}

// Contradictions and bad values: one test each, naming the file and the field.
TEST(DeepSpeedConfigErrors, BatchSizesContradict) {
  TrainingConfig training;
  expect_input_error(
      [&] { apply_deepspeed_config(kData + "/ds_batch_contradiction.json", load_model("gpt2-124m"), 4, training); },
      {"ds_batch_contradiction.json", "train_batch_size", "contradiction", "train_batch_size 64",
       "train_micro_batch_size_per_gpu 4", "gradient_accumulation_steps 2", "world size 4"});
}

TEST(DeepSpeedConfigErrors, TrainBatchNotAMultiple) {
  TrainingConfig training;
  const auto config = nlohmann::json::parse(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})");
  expect_input_error([&] { apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 4, training); },
                     {"ds.json", "train_batch_size", "multiple"});
}

TEST(DeepSpeedConfigErrors, Fp16AndBf16BothEnabled) {
  TrainingConfig training;
  expect_input_error(
      [&] { apply_deepspeed_config(kData + "/ds_fp16_and_bf16.json", load_model("gpt2-124m"), 1, training); },
      {"ds_fp16_and_bf16.json", "bf16.enabled", "contradiction", "fp16"});
}

TEST(DeepSpeedConfigErrors, OffloadParamBelowStage3) {
  TrainingConfig training;
  expect_input_error(
      [&] { apply_deepspeed_config(kData + "/ds_offload_param_stage2.json", load_model("gpt2-124m"), 1, training); },
      {"ds_offload_param_stage2.json", "zero_optimization.offload_param.device", "stage 3", "stage 2"});
}

TEST(DeepSpeedConfigErrors, UnknownStage) {
  TrainingConfig training;
  expect_input_error(
      [&] { apply_deepspeed_config(kData + "/ds_unknown_stage.json", load_model("gpt2-124m"), 1, training); },
      {"ds_unknown_stage.json", "zero_optimization.stage", "4", "0, 1, 2 or 3"});
}

TEST(DeepSpeedConfigErrors, NegativeMicroBatch) {
  TrainingConfig training;
  expect_input_error(
      [&] { apply_deepspeed_config(kData + "/ds_negative_micro_batch.json", load_model("gpt2-124m"), 1, training); },
      {"ds_negative_micro_batch.json", "train_micro_batch_size_per_gpu", "-2"});
}

TEST(DeepSpeedConfigErrors, FractionalBucketSize) {
  TrainingConfig training;
  expect_input_error(
      [&] { apply_deepspeed_config(kData + "/ds_fractional_bucket.json", load_model("gpt2-124m"), 1, training); },
      {"ds_fractional_bucket.json", "zero_optimization.reduce_bucket_size", "2500.5"});
}

// A bucket or sub-group of 0 elements holds nothing to reduce, gather or step: refused where the config says it
// (zeroplan run and plan named only "training configuration" when the simulator's check caught it later); a
// prefetch bucket of 0 turns prefetching off and is read.
TEST(DeepSpeedConfigErrors, EmptyBucketsAndSubGroups) {
  for (const char* key : {"reduce_bucket_size", "allgather_bucket_size", "sub_group_size"}) {
    TrainingConfig training;
    const nlohmann::json config = {{"zero_optimization", {{"stage", 3}, {key, 0}}}};
    expect_input_error([&] { apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 1, training); },
                       {"ds.json", std::string("zero_optimization.") + key, ">= 1", "got 0"});
  }
  TrainingConfig training;
  apply_deepspeed_config(nlohmann::json{{"zero_optimization", {{"stage", 3}, {"stage3_prefetch_bucket_size", 0}}}},
                         "ds.json", load_model("gpt2-124m"), 1, training);
  EXPECT_EQ(training.zero.prefetch_bucket_size, 0);
}

TEST(DeepSpeedConfigErrors, FailureLeavesTrainingUntouched) {
  TrainingConfig training;
  training.micro_batch = 3;
  const auto config = nlohmann::json::parse(R"({"train_micro_batch_size_per_gpu": 16, "zero_optimization": {"stage": 9}})");
  EXPECT_THROW(apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 1, training), InputError);
  EXPECT_EQ(training.micro_batch, 3);
  EXPECT_TRUE(training.notes.empty());
}

TEST(DeepSpeedConfigErrors, ZeroWorldSize) {
  TrainingConfig training;
  expect_input_error(
      [&] { apply_deepspeed_config(nlohmann::json::object(), "ds.json", load_model("gpt2-124m"), 0, training); },
      {"--gpus", "at least 1"});
}

TEST(EmitDeepSpeedConfig, RoundTripsThroughTheReader) {
  TrainingConfig plan;
  plan.micro_batch = 6;
  plan.grad_accum = 3;
  plan.precision = Precision::fp16;
  plan.loss_scale.initial_scale_power = 14;
  plan.loss_scale.consecutive_hysteresis = true;
  plan.zero.stage = 3;
  plan.zero.offload_optimizer = OffloadDevice::cpu;
  plan.zero.offload_param = OffloadDevice::nvme;
  plan.zero.overlap_comm = true;
  plan.zero.overlap_comm_given = true;
  plan.zero.prefetch_bucket_size = 12'345'678;
  plan.zero.param_persistence_threshold = 4096;
  plan.checkpointing = Checkpointing::full;
  const nlohmann::json emitted = emit_deepspeed_config(plan, 4);
  EXPECT_EQ(emitted.at("train_batch_size").get<std::int64_t>(), 6 * 3 * 4);
  TrainingConfig read;
  apply_deepspeed_config(emitted, "emitted.json", load_model("gpt2-124m"), 4, read);
  EXPECT_TRUE(read.warnings.empty()) << read.warnings.front();
  EXPECT_EQ(read.micro_batch, 6);
  EXPECT_EQ(read.grad_accum, 3);
  EXPECT_EQ(read.precision, Precision::fp16);
  EXPECT_DOUBLE_EQ(read.loss_scale.initial_scale_power, 14);
  EXPECT_TRUE(read.loss_scale.consecutive_hysteresis);
  EXPECT_EQ(read.zero.stage, 3);
  EXPECT_EQ(read.zero.offload_optimizer, OffloadDevice::cpu);
  EXPECT_EQ(read.zero.offload_param, OffloadDevice::nvme);
  EXPECT_EQ(read.zero.prefetch_bucket_size, 12'345'678);
  EXPECT_EQ(read.zero.param_persistence_threshold, 4096);
  EXPECT_TRUE(emitted.contains("activation_checkpointing"));
}

TEST(EmitDeepSpeedConfig, StageTwoHasNoStage3Keys) {
  TrainingConfig plan;
  plan.zero.stage = 2;
  const nlohmann::json emitted = emit_deepspeed_config(plan, 8);
  EXPECT_FALSE(emitted.at("zero_optimization").contains("stage3_prefetch_bucket_size"));
  EXPECT_TRUE(emitted.contains("bf16"));
  EXPECT_EQ(emitted.at("optimizer").at("type"), "AdamW");
}

TEST(TrainingConfig, NamesParseAndPrint) {
  EXPECT_EQ(parse_precision("bf16", "--precision", ""), Precision::bf16);
  EXPECT_EQ(parse_offload_device("nvme", "--offload-param", ""), OffloadDevice::nvme);
  EXPECT_EQ(parse_checkpointing("selective", "--checkpointing", ""), Checkpointing::selective);
  EXPECT_EQ(parse_optimizer("adam_8bit", "--optimizer", ""), OptimizerKind::adam_8bit);
  expect_input_error([] { parse_precision("fp8", "--precision", ""); }, {"--precision", "fp8", "fp32, fp16, bf16"});
  EXPECT_EQ(precision_bytes(Precision::fp32), 4);
  EXPECT_EQ(precision_bytes(Precision::bf16), 2);
  // ZeRO paper K = 12 for mixed-precision Adam: 4 (fp32 master) + 8 (momentum, variance).
  EXPECT_EQ(4 + optimizer_state_bytes_per_param(OptimizerKind::adamw), 12);
  const nlohmann::json document = training_to_json(TrainingConfig{});
  EXPECT_EQ(document.at("zero").at("stage"), 0);
  EXPECT_EQ(document.at("precision"), "bf16");
}

// Issue 9: DeepSpeed plans parameter offload without optimizer offload, but not NVMe offload without nvme_path.
TEST(DeepSpeedConfig, NvmeOffloadNeedsItsPathAndParameterOffloadMayStandAlone) {
  const ModelDescription model = load_model("gpt2-124m");
  TrainingConfig training;
  expect_input_error([&] { apply_deepspeed_config(kData + "/ds_offload_param_nvme_no_path.json", model, 4, training); },
                     {"ds_offload_param_nvme_no_path.json", "zero_optimization.offload_param.nvme_path", "missing",
                      "DeepSpeed's own requirement"});
  apply_deepspeed_config(kData + "/ds_offload_param_nvme_only.json", model, 4, training);
  EXPECT_EQ(training.zero.stage, 3);
  EXPECT_EQ(training.zero.offload_param, OffloadDevice::nvme);
  EXPECT_EQ(training.zero.offload_optimizer, OffloadDevice::none);
}

// Issue 39: offload_param's buffer_count, buffer_size and max_in_cpu, and the aio section, reach the executor's NVMe
// swappers (exec/exec_config.h); without them, DeepSpeed's defaults (max_in_cpu 1e9 elements).
TEST(DeepSpeedConfig, ParameterOffloadToNvmeReadsItsBuffersMaxInCpuAndAio) {
  const ModelDescription model = load_model("gpt2-124m");
  TrainingConfig training;
  apply_deepspeed_config(kData + "/ds_offload_param_nvme_only.json", model, 4, training);
  EXPECT_EQ(training.zero.param_max_in_cpu, 1'000'000'000);  // DeepSpeed's default (offload_config.py)
  EXPECT_EQ(training.zero.aio_block_size, 1048576);
  EXPECT_EQ(training.zero.aio_queue_depth, 8);
  EXPECT_TRUE(training.zero.aio_overlap_events);
  TrainingConfig given;
  apply_deepspeed_config(kData + "/ds_offload_param_nvme_aio.json", model, 4, given);
  EXPECT_EQ(given.zero.offload_param, OffloadDevice::nvme);
  EXPECT_EQ(given.zero.param_buffer_count, 7);
  EXPECT_EQ(given.zero.param_buffer_size, 20000000);
  EXPECT_EQ(given.zero.param_max_in_cpu, 3000000);
  EXPECT_EQ(given.zero.aio_block_size, 262144);
  EXPECT_EQ(given.zero.aio_queue_depth, 16);
  EXPECT_FALSE(given.zero.aio_overlap_events);
  expect_input_error([&] { apply_deepspeed_config(kData + "/ds_aio_bad_block.json", model, 4, training); },
                     {"ds_aio_bad_block.json", "aio.block_size", "multiple of 4096"});
}

// Issue 9: numbers JSON can only hold as infinity (1e999) and absurd sizes are refused, named by their field.
TEST(DeepSpeedConfig, NonFiniteRatesAndAbsurdSizesAreRefused) {
  const ModelDescription model = load_model("gpt2-124m");
  TrainingConfig training;
  // nlohmann 3.11 (Debian 12) refuses the literal while parsing, before any field is read: the error names the
  // literal and its line instead of the field.
  expect_input_error([&] { apply_deepspeed_config(kData + "/ds_nan_lr.json", model, 4, training); },
                     {"ds_nan_lr.json", "1e999", "not a finite number"});
  expect_input_error([&] { apply_deepspeed_config(kData + "/ds_absurd_accumulation.json", model, 4, training); },
                     {"gradient_accumulation_steps", "at most 10,000"});
}

}  // namespace
}  // namespace zeroplan

namespace zeroplan {
namespace {

// Issue 13: fields DeepSpeed 0.19.8 reads (runtime/config.py get_communication_data_type, get_data_types_params;
// engine.py get_optimizer_configuration) are read, not accepted and ignored.
TEST(DeepSpeedDataTypes, CommunicationAndAccumulationDtypesAndTorchAdamAreRead) {
  TrainingConfig training;
  const auto config = nlohmann::json::parse(R"({"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": true},
      "communication_data_type": "FP32", "data_types": {"grad_accum_dtype": "float32"},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": true}},
      "zero_optimization": {"stage": 1, "use_multi_rank_bucket_allreduce": false, "reduce_scatter": true}})");
  apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 2, training);
  EXPECT_TRUE(training.warnings.empty()) << training.warnings.front();
  ASSERT_TRUE(training.communication_dtype);
  EXPECT_EQ(*training.communication_dtype, Precision::fp32);
  ASSERT_TRUE(training.grad_accum_dtype);
  EXPECT_EQ(*training.grad_accum_dtype, Precision::fp32);
  EXPECT_EQ(training.adam_implementation, AdamImplementation::torch_foreach);
  // ZeRO-Offload with torch_adam is torch's AdamW on the host (engine.py), which the step times do not assume.
  EXPECT_NE(std::find_if(training.notes.begin(), training.notes.end(),
                         [](const std::string& n) {
                           return n.find("torch_adam with ZeRO-Offload") != std::string::npos &&
                                  n.find("not DeepSpeedCPUAdam") != std::string::npos;
                         }),
            training.notes.end());
  EXPECT_FALSE(training.zero.use_multi_rank_bucket_allreduce);
  // Written back for the plan, and read again the same.
  const nlohmann::json emitted = emit_deepspeed_config(training, 2);
  EXPECT_EQ(emitted.at("communication_data_type"), "fp32");
  EXPECT_EQ(emitted.at("data_types").at("grad_accum_dtype"), "fp32");
  EXPECT_EQ(emitted.at("optimizer").at("params").at("torch_adam"), true);
  TrainingConfig again;
  apply_deepspeed_config(emitted, "emitted.json", load_model("gpt2-124m"), 2, again);
  EXPECT_EQ(again.communication_dtype, training.communication_dtype);
  EXPECT_EQ(again.grad_accum_dtype, training.grad_accum_dtype);
  EXPECT_EQ(again.adam_implementation, training.adam_implementation);
  EXPECT_EQ(again.zero.use_multi_rank_bucket_allreduce, false);
}

TEST(DeepSpeedDataTypes, WhatDeepSpeedRefusesIsAnInputError) {
  TrainingConfig training;
  // engine.py _do_optimizer_sanity_check: no ZeRO with gradients accumulated in another dtype than the model's.
  const auto stage0 = nlohmann::json::parse(R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"},
      "zero_optimization": {"stage": 0}})");
  expect_input_error([&] { apply_deepspeed_config(stage0, "ds.json", load_model("gpt2-124m"), 2, training); },
                     {"ds.json", "data_types.grad_accum_dtype", "NotImplementedError", "stage"});
  // get_communication_data_type accepts fp32, fp16 and bf16 only.
  const auto comm = nlohmann::json::parse(R"({"communication_data_type": "float32"})");
  expect_input_error([&] { apply_deepspeed_config(comm, "ds.json", load_model("gpt2-124m"), 2, training); },
                     {"ds.json", "communication_data_type", "fp32, fp16 or bf16"});
  const auto accum = nlohmann::json::parse(R"({"data_types": {"grad_accum_dtype": "int4"}})");
  expect_input_error([&] { apply_deepspeed_config(accum, "ds.json", load_model("gpt2-124m"), 2, training); },
                     {"ds.json", "data_types.grad_accum_dtype"});
}

// overlap_comm not given is DeepSpeed's default of the plan's stage (zero/config.py overlap_comm_valid): a stage-3
// plan emitted from a stage-2 config without the key says true, and one from flags alone too.
TEST(DeepSpeedDataTypes, OverlapCommNotGivenFollowsThePlansStage) {
  TrainingConfig training;
  const auto config = nlohmann::json::parse(R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})");
  apply_deepspeed_config(config, "ds.json", load_model("gpt2-124m"), 2, training);
  EXPECT_FALSE(training.zero.overlap_comm_given);
  training.zero.stage = 3;
  EXPECT_EQ(emit_deepspeed_config(training, 2).at("zero_optimization").at("overlap_comm"), true);
  TrainingConfig flags_only;
  flags_only.zero.stage = 3;
  EXPECT_EQ(emit_deepspeed_config(flags_only, 2).at("zero_optimization").at("overlap_comm"), true);
  flags_only.zero.stage = 1;
  EXPECT_EQ(emit_deepspeed_config(flags_only, 2).at("zero_optimization").at("overlap_comm"), false);
  const auto given = nlohmann::json::parse(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})");
  TrainingConfig off;
  apply_deepspeed_config(given, "ds.json", load_model("gpt2-124m"), 2, off);
  EXPECT_TRUE(off.zero.overlap_comm_given);
  EXPECT_EQ(emit_deepspeed_config(off, 2).at("zero_optimization").at("overlap_comm"), false);
}

// fp16.consecutive_hysteresis (DeepSpeed's DynamicLossScaler argument) is read, not accepted and dropped: a boolean,
// false when absent as in DeepSpeed; another type names the field.
TEST(DeepSpeedFp16, ConsecutiveHysteresisIsReadAsABoolean) {
  TrainingConfig training;
  const auto on = nlohmann::json::parse(R"({"fp16": {"enabled": true, "consecutive_hysteresis": true}})");
  apply_deepspeed_config(on, "ds.json", load_model("gpt2-124m"), 1, training);
  EXPECT_TRUE(training.loss_scale.consecutive_hysteresis);
  TrainingConfig plain;
  apply_deepspeed_config(nlohmann::json::parse(R"({"fp16": {"enabled": true}})"), "ds.json", load_model("gpt2-124m"), 1,
                         plain);
  EXPECT_FALSE(plain.loss_scale.consecutive_hysteresis);
  TrainingConfig bad;
  const auto text = nlohmann::json::parse(R"({"fp16": {"enabled": true, "consecutive_hysteresis": "yes"}})");
  expect_input_error([&] { apply_deepspeed_config(text, "ds.json", load_model("gpt2-124m"), 1, bad); },
                     {"ds.json", "consecutive_hysteresis"});
}

}  // namespace
}  // namespace zeroplan
