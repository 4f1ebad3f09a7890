// Units: bytes are 64-bit integers, times are seconds, bandwidths are bytes/s, rates are FLOP/s.
// Formatting helpers always name the unit: GiB = 2^30 bytes (what DeepSpeed prints as "GB"), GB = 1e9 bytes.
#pragma once

#include <cstdint>
#include <string>

namespace zeroplan {

using Bytes = std::int64_t;

inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;
inline constexpr double kGB = 1e9;

inline double to_gib(Bytes bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

// "12.34 GiB" (two decimals); negative values keep their sign.
std::string format_gib(Bytes bytes);
// Chooses B, KiB, MiB, GiB or TiB so the number reads well: "512 B", "3.00 MiB", "1.50 TiB".
std::string format_bytes(Bytes bytes);
// "1.234 s", "12.3 ms", "45.6 us" (microseconds as "us").
std::string format_seconds(double seconds);
// 1557611200 -> "1,557,611,200".
std::string format_integer(std::int64_t value);
// "1.50e9" style counts: "124.4M", "1.56B", "175.0B".
std::string format_count(double count);

}  // namespace zeroplan
