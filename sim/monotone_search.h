// The largest integer in [1, limit] for which a monotone predicate holds (true up to some point, false after):
// gallop to bracket the answer, then bisect, O(log answer) evaluations. 0 when it fails at 1. The planner's
// micro-batch searches (memory model and timeline) both use it.
#pragma once

#include <cstdint>

namespace zeroplan {

template <typename Predicate>
std::int64_t largest_satisfying(std::int64_t limit, Predicate holds) {
  if (limit < 1 || !holds(std::int64_t{1})) return 0;
  std::int64_t low = 1, high = 2;  // holds(low); !holds(high) once the gallop stops
  while (high <= limit && holds(high)) {
    low = high;
    high *= 2;
  }
  if (high > limit) {
    if (holds(limit)) return limit;
    high = limit;
  }
  while (high - low > 1) {
    const std::int64_t mid = low + (high - low) / 2;
    (holds(mid) ? low : high) = mid;
  }
  return low;
}

}  // namespace zeroplan
