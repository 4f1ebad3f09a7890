// ZeRO stage 3's parameter fetch schedule, computed once from the order in which the model uses its units
// (embeddings, each block, the final norm, ...): which units' all-gathers are issued before each use (the unit
// itself when it is not resident, then the prefetch), which gathered units are released after it, and where in
// one gathered-parameter arena each gather lands.
//
// The executor's ZeRO engine (exec/zero/zero_engine.cpp) runs exactly this plan, and the planner's
// `--engine zeroplan` model (sim/) reads its gather volume and arena size from it, so predicted and measured
// bytes and gathered-parameter memory agree by construction of one rule, not by two formulas kept in step.
//
// The rules follow DeepSpeed's PartitionedParameterCoordinator (deepspeed/runtime/zero/
// partitioned_param_coordinator.py, fetch_sub_module / release_sub_module) with its config fields
// (docs: "ZeRO optimizations", stage3_*):
//   prefetch   after the unit in use is resident, the next units of the schedule that are not resident are
//              gathered ahead while the elements gathered and not yet used stay within
//              stage3_prefetch_bucket_size; the first unit ahead is always prefetched when the bucket is > 0,
//              even if larger than it (a larger-than-bucket unit would otherwise never overlap; DeepSpeed
//              splits such a module's parameters instead);
//   kept units (ours, not DeepSpeed's) units still gathered from an earlier use (the reuse rule kept them) that the
//              schedule uses before a unit to gather count toward the bucket as prefetched ones do, so the first
//              unit to gather is "first ahead" only when nothing gathered lies between it and the unit in use.
//              DeepSpeed's coordinator skips available parameters when it fills its prefetch (partitioned_param_
//              coordinator.py fetch_sub_module): at a transformer's turn from forward to backward, with the last
//              blocks kept, it gathers the first block not kept as well, at the activations' peak (Llama-2 7B:
//              block 29 beside blocks 30, 31 and the head, 738M elements gathered where 536M serve). FSDP2
//              prefetches one module ahead, gathered or not;
//   live bound no prefetch that would make the gathered elements exceed stage3_max_live_parameters (the unit
//              in use is always gathered);
//   units ahead (ours, not DeepSpeed's) at most max_units_ahead units gathered ahead of their use at once, where
//              the engine sets it: the prefetch then comes a unit or two per use instead of in one burst;
//   reuse      after its use a unit stays gathered when its next use in the schedule comes within
//              stage3_max_reuse_distance elements of other units' uses, otherwise it is released;
//   persistence units (or parts) below stage3_param_persistence_threshold are never gathered: their size here
//              is 0 and the engine keeps them whole.
// Arena placement is first fit over the offsets freed by releases, so the arena's size is the plan's peak
// including fragmentation.
#pragma once

#include <cstdint>
#include <vector>

namespace zeroplan {

struct Zero3FetchRules {
  std::int64_t prefetch_elements = 50'000'000;      // stage3_prefetch_bucket_size (DeepSpeed default 5e7)
  std::int64_t max_live_elements = 1'000'000'000;   // stage3_max_live_parameters (default 1e9)
  std::int64_t max_reuse_distance = 1'000'000'000;  // stage3_max_reuse_distance (default 1e9)
  int max_units_ahead = 0;                          // units gathered ahead of their use at once; 0: no bound
};

struct Zero3Gather {
  int unit = 0;
  std::int64_t arena_offset = 0;  // elements
  bool prefetch = false;          // issued ahead of its use (false: the use waits for it)
};

struct Zero3UseStep {
  int unit = 0;                      // the unit this use computes with
  std::vector<Zero3Gather> gathers;  // issued at this use, before its compute
  std::vector<int> releases;         // released once this use's compute is done
};

struct Zero3FetchPlan {
  std::vector<Zero3UseStep> steps;             // one per use, in order
  // Each unit's span in the arena (0: persistent, never gathered). The executor gathers only the partitioned
  // buckets inside it; persistent tensors between them leave holes (sim/executor_layout.cpp counts the volume).
  std::vector<std::int64_t> unit_elements;
  std::int64_t arena_elements = 0;             // the arena's size: highest end offset of any gather
  std::int64_t peak_live_elements = 0;         // most elements gathered at once
  std::int64_t gathered_elements = 0;          // sum over gathers of their units' spans in one pass
  std::int64_t gathers = 0;                    // all-gather operations (one per unit gather) in one pass
};

// `unit_elements[u]`: what gathering unit u brings (0 for a unit that is never gathered); `uses`: the units in
// the order the model computes with them (a unit may appear several times). Every unit still gathered after
// the last use is released there. Throws std::invalid_argument on a unit index out of range or negative sizes.
Zero3FetchPlan make_zero3_fetch_plan(const std::vector<std::int64_t>& unit_elements, const std::vector<int>& uses,
                                     const Zero3FetchRules& rules);

}  // namespace zeroplan
