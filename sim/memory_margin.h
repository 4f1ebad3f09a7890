// The safety margin the verdict keeps (issue 13): a plan whose predicted GPU peak is within the memory model's
// own error of the capacity is not a safe answer, so a plan fits only when its predicted peak plus the margin
// (a fraction of that peak) is within the GPU's memory. By default the fraction is the measured error of the
// memory model of the engine planned for (default_memory_margin says which measurements); `--margin` sets
// another.
#pragma once

#include <optional>
#include <string>

#include "core/training_config.h"
#include "core/units.h"

namespace zeroplan {

struct MemoryMargin {
  double fraction = 0.0;  // of the predicted GPU peak, in [0, 1)
  std::string source;     // where the figure comes from, said beside every verdict
};

// The measured error of the engine's memory model: its largest relative error, either way, of the predicted
// device-used peak against the measurements named in `source`.
MemoryMargin default_memory_margin(TrainingEngine engine);

// The margin given (a fraction, validated: finite, in [0, 1)) or else the engine's default.
MemoryMargin resolve_memory_margin(const std::optional<double>& given, TrainingEngine engine);

// Throws InputError(source, field) unless the fraction is finite and in [0, 1).
void require_valid_margin(double fraction, const std::string& source, const std::string& field);

// The bytes kept free above a predicted peak: ceil(fraction * demand), saturating.
Bytes margin_bytes(Bytes demand, double fraction);
// Whether demand plus its margin is within the capacity.
bool fits_with_margin(Bytes demand, Bytes capacity, double fraction);

}  // namespace zeroplan
