#include "sim/deepspeed_param_coordinator.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "sim/parameter_tensors.h"
#include "sim/saturating.h"
#include "sim/zero_schedule.h"

namespace zeroplan {

namespace {

constexpr std::int32_t kNoUnit = -1;

// A module's partitioned parameters: what one coalesced all-gather brings.
struct Unit {
  std::int32_t layer = 0;
  std::int64_t elements = 0;
};

// One module call of the trace (one __step_id).
struct Call {
  std::int32_t position = 0;
  bool forward = true;
  std::int32_t unit = kNoUnit;  // the partitioned parameters it uses, if any
  std::int64_t numel = 0;       // every parameter element it uses, persistent ones too (the reuse walk)
};

// The gathered sizes of a layer's modules in forward order: a transformer's weight tensors above the persistence
// threshold (mark_persistent_parameters works per tensor), when they add up to what the memory model gathers for
// the layer; otherwise that figure split evenly over the layer's modules.
std::vector<std::int64_t> module_units(const ModelDescription& model, const LayerDescription& layer,
                                       const ZeroConfig& zero) {
  const std::int64_t gathered = layer.params - persistent_params(layer, zero);
  std::vector<std::int64_t> units;
  if (gathered <= 0) return units;
  if (model.transformer) {
    const std::int64_t threshold = zero.param_persistence_threshold;
    std::int64_t sum = 0;
    for_each_parameter_tensor(model, layer, [&](std::int64_t numel) {
      if (threshold > 0 && numel <= threshold) return;
      units.push_back(numel);
      sum = sat_add(sum, numel);
    });
    if (sum == gathered) return units;
    units.clear();
  }
  const std::int64_t count = std::max<std::int64_t>(1, gathered_module_count(layer, zero));
  for (std::int64_t m = 0; m < count; ++m) {
    const std::int64_t share = gathered / count + (m < gathered % count ? 1 : 0);
    if (share > 0) units.push_back(share);
  }
  return units;
}

class CoordinatorReplayer {
 public:
  CoordinatorReplayer(const ModelDescription& model, const ZeroConfig& zero) : model_(model), zero_(zero) {}

  CoordinatorReplay run() {
    build_trace();
    const std::size_t layer_count = model_.layers.size();
    replay_.forward.assign(layer_count, {});
    replay_.backward.assign(layer_count, {});
    if (units_.empty()) return replay_;
    replay_steps();
    return replay_;
  }

 private:
  void build_trace() {
    const std::vector<LayerDescription>& layers = model_.layers;
    const auto layer_count = static_cast<std::int32_t>(layers.size());
    std::vector<std::vector<std::int32_t>> layer_units(layers.size());
    std::vector<std::int64_t> persistent(layers.size(), 0);
    // A transformer's blocks are alike: their modules are worked out once (the planner runs this for every
    // configuration it evaluates).
    std::vector<std::int64_t> block_units;
    bool have_block_units = false;
    for (std::int32_t i = 0; i < layer_count; ++i) {
      const LayerDescription& layer = layers[static_cast<std::size_t>(i)];
      const bool block = model_.transformer && layer.kind == "transformer_block";
      if (block && !have_block_units) {
        block_units = module_units(model_, layer, zero_);
        have_block_units = true;
      }
      std::int64_t gathered = 0;
      for (std::int64_t elements : block ? block_units : module_units(model_, layer, zero_)) {
        layer_units[static_cast<std::size_t>(i)].push_back(static_cast<std::int32_t>(units_.size()));
        units_.push_back({i, elements});
        gathered = sat_add(gathered, elements);
      }
      persistent[static_cast<std::size_t>(i)] = std::max<std::int64_t>(0, layer.params - gathered);
    }
    // A tied output head computes with the token embedding's table (the embedding layer's first tensor) after
    // the last layer's forward and before its backward.
    std::int32_t head_unit = kNoUnit;
    if (model_.transformer && model_.transformer->tied_embeddings && !layers.empty() &&
        layers.front().kind == "embedding" && !layer_units.front().empty())
      head_unit = layer_units.front().front();

    const auto add_layer = [&](std::int32_t layer, std::int32_t position, bool forward) {
      std::vector<std::int32_t> ids = layer_units[static_cast<std::size_t>(layer)];
      if (!forward) std::reverse(ids.begin(), ids.end());
      const LayerDescription& description = layers[static_cast<std::size_t>(layer)];
      const auto calls = static_cast<std::size_t>(std::max<std::int64_t>(
          description.module_calls, static_cast<std::int64_t>(ids.size())));
      // The layer's own call comes first when it has one (a block's hooks fire before its children's) and
      // carries the persistent parameters' elements; the parameterless calls (activations, dropouts) last.
      const std::size_t spare = calls - ids.size();
      std::int64_t persistent_numel = persistent[static_cast<std::size_t>(layer)];
      if (spare > 0) {
        calls_.push_back({position, forward, kNoUnit, persistent_numel});
        persistent_numel = 0;
      }
      for (std::int32_t unit : ids) {
        calls_.push_back({position, forward, unit, sat_add(units_[static_cast<std::size_t>(unit)].elements,
                                                           persistent_numel)});
        persistent_numel = 0;
      }
      for (std::size_t c = 1; c < spare; ++c) calls_.push_back({position, forward, kNoUnit, 0});
    };
    for (std::int32_t i = 0; i < layer_count; ++i) {
      add_layer(i, i, true);
      if (i + 1 == layer_count && head_unit != kNoUnit)
        calls_.push_back({i, true, head_unit, units_[static_cast<std::size_t>(head_unit)].elements});
    }
    for (std::int32_t position = 0; position < layer_count; ++position) {
      if (position == 0 && head_unit != kNoUnit)
        calls_.push_back({0, false, head_unit, units_[static_cast<std::size_t>(head_unit)].elements});
      add_layer(layer_count - 1 - position, position, false);
    }
  }

