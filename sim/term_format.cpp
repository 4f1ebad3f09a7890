#include "sim/term_format.h"

#include <cstdio>

namespace zeroplan {

std::string num(std::int64_t value) {
  const bool negative = value < 0;
  const std::uint64_t magnitude =
      negative ? std::uint64_t{0} - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
  const std::string digits = std::to_string(magnitude);
  std::string grouped;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    grouped += digits[i];
    if ((n - i - 1) % 3 == 0 && i != n - 1) grouped += ',';
  }
  return negative ? "-" + grouped : grouped;
}

std::string num(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

}  // namespace zeroplan
