// The planner: one plan choice's verdict (memory, communication, fits) and the searches over it. Memory grows
// monotonically with the micro-batch, the layer count and the hidden size, so the searches bisect; the GPU
// count is scanned (host memory per node grows with the ranks on a node, so it is not monotone there).
#include "sim/planner.h"

#include <algorithm>

#include "core/input_error.h"
#include "sim/monotone_search.h"

namespace zeroplan {

namespace {

struct Verdict {
  bool gpu = false, host = false, nvme = false;
  Bytes gpu_peak = 0;
  bool all() const { return gpu && host && nvme; }
};

Verdict judge(const MemoryEstimate& memory, const ClusterDescription& cluster, double margin) {
  Verdict v;
  // The init-time peaks count too: a plan that cannot even be initialized does not fit.
  v.gpu_peak = std::max(memory.gpu.total, memory.init_peak_gpu_bytes);
  v.gpu = fits_with_margin(v.gpu_peak, cluster.gpu_memory_bytes, margin);
  v.host = std::max(memory.host.total, memory.init_peak_host_bytes) <= cluster.host_memory_bytes;
  v.nvme = memory.nvme_bytes <= cluster.nvme_capacity_bytes;
  return v;
}

bool fits_with(const ModelDescription& model, const ClusterDescription& cluster, const TrainingConfig& training,
               const PlanChoice& choice, double margin) {
  return judge(estimate_memory(model, cluster, training, choice), cluster, margin).all();
}

}  // namespace

bool gpu_memory_fits(const MemoryEstimate& memory, const ClusterDescription& cluster, double margin) {
  return judge(memory, cluster, margin).all();
}

PlanResult evaluate_plan(const ModelDescription& model, const ClusterDescription& cluster,
                         const TrainingConfig& training, const PlanChoice& choice, const PlannerOptions& options) {
  PlanResult result;
  result.choice = choice;
  result.training = apply_choice(training, choice);
  result.memory = options.explain ? explain_memory(model, cluster, result.training, choice)
                                  : estimate_memory(model, cluster, result.training, choice);
  result.comm = estimate_comm(model, cluster, result.training, choice);
  result.gpu_margin = options.gpu_memory_margin ? *options.gpu_memory_margin
                                                : default_memory_margin(training.engine).fraction;
  const Verdict verdict = judge(result.memory, cluster, result.gpu_margin);
  result.gpu_margin_bytes = margin_bytes(verdict.gpu_peak, result.gpu_margin);
  result.gpu_fits = verdict.gpu;
  result.host_fits = verdict.host;
  result.nvme_fits = verdict.nvme;
  result.fits = verdict.all();
  result.gpu_headroom_bytes = cluster.gpu_memory_bytes - verdict.gpu_peak;
  if (options.search_max_micro_batch)
    result.max_micro_batch = largest_fitting_micro_batch(model, cluster, result.training, choice,
                                                         options.micro_batch_search_limit, result.gpu_margin);
  if (options.compare_deepspeed)
    result.deepspeed = deepspeed_estimate_for(choice, model.params(), model.largest_layer_params(),
                                              cluster.gpus_per_node, cluster.nodes);
  return result;
}

std::int64_t largest_fitting_micro_batch(const ModelDescription& model, const ClusterDescription& cluster,
                                         const TrainingConfig& training, const PlanChoice& choice,
                                         std::int64_t limit, double margin) {
  TrainingConfig trial = training;
  return largest_satisfying(limit, [&](std::int64_t micro_batch) {
    trial.micro_batch = micro_batch;
    return fits_with(model, cluster, trial, choice, margin);
  });
}

std::optional<int> fewest_gpus_that_fit(const ModelDescription& model, const ClusterDescription& cluster,
                                        const TrainingConfig& training, const PlanChoice& choice, int max_gpus,
                                        double margin) {
  if (max_gpus < 1) throw InputError("command line", "--max-gpus", "must be at least 1, got " + std::to_string(max_gpus));
  const int per_node = std::max(1, cluster.gpus_per_node);
  const TrainingConfig applied = apply_choice(training, choice);
  // Within one node every count; beyond it whole nodes (the cluster's kind of machine).
  std::vector<int> counts;
  for (int g = 1; g <= std::min(per_node, max_gpus); ++g) counts.push_back(g);
  // Several nodes only when the cluster describes a network between them (with_gpu_count refuses otherwise).
  if (cluster.inter_node.bus_bandwidth > 0.0)
    for (int g = 2 * per_node; g <= max_gpus; g += per_node) counts.push_back(g);
  for (int gpus : counts)
    if (fits_with(model, with_gpu_count(cluster, gpus), applied, choice, margin)) return gpus;
  return std::nullopt;
}

namespace {

std::optional<ModelDescription> fits_as(const std::string& name, const TransformerShape& shape,
                                        const ClusterDescription& cluster, const TrainingConfig& training,
                                        const PlanChoice& choice, double margin) {
  ModelDescription model = expand_transformer(name, shape, "largest_fitting_model");
  if (!fits_with(model, cluster, training, choice, margin)) return std::nullopt;
  return model;
}

// Largest n in [1, cap] for which make(n) fits, by galloping then bisection; nullopt if n = 1 does not fit.
template <typename Make>
std::optional<ModelDescription> bisect_largest(std::int64_t cap, Make make) {
  std::optional<ModelDescription> best = make(1);
  if (!best) return std::nullopt;
  std::int64_t low = 1, high = 2;
  while (high <= cap) {
    auto model = make(high);
    if (!model) break;
    best = std::move(model);
    low = high;
    high *= 2;
  }
  high = std::min(high, cap + 1);
  while (high - low > 1) {
    const std::int64_t mid = low + (high - low) / 2;
    auto model = make(mid);
    if (model) {
      best = std::move(model);
      low = mid;
    } else {
      high = mid;
    }
  }
  return best;
}

}  // namespace

std::optional<ModelDescription> largest_fitting_model(const ModelDescription& family_template,
                                                      const ClusterDescription& cluster,
                                                      const TrainingConfig& training, const PlanChoice& choice,
                                                      double margin) {
  if (!family_template.transformer)
    throw InputError(family_template.source, "transformer",
                     "the largest-model search scales a transformer family; '" + family_template.name +
                         "' is a layer list");
  const TransformerShape base = *family_template.transformer;
  const TrainingConfig applied = apply_choice(training, choice);
  constexpr std::int64_t kLayerCap = 1 << 16;

  // (a) More or fewer layers at the template's width.
  auto by_layers = bisect_largest(kLayerCap, [&](std::int64_t layers) {
    TransformerShape shape = base;
    shape.layers = layers;
    return fits_as(family_template.name + " with " + std::to_string(layers) + " layers", shape, cluster, applied,
                   choice, margin);
  });

  // (b) Wider and deeper together: heads grow in steps of the query-group size (head_dim fixed), hidden =
  // heads * head_dim, kv_heads and ffn_hidden scale with hidden, layers keep the template's hidden/layers ratio.
  const std::int64_t head_dim = base.head_dim();
  const std::int64_t group = std::max<std::int64_t>(1, base.heads / std::max<std::int64_t>(1, base.kv_heads));
  const double aspect = static_cast<double>(base.hidden) / static_cast<double>(base.layers);
  auto by_width = bisect_largest(kLayerCap, [&](std::int64_t steps) {
    TransformerShape shape = base;
    shape.heads = steps * group;
    shape.kv_heads = steps;
    shape.hidden = shape.heads * head_dim;
    shape.ffn_hidden = base.ffn_hidden * shape.hidden / base.hidden;
    shape.layers = std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(shape.hidden) / aspect + 0.5));
    return fits_as(family_template.name + " scaled to hidden " + std::to_string(shape.hidden) + ", " +
                       std::to_string(shape.layers) + " layers",
                   shape, cluster, applied, choice, margin);
  });

  if (!by_layers) return by_width;
  if (!by_width) return by_layers;
  return by_width->params() > by_layers->params() ? by_width : by_layers;
}

}  // namespace zeroplan
