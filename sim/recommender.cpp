#include "sim/recommender.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/input_error.h"
#include "core/number_checks.h"
#include "core/units.h"
#include "core/lora_modules.h"
#include "sim/deepspeed_engine.h"
#include "sim/planner.h"

namespace zeroplan {

std::vector<int> default_gpu_counts(const ClusterDescription& cluster) {
  std::set<int> counts;
  const int per_node = std::max(1, cluster.gpus_per_node);
  for (int g = 1; g < per_node; g *= 2) counts.insert(g);
  counts.insert(per_node);
  for (int nodes = 2; nodes < cluster.nodes; nodes *= 2) counts.insert(nodes * per_node);
  counts.insert(cluster.total_gpus());
  return {counts.begin(), counts.end()};
}

namespace {

std::string ms(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f ms", seconds * 1e3);
  return buffer;
}

// What differs between the two settings, in the order a reader changes them.
std::string differences(const Recommendation& a, const Recommendation& b) {
  std::vector<std::string> parts;
  if (a.method != b.method) parts.push_back(a.method + " vs " + b.method);
  if (!(a.choice == b.choice)) parts.push_back(a.choice.label() + " vs " + b.choice.label());
  if (a.gpus != b.gpus) parts.push_back(std::to_string(a.gpus) + " vs " + std::to_string(b.gpus) + " GPUs");
  if (a.training.micro_batch != b.training.micro_batch) {
    parts.push_back("micro-batch " + std::to_string(a.training.micro_batch) + " vs " +
                    std::to_string(b.training.micro_batch));
  }
  if (a.training.checkpointing != b.training.checkpointing) {
    parts.push_back("checkpointing " + to_string(a.training.checkpointing) + " vs " +
                    to_string(b.training.checkpointing));
  }
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i) text += (i ? "; " : "") + parts[i];
  return text;
}

}  // namespace

std::string why_better(const Recommendation& better, const Recommendation& next, std::size_t next_rank) {
  const StepSimulation& a = better.simulation;
  const StepSimulation& b = next.simulation;
  // The step splits into compute (of which recompute), exposed communication and waiting on offload; the
  // component that differs most is the reason. With the global batch fixed, step times compare directly.
  struct Part {
    const char* name;
    double saved;
  };
  const Part parts[] = {
      {"compute (GEMM efficiency, optimizer step)", (b.compute_seconds - b.recompute_seconds) -
                                                         (a.compute_seconds - a.recompute_seconds)},
      {"recompute", b.recompute_seconds - a.recompute_seconds},
      {"exposed communication", b.exposed_comm_seconds - a.exposed_comm_seconds},
      {"waiting on the host (hooks, PCIe, CPU optimizer, NVMe)", b.offload_wait_seconds - a.offload_wait_seconds},
  };
  const Part* main = &parts[0];
  for (const Part& part : parts) {
    if (part.saved > main->saved) main = &part;
  }
  const std::string diff = differences(better, next);
  const std::string setting = diff.empty() ? "" : " (" + diff + ")";
  if (a.tokens_per_second <= b.tokens_per_second * (1.0 + 1e-9)) {
    return "as fast as #" + std::to_string(next_rank) + " (" + ms(a.step_seconds) + " per step) with " +
           format_gib(b.peak_gpu_bytes - a.peak_gpu_bytes) + " less GPU memory at the peak" + setting;
  }
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3fx", a.tokens_per_second / b.tokens_per_second);
  std::string text = std::string(ratio) + " the " + a.token_unit + "/s of #" + std::to_string(next_rank) + ": ";
  if (main->saved > 0.0) {
    text += ms(main->saved) + " less " + main->name + " per step";
  } else {
    text += "a shorter step (" + ms(a.step_seconds) + " vs " + ms(b.step_seconds) + ")";
  }
  return text + setting;
}

