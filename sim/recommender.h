// The best plan for a fixed global batch: searches ZeRO stage x offload x micro-batch x gradient accumulation
// (micro-batch * accumulation * GPUs = the global batch) x activation checkpointing x GPU count, keeps the plans
// that fit (GPU peak from the simulated timeline plus the margin of sim/memory_margin.h, host and NVMe from the
// memory model), ranks them by tokens/s and says why each beats the next.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/memory_margin.h"
#include "sim/plan_choice.h"
#include "sim/simulator.h"

namespace zeroplan {

struct RecommendOptions {
  std::int64_t global_batch = 0;        // samples per optimizer step over all GPUs (> 0)
  std::vector<int> gpu_counts;          // empty: powers of two up to a node, then whole nodes, up to the cluster
  std::vector<Checkpointing> checkpointing = {Checkpointing::none, Checkpointing::selective, Checkpointing::full};
  PlanChoiceFilter filter;              // narrows stage / offload
  std::size_t top = 5;
  std::int64_t max_micro_batch = 1024;
  // The GPU verdict's margin (a fraction of the predicted peak, and where it comes from); unset: the engine's
  // measured error (default_memory_margin).
  std::optional<MemoryMargin> gpu_memory_margin;
};

struct Recommendation {
  PlanChoice choice;
  TrainingConfig training;   // choice, micro-batch, accumulation and checkpointing applied
  int gpus = 0;
  StepSimulation simulation;
  std::string why;           // why it beats the next one ("" for the last)
  std::string method;        // recommend --finetune: "full", "lora" or "qlora-nf4"/"qlora-int8" ("" otherwise)
};

struct RecommendResult {
  std::vector<Recommendation> plans;  // best first, at most options.top
  std::int64_t candidates = 0;        // configurations considered
  std::int64_t simulated = 0;         // of them, simulated (host and NVMe fit, and the bytes held all step fit
                                      //   the GPU: the others cannot fit, whatever the timeline)
  std::int64_t fitting = 0;
  MemoryMargin margin;                // kept free above every plan's GPU peak
};

// The GPU counts searched when none are given: 1, 2, 4, ... up to one node, then 2, 4, ... nodes and the whole
// cluster.
std::vector<int> default_gpu_counts(const ClusterDescription& cluster);

// Throws InputError for a global batch < 1, a GPU count outside [1, cluster size], top == 0.
RecommendResult recommend_plans(const ModelDescription& model, const ClusterDescription& cluster,
                                const TrainingConfig& training, const RecommendOptions& options);

// `recommend --finetune`: the fine-tuning methods compared, each as its training configuration: full fine-tuning
// (every parameter trained), LoRA with the given rank, alpha and targets (PEFT's defaults where none are given:
// r 8, alpha 8, the model type's default targets; core/lora_modules.h), and QLoRA, the same adapters over a
// quantised base (nf4 unless --quantize-base int8 was given). Throws InputError for a layer-list model.
struct FinetuneMethod {
  std::string name;
  TrainingConfig training;
};
std::vector<FinetuneMethod> finetune_methods(const ModelDescription& model, const TrainingConfig& training);

// Every method's fitting plans ranked together by tokens/s (the same global batch: the same tokens per step); the
// counts are summed over the methods.
RecommendResult recommend_finetune(const ModelDescription& model, const ClusterDescription& cluster,
                                   const std::vector<FinetuneMethod>& methods, const RecommendOptions& options);

// "1.12x the tokens/s of #2: 18.3 ms less exposed communication per step (stage 2 vs stage 3)".
std::string why_better(const Recommendation& better, const Recommendation& next, std::size_t next_rank);

}  // namespace zeroplan