  CoordinatorPosition& position_of(const Call& call) {
    return (call.forward ? replay_.forward : replay_.backward)[static_cast<std::size_t>(call.position)];
  }

  // One all-gather issued at `call`'s position, merged with the layer's others there of the same kind.
  void record_gather(const Call& call, std::int32_t unit, bool prefetch) {
    const Unit& u = units_[static_cast<std::size_t>(unit)];
    replay_.gathered_elements = sat_add(replay_.gathered_elements, u.elements);
    ++replay_.gathered_modules;
    std::vector<CoordinatorGather>& gathers = position_of(call).gathers;
    const auto same = std::find_if(gathers.begin(), gathers.end(), [&](const CoordinatorGather& g) {
      return g.layer == u.layer && g.prefetch == prefetch;
    });
    if (same != gathers.end()) {
      same->elements = sat_add(same->elements, u.elements);
      ++same->modules;
    } else {
      gathers.push_back({u.layer, u.elements, 1, prefetch});
    }
  }

  void record_release(const Call& call, std::int32_t unit) {
    const Unit& u = units_[static_cast<std::size_t>(unit)];
    std::vector<CoordinatorRelease>& releases = position_of(call).releases;
    const auto same = std::find_if(releases.begin(), releases.end(),
                                   [&](const CoordinatorRelease& r) { return r.layer == u.layer; });
    if (same != releases.end()) {
      same->elements = sat_add(same->elements, u.elements);
    } else {
      releases.push_back({u.layer, u.elements});
    }
  }

  void replay_steps() {
    const std::size_t steps = calls_.size();
    // The parameter queue (construct_parameter_trace_from_module_trace): each call's parameters with its step.
    struct Entry {
      std::int32_t unit;
      std::int64_t step;
    };
    std::vector<Entry> queue;
    for (std::size_t s = 0; s < steps; ++s)
      if (calls_[s].unit != kNoUnit) queue.push_back({calls_[s].unit, static_cast<std::int64_t>(s)});
    // The reuse walk as prefix sums: walked[s] is the elements of calls [0, s); next_use[s] the next call after s
    // that uses call s's unit.
    std::vector<std::int64_t> walked{0};
    walked.reserve(steps + 1);
    for (std::size_t s = 0; s < steps; ++s) walked.push_back(sat_add(walked.back(), calls_[s].numel));
    std::vector<std::int64_t> next_use(steps, -1);
    std::vector<std::int64_t> upcoming(units_.size(), -1);
    for (std::size_t s = steps; s-- > 0;) {
      const std::int32_t unit = calls_[s].unit;
      if (unit == kNoUnit) continue;
      next_use[s] = upcoming[static_cast<std::size_t>(unit)];
      upcoming[static_cast<std::size_t>(unit)] = static_cast<std::int64_t>(s);
    }

    std::vector<bool> available(units_.size(), false);
    std::vector<std::int64_t> fetched_for(units_.size(), std::numeric_limits<std::int64_t>::min());
    std::vector<std::int64_t> prefetched_in(units_.size(), -1);  // the step whose prefetch took the unit
    std::vector<std::int32_t> prefetched;  // one prefetch's units
    std::int64_t live = 0;  // __n_available_params
    std::size_t head = 0;
    const auto gather = [&](const Call& call, std::int32_t unit, bool prefetch) {
      available[static_cast<std::size_t>(unit)] = true;
      live = sat_add(live, units_[static_cast<std::size_t>(unit)].elements);
      replay_.peak_live_elements = std::max(replay_.peak_live_elements, live);
      record_gather(call, unit, prefetch);
    };
    const auto release = [&](const Call& call, std::int32_t unit) {
      available[static_cast<std::size_t>(unit)] = false;
      live -= units_[static_cast<std::size_t>(unit)].elements;
      record_release(call, unit);
    };

    for (std::size_t s = 0; s < steps; ++s) {
      const Call& call = calls_[s];
      const auto step = static_cast<std::int64_t>(s);
      const std::int32_t own = call.unit;
      // The module's own parameters, fetched when not available; its own queue entry popped unless an earlier
      // prefetch popped it.
      if (own != kNoUnit) {
        if (!available[static_cast<std::size_t>(own)]) gather(call, own, false);
        if (fetched_for[static_cast<std::size_t>(own)] < step && head < queue.size() && queue[head].step == step) {
          fetched_for[static_cast<std::size_t>(own)] = step;
          ++head;
        }
      }
      // The prefetch: pop until the NOT_AVAILABLE elements taken reach the budget.
      if (zero_.prefetch_bucket_size > 0) {
        const std::int64_t budget = std::min(zero_.max_live_parameters - live, zero_.prefetch_bucket_size);
        std::int64_t taken = 0;
        prefetched.clear();
        while (head < queue.size() && taken < budget) {
          const Entry entry = queue[head++];
          const auto unit = static_cast<std::size_t>(entry.unit);
          fetched_for[unit] = std::max(fetched_for[unit], entry.step);
          if (available[unit] || prefetched_in[unit] == step) continue;
          prefetched_in[unit] = step;
          prefetched.push_back(entry.unit);
          taken = sat_add(taken, units_[unit].elements);
        }
        for (std::int32_t unit : prefetched) gather(call, unit, true);
      }
      // release_sub_module after the call (its __step_id is now s + 1).
      if (own != kNoUnit && available[static_cast<std::size_t>(own)]) {
        const bool marked = fetched_for[static_cast<std::size_t>(own)] > step + 1;
        const bool reused = next_use[s] >= 0 &&
                            walked[static_cast<std::size_t>(next_use[s])] - walked[s + 1] < zero_.max_reuse_distance;
        if (!marked && !reused) release(call, own);
      }
    }
    // What is still gathered at the end of the backward is released there (reset_step).
    for (std::size_t u = 0; u < units_.size(); ++u)
      if (available[u]) release(calls_.back(), static_cast<std::int32_t>(u));
  }

