// Saturating int64 arithmetic for byte counts: absurd inputs (a million-sample micro-batch at a 1M-token
// sequence) must give "does not fit", never a wrapped negative total. Saturates at kSaturatedBytes, far
// above any real capacity and with room to add a few more saturated terms without overflow.
#pragma once

#include <cstdint>

namespace zeroplan {

inline constexpr std::int64_t kSaturatedBytes = std::int64_t{1} << 60;

inline std::int64_t sat_mul(std::int64_t a, std::int64_t b) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product) || product > kSaturatedBytes) return kSaturatedBytes;
  return product;
}
inline std::int64_t sat_mul(std::int64_t a, std::int64_t b, std::int64_t c) { return sat_mul(sat_mul(a, b), c); }
inline std::int64_t sat_add(std::int64_t a, std::int64_t b) {
  const std::int64_t sum = a + b;  // both <= 2^60: no overflow
  return sum > kSaturatedBytes ? kSaturatedBytes : sum;
}
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace zeroplan