RecommendResult recommend_plans(const ModelDescription& model, const ClusterDescription& cluster,
                                const TrainingConfig& training, const RecommendOptions& options) {
  if (options.global_batch < 1) {
    throw InputError("command line", "--global-batch",
                     "is " + std::to_string(options.global_batch) + "; expected samples per step >= 1");
  }
  if (options.top == 0) throw InputError("command line", "--top", "expected at least 1 plan to show");
  std::vector<int> gpu_counts = options.gpu_counts.empty() ? default_gpu_counts(cluster) : options.gpu_counts;
  for (int gpus : gpu_counts) {
    if (gpus < 1 || gpus > cluster.total_gpus()) {
      throw InputError("command line", "--gpus",
                       "GPU count " + std::to_string(gpus) + " outside 1.." + std::to_string(cluster.total_gpus()) +
                           " (the cluster " + cluster.name + ")");
    }
  }
  const std::vector<PlanChoice> choices = enumerate_plan_choices(options.filter);
  RecommendResult result;
  result.margin = options.gpu_memory_margin.value_or(default_memory_margin(training.engine));
  require_valid_margin(result.margin.fraction, "command line", "--margin");
  const double margin = result.margin.fraction;
  PlannerOptions planner;
  planner.search_max_micro_batch = false;
  planner.gpu_memory_margin = margin;

  std::vector<Recommendation> fitting;
  for (int gpus : gpu_counts) {
    if (options.global_batch % gpus != 0) continue;  // every GPU takes the same number of samples
    const ClusterDescription sized = with_gpu_count(cluster, gpus);
    const std::int64_t per_gpu = options.global_batch / gpus;
    for (const PlanChoice& choice : choices) {
      if (!cluster_supports(sized, choice)) continue;  // e.g. NVMe offload on a cluster without NVMe
      if (training.engine == TrainingEngine::deepspeed && !deepspeed_runs(training, choice)) continue;
      // zeroplan's executor trains LoRA without offload (its frozen base engine offloads nothing) and keeps NF4 codes
      // whole, so not at stage 3 (run/training_run.cpp refuses both by name): no such plan is recommended for it.
      if (training.engine == TrainingEngine::zeroplan && training.lora.enabled &&
          (choice.offload_optimizer != OffloadDevice::none || choice.offload_param != OffloadDevice::none ||
           (training.lora.quantize_base == BaseQuantization::nf4 && choice.stage == 3)))
        continue;
      for (Checkpointing checkpointing : options.checkpointing) {
        for (std::int64_t micro = 1; micro <= std::min(per_gpu, options.max_micro_batch); ++micro) {
          if (per_gpu % micro != 0) continue;
          if (per_gpu / micro > kMaxGradAccum) continue;  // more micro-steps than the simulator times
          ++result.candidates;
          TrainingConfig candidate = training;
          candidate.micro_batch = micro;
          candidate.grad_accum = per_gpu / micro;
          candidate.checkpointing = checkpointing;
          const PlanResult plan = evaluate_plan(model, sized, candidate, choice, planner);
          // Memory grows with the micro-batch: once it does not fit, larger ones do not either.
          if (!plan.host_fits || !plan.nvme_fits) break;
          // Nor does a plan whose bytes held all step (or at initialization) exceed the GPU: the timeline's peak
          // starts there, so it is not simulated.
          const Bytes held = std::max(static_gpu_bytes(model, plan.training, plan.memory), plan.memory.init_peak_gpu_bytes);
          if (!fits_with_margin(held, sized.gpu_memory_bytes, margin)) break;
          Recommendation r;
          r.choice = choice;
          r.training = apply_choice(candidate, choice);
          r.gpus = gpus;
          r.simulation = simulate_step(model, sized, candidate, choice);
          ++result.simulated;
          if (!timeline_gpu_fits(r.simulation, sized, margin)) break;  // the verdict `zeroplan plan` gives too
          fitting.push_back(std::move(r));
        }
      }
    }
  }
  result.fitting = static_cast<std::int64_t>(fitting.size());
  // Fastest first; among equally fast plans, the one with the lower GPU peak (more headroom).
  std::stable_sort(fitting.begin(), fitting.end(), [](const Recommendation& a, const Recommendation& b) {
    if (a.simulation.tokens_per_second != b.simulation.tokens_per_second) {
      return a.simulation.tokens_per_second > b.simulation.tokens_per_second;
    }
    return a.simulation.peak_gpu_bytes < b.simulation.peak_gpu_bytes;
  });
  if (fitting.size() > options.top) fitting.resize(options.top);
  for (std::size_t i = 0; i + 1 < fitting.size(); ++i) fitting[i].why = why_better(fitting[i], fitting[i + 1], i + 2);
  result.plans = std::move(fitting);
  return result;
}

std::vector<FinetuneMethod> finetune_methods(const ModelDescription& model, const TrainingConfig& training) {
  if (!model.transformer)
    throw InputError("command line", "--finetune",
                     "model \"" + model.name + "\" is a layer list: LoRA has no linear modules to adapt there; "
                     "expected a transformer");
  std::vector<FinetuneMethod> methods;
  FinetuneMethod full{"full", training};
  full.training.lora = LoraSettings{};
  methods.push_back(full);
  // LoRA as given, or PEFT's defaults (LoraConfig r 8, lora_alpha 8, the model type's default targets).
  LoraSettings adapters = training.lora;
  if (!adapters.enabled) {
    adapters = LoraSettings{};
    adapters.enabled = true;
    adapters.targets = peft_default_targets(model);
  }
  FinetuneMethod lora{"lora", training};
  lora.training.lora = adapters;
  lora.training.lora.quantize_base = BaseQuantization::none;
  methods.push_back(lora);
  FinetuneMethod qlora{"", training};
  qlora.training.lora = adapters;
  qlora.training.lora.quantize_base =
      training.lora.quantize_base == BaseQuantization::int8 ? BaseQuantization::int8 : BaseQuantization::nf4;
  qlora.name = "qlora-" + to_string(qlora.training.lora.quantize_base);
  methods.push_back(qlora);
  return methods;
}

RecommendResult recommend_finetune(const ModelDescription& model, const ClusterDescription& cluster,
                                   const std::vector<FinetuneMethod>& methods, const RecommendOptions& options) {
  RecommendResult merged;
  std::vector<Recommendation> fitting;
  for (const FinetuneMethod& method : methods) {
    RecommendResult one = recommend_plans(model, cluster, method.training, options);
    merged.candidates += one.candidates;
    merged.simulated += one.simulated;
    merged.fitting += one.fitting;
    merged.margin = one.margin;
    for (Recommendation& r : one.plans) {
      r.method = method.name;
      fitting.push_back(std::move(r));
    }
  }
  // The same order as recommend_plans: fastest first, then the lower GPU peak; each method brought its own best
  // `top`, so the best `top` of all are among them.
  std::stable_sort(fitting.begin(), fitting.end(), [](const Recommendation& a, const Recommendation& b) {
    if (a.simulation.tokens_per_second != b.simulation.tokens_per_second)
      return a.simulation.tokens_per_second > b.simulation.tokens_per_second;
    return a.simulation.peak_gpu_bytes < b.simulation.peak_gpu_bytes;
  });
  if (fitting.size() > options.top) fitting.resize(options.top);
  for (std::size_t i = 0; i < fitting.size(); ++i)
    fitting[i].why = i + 1 < fitting.size() ? why_better(fitting[i], fitting[i + 1], i + 2) : "";
  merged.plans = std::move(fitting);
  return merged;
}

}  // namespace zeroplan