  const ModelDescription& model_;
  const ZeroConfig& zero_;
  std::vector<Unit> units_;
  std::vector<Call> calls_;
  CoordinatorReplay replay_;
};

// What the replay reads of the model and the ZeRO settings: two inputs that agree in all of it replay alike.
struct ReplayKey {
  std::array<std::int64_t, 4> zero{};
  std::optional<TransformerShape> transformer;
  std::vector<LayerDescription> layers;  // names aside

  static bool same_layer(const LayerDescription& a, const LayerDescription& b) {
    return a.params == b.params && a.largest_module_params == b.largest_module_params &&
           a.module_count == b.module_count && a.module_calls == b.module_calls &&
           a.small_module_params == b.small_module_params && a.kind == b.kind;
  }
  static bool same_shape(const TransformerShape& a, const TransformerShape& b) {
    return a.family == b.family && a.vocab_size == b.vocab_size && a.hidden == b.hidden && a.heads == b.heads &&
           a.kv_heads == b.kv_heads && a.ffn_hidden == b.ffn_hidden && a.max_seq == b.max_seq && a.norm == b.norm &&
           a.activation == b.activation && a.attention_bias == b.attention_bias &&
           a.attention_output_bias == b.attention_output_bias && a.mlp_bias == b.mlp_bias &&
           a.tied_embeddings == b.tied_embeddings && a.learned_positions == b.learned_positions &&
           a.embedding_norm == b.embedding_norm;
  }
  static std::array<std::int64_t, 4> zero_fields(const ZeroConfig& zero) {
    return {zero.param_persistence_threshold, zero.prefetch_bucket_size, zero.max_live_parameters,
            zero.max_reuse_distance};
  }
  bool matches(const ModelDescription& model, const ZeroConfig& z) const {
    if (zero != zero_fields(z) || transformer.has_value() != model.transformer.has_value()) return false;
    if (transformer && !same_shape(*transformer, *model.transformer)) return false;
    return std::equal(layers.begin(), layers.end(), model.layers.begin(), model.layers.end(), same_layer);
  }
};

}  // namespace

std::shared_ptr<const CoordinatorReplay> replay_deepspeed_param_coordinator(const ModelDescription& model,
                                                                            const ZeroConfig& zero) {
  // The planner's searches plan one model with one set of ZeRO settings thousands of times (every stage-3
  // configuration, every micro-batch tried): the last replay is kept per thread and given again for the same key.
  // The key is the inputs' content, so no result depends on what was planned before.
  struct Memo {
    ReplayKey key;
    std::shared_ptr<const CoordinatorReplay> replay;
  };
  thread_local Memo memo;
  if (!memo.replay || !memo.key.matches(model, zero)) {
    memo.replay = std::make_shared<const CoordinatorReplay>(CoordinatorReplayer(model, zero).run());
    memo.key = {ReplayKey::zero_fields(zero), model.transformer, model.layers};
  }
  return memo.replay;
}

}  // namespace zeroplan
