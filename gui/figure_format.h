// How the measured view writes figures, the same in every table: memory in one unit per table (named in the
// row headers; GiB = 2^30 bytes), exact bytes with thousands separators, times in milliseconds with three
// decimals, errors as signed percentages. English separators whatever the system locale, so a figure reads the
// same on every machine and in the tests.
#pragma once

#include <QString>

#include "core/units.h"

namespace zeroplan {

struct MemoryUnit {
  QString name;        // "GiB", "MiB", "KiB"
  double bytes = 1.0;  // bytes per unit
};

// GiB when the largest figure is at least 1 GiB, else MiB when at least 1 MiB, else KiB: a tiny CPU run's
// megabytes do not all read "0.000 GiB".
MemoryUnit memory_unit_for(Bytes largest);
// "1,234.567" in the unit (three decimals).
QString memory_text(Bytes bytes, const MemoryUnit& unit);
// "1,234,567"
QString bytes_text(Bytes bytes);
// "12.345" (milliseconds, three decimals) for seconds.
QString milliseconds_text(double seconds);
// (predicted - measured) / measured as "+3.7%"; below 0.1% three decimals, so what is left shows its size and
// sign rather than "-0.0%".
QString error_text(double predicted, double measured);

}  // namespace zeroplan
