#include "core/zero3_fetch_plan.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace zeroplan {

namespace {

// First-fit placement of gathered units in one arena; live allocations are few (the units in flight).
class ArenaPlacement {
 public:
  std::int64_t allocate(int unit, std::int64_t elements) {
    std::int64_t offset = 0;
    for (const auto& [begin, end_unit] : live_) {  // sorted by offset
      if (begin - offset >= elements) break;
      offset = std::max(offset, begin + end_unit.first);
    }
    live_.emplace(offset, std::make_pair(elements, unit));
    high_ = std::max(high_, offset + elements);
    return offset;
  }
  void release(int unit) {
    for (auto it = live_.begin(); it != live_.end(); ++it)
      if (it->second.second == unit) {
        live_.erase(it);
        return;
      }
    throw std::logic_error("zero3 fetch plan: release of a unit that holds no arena range");
  }
  std::int64_t high() const { return high_; }

 private:
  std::map<std::int64_t, std::pair<std::int64_t, int>> live_;  // offset -> (elements, unit)
  std::int64_t high_ = 0;
};

}  // namespace

Zero3FetchPlan make_zero3_fetch_plan(const std::vector<std::int64_t>& unit_elements, const std::vector<int>& uses,
                                     const Zero3FetchRules& rules) {
  const int units = static_cast<int>(unit_elements.size());
  for (int u = 0; u < units; ++u)
    if (unit_elements[u] < 0) throw std::invalid_argument("zero3 fetch plan: unit " + std::to_string(u) + " has negative size");
  for (int u : uses)
    if (u < 0 || u >= units) throw std::invalid_argument("zero3 fetch plan: use of unit " + std::to_string(u) +
                                                         " outside [0, " + std::to_string(units) + ")");
  if (rules.prefetch_elements < 0 || rules.max_live_elements < 0 || rules.max_reuse_distance < 0 ||
      rules.max_units_ahead < 0)
    throw std::invalid_argument("zero3 fetch plan: negative prefetch, live, reuse or units-ahead bound");

  Zero3FetchPlan plan;
  plan.unit_elements = unit_elements;
  std::vector<bool> resident(units, false), ahead(units, false);  // ahead: gathered, its use not reached yet
  std::int64_t live = 0, ahead_elements = 0;
  int ahead_units = 0;
  ArenaPlacement arena;
  std::vector<int> counted;  // kept units already counted toward the bucket at this use
  const int n = static_cast<int>(uses.size());

  auto gather = [&](Zero3UseStep& step, int unit, bool prefetch) {
    const std::int64_t e = unit_elements[unit];
    step.gathers.push_back(Zero3Gather{unit, arena.allocate(unit, e), prefetch});
    resident[unit] = true;
    live += e;
    plan.peak_live_elements = std::max(plan.peak_live_elements, live);
    plan.gathered_elements += e;
    ++plan.gathers;
    if (prefetch) {
      ahead[unit] = true;
      ahead_elements += e;
      ++ahead_units;
    }
  };
  auto release = [&](Zero3UseStep& step, int unit) {
    arena.release(unit);
    resident[unit] = false;
    live -= unit_elements[unit];
    step.releases.push_back(unit);
  };

  for (int i = 0; i < n; ++i) {
    Zero3UseStep step;
    const int u = uses[i];
    step.unit = u;
    if (unit_elements[u] > 0) {
      if (!resident[u]) gather(step, u, false);
      if (ahead[u]) {
        ahead[u] = false;
        ahead_elements -= unit_elements[u];
        --ahead_units;
      }
      // Prefetch the next units not resident, within the prefetch bucket (with the kept units the schedule uses
      // before them) and the live bound.
      if (rules.prefetch_elements > 0) {
        std::int64_t kept_ahead = 0;
        counted.clear();
        for (int j = i + 1; j < n; ++j) {
          const int v = uses[j];
          const std::int64_t e = unit_elements[v];
          if (e == 0 || v == u) continue;
          if (resident[v]) {
            if (!ahead[v] && std::find(counted.begin(), counted.end(), v) == counted.end()) {
              counted.push_back(v);
              kept_ahead += e;
            }
            if (ahead_elements + kept_ahead >= rules.prefetch_elements) break;  // the bucket is full
            continue;
          }
          const std::int64_t window = ahead_elements + kept_ahead;
          const bool first_ahead = window == 0;
          if (!first_ahead && window + e > rules.prefetch_elements) break;
          if (rules.max_units_ahead > 0 && ahead_units >= rules.max_units_ahead) break;
          if (live + e > rules.max_live_elements) break;
          gather(step, v, true);
        }
      }
      // Keep the unit when its next use comes within the reuse distance; otherwise release it.
      std::int64_t distance = 0;
      int next = -1;
      for (int j = i + 1; j < n; ++j) {
        if (uses[j] == u) {
          next = j;
          break;
        }
        distance += unit_elements[uses[j]];
        if (distance > rules.max_reuse_distance) break;
      }
      if (next < 0 || distance > rules.max_reuse_distance) release(step, u);
    }
    plan.steps.push_back(std::move(step));
  }
  // End of the schedule: nothing stays gathered (the optimizer step changes every partition).
  if (!plan.steps.empty())
    for (int u = 0; u < units; ++u)
      if (resident[u]) release(plan.steps.back(), u);
  plan.arena_elements = arena.high();
  return plan;
}

}  // namespace zeroplan
