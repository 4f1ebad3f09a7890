#include "core/units.h"

#include <cmath>
#include <cstdio>

namespace zeroplan {

namespace {
std::string printf_string(const char* format, double value, const char* unit) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value, unit);
  return buffer;
}
}  // namespace

std::string format_gib(Bytes bytes) { return printf_string("%.2f %s", to_gib(bytes), "GiB"); }

std::string format_bytes(Bytes bytes) {
  const double magnitude = std::fabs(static_cast<double>(bytes));
  if (magnitude < kKiB) return printf_string("%.0f %s", static_cast<double>(bytes), "B");
  if (magnitude < kMiB) return printf_string("%.2f %s", static_cast<double>(bytes) / kKiB, "KiB");
  if (magnitude < kGiB) return printf_string("%.2f %s", static_cast<double>(bytes) / kMiB, "MiB");
  if (magnitude < 1024.0 * kGiB) return printf_string("%.2f %s", static_cast<double>(bytes) / kGiB, "GiB");
  return printf_string("%.2f %s", static_cast<double>(bytes) / (1024.0 * kGiB), "TiB");
}

std::string format_seconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1.0) return printf_string("%.3f %s", seconds, "s");
  if (magnitude >= 1e-3) return printf_string("%.2f %s", seconds * 1e3, "ms");
  return printf_string("%.1f %s", seconds * 1e6, "us");
}

std::string format_integer(std::int64_t value) {
  const bool negative = value < 0;
  // Work on the unsigned magnitude so INT64_MIN does not overflow.
  std::uint64_t magnitude = negative ? 0 - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
  const std::string digits = std::to_string(magnitude);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

std::string format_count(double count) {
  const double magnitude = std::fabs(count);
  if (magnitude >= 1e12) return printf_string("%.2f%s", count / 1e12, "T");
  if (magnitude >= 1e9) return printf_string("%.2f%s", count / 1e9, "B");
  if (magnitude >= 1e6) return printf_string("%.1f%s", count / 1e6, "M");
  if (magnitude >= 1e3) return printf_string("%.1f%s", count / 1e3, "K");
  return printf_string("%.0f%s", count, "");
}

}  // namespace zeroplan
