#include "core/parallel_ranges.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

namespace zeroplan {

void for_each_range(std::int64_t count, int threads, std::int64_t min_piece,
                    const std::function<void(std::int64_t, std::int64_t)>& piece) {
  if (count <= 0) return;
  const std::int64_t by_size = std::max<std::int64_t>(1, count / std::max<std::int64_t>(1, min_piece));
  const std::int64_t pieces = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, by_size));
  if (pieces == 1) {
    piece(0, count);
    return;
  }
  const auto bounds = [count, pieces](std::int64_t p) { return count / pieces * p + std::min(p, count % pieces); };
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(pieces));
  const auto run = [&](std::int64_t p) {
    try {
      piece(bounds(p), bounds(p + 1));
    } catch (...) {
      errors[static_cast<std::size_t>(p)] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(pieces - 1));
  for (std::int64_t p = 1; p < pieces; ++p) workers.emplace_back(run, p);
  run(0);
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace zeroplan
