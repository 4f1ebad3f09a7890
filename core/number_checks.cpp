#include "core/number_checks.h"

#include <cmath>
#include <sstream>

#include "core/input_error.h"

namespace zeroplan {

namespace {
std::string shown(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}

std::string with_commas(std::int64_t value) {
  const std::string digits = std::to_string(value);
  std::string grouped;
  const std::size_t sign = value < 0 ? 1 : 0;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > sign && (digits.size() - i) % 3 == 0) grouped.push_back(',');
    grouped.push_back(digits[i]);
  }
  return grouped;
}
}  // namespace

double require_finite(double value, const std::string& source, const std::string& field) {
  if (!std::isfinite(value)) throw InputError(source, field, "expected a finite number, got " + shown(value));
  return value;
}

double require_positive(double value, const std::string& source, const std::string& field) {
  require_finite(value, source, field);
  if (!(value > 0.0)) throw InputError(source, field, "expected a positive number (> 0), got " + shown(value));
  return value;
}

double require_non_negative(double value, const std::string& source, const std::string& field) {
  require_finite(value, source, field);
  if (value < 0.0) throw InputError(source, field, "expected a non-negative number (>= 0), got " + shown(value));
  return value;
}

std::int64_t require_positive(std::int64_t value, const std::string& source, const std::string& field) {
  if (value < 1) throw InputError(source, field, "expected a positive integer (>= 1), got " + std::to_string(value));
  return value;
}

std::int64_t require_count_at_most(std::int64_t value, std::int64_t most, const std::string& source,
                                   const std::string& field, const std::string& why) {
  require_positive(value, source, field);
  if (value > most) {
    throw InputError(source, field,
                     "absurd size " + with_commas(value) + ": expected at most " + with_commas(most) + " (" + why + ")");
  }
  return value;
}

void require_tokens_per_micro_step(std::int64_t micro_batch, std::int64_t seq_len, const std::string& source,
                                   const std::string& fields) {
  std::int64_t tokens = 0;
  if (__builtin_mul_overflow(micro_batch, seq_len, &tokens) || tokens > kMaxTokensPerMicroStep) {
    throw InputError(source, fields,
                     "absurd size: micro-batch " + with_commas(micro_batch) + " * sequence " + with_commas(seq_len) +
                         " tokens per GPU per micro-step; expected at most " + with_commas(kMaxTokensPerMicroStep) +
                         " (" + kMaxSizeWhy + ")");
  }
}

}  // namespace zeroplan
