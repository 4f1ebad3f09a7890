// Formatting for --explain formulas: integers with thousands separators ("1,557,611,200"), so a reader can
// check each substituted number against its source. Used only on the explain path, never the fast path.
#pragma once

#include <cstdint>
#include <string>

namespace zeroplan {

std::string num(std::int64_t value);
std::string num(double value, int decimals);

}  // namespace zeroplan
