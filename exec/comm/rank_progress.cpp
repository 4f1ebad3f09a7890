#include "exec/comm/rank_progress.h"

#include <chrono>
#include <cstdio>

namespace zeroplan::exec {

namespace {
std::int64_t to_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
std::int64_t now_ns() { return to_ns(std::chrono::steady_clock::now()); }
}  // namespace

RankProgress::RankProgress() { touch(); }

void RankProgress::touch() { changed_ns_.store(now_ns(), std::memory_order_relaxed); }

void RankProgress::set_step(std::int64_t step) {
  step_.store(step, std::memory_order_relaxed);
  touch();
}

void RankProgress::set_phase(const char* phase) {
  phase_.store(phase, std::memory_order_relaxed);
  touch();
}

std::int64_t RankProgress::count_collective() { return collectives_.fetch_add(1, std::memory_order_relaxed) + 1; }

void RankProgress::set_waiting(const char* collective, std::int64_t ordinal,
                               std::chrono::steady_clock::time_point since) {
  // Ordinal and time first: a reader that sees the name sees them (release/acquire on collective_).
  ordinal_.store(ordinal, std::memory_order_relaxed);
  waiting_since_ns_.store(to_ns(since), std::memory_order_relaxed);
  touch();
  collective_.store(collective, std::memory_order_release);
}

RankProgress::Snapshot RankProgress::snapshot() const {
  Snapshot s;
  s.collective = collective_.load(std::memory_order_acquire);
  s.ordinal = ordinal_.load(std::memory_order_relaxed);
  s.step = step_.load(std::memory_order_relaxed);
  s.phase = phase_.load(std::memory_order_relaxed);
  s.collectives = collectives_.load(std::memory_order_relaxed);
  const std::int64_t since = s.collective ? waiting_since_ns_.load(std::memory_order_relaxed)
                                          : changed_ns_.load(std::memory_order_relaxed);
  s.seconds_in_state = 1e-9 * static_cast<double>(now_ns() - since);
  return s;
}

std::string describe(const RankProgress::Snapshot& s) {
  char text[256];
  if (s.collective)
    std::snprintf(text, sizeof text, "step %lld, phase %s, waiting in %s #%lld for %.1f s",
                  static_cast<long long>(s.step), s.phase, s.collective, static_cast<long long>(s.ordinal),
                  s.seconds_in_state);
  else
    std::snprintf(text, sizeof text, "step %lld, phase %s, outside any collective for %.1f s (%lld collectives issued)",
                  static_cast<long long>(s.step), s.phase, s.seconds_in_state, static_cast<long long>(s.collectives));
  return text;
}

}  // namespace zeroplan::exec
