// Collective bytes per optimizer step as `zeroplan run` reports them beside the plan: the counters' growth over the
// timed steps that applied their update. A step that fp16's dynamic loss scaler skips on overflow (DeepSpeed's
// fp16 block, exec/loss_scaler.h) runs its forward and backward collectives but gathers no updated parameters, so
// it is not an optimizer step of the plan's; counting it would put the all-gather bytes below the plan's (ResNet-101
// fp16 stage 2 on two H200: 73.7 MB measured over all steps against 85.0 MB per applied step).
#pragma once

#include <array>
#include <cstdint>

#include "exec/comm/communicator.h"

namespace zeroplan {

class AppliedStepComm {
 public:
  // One timed step: the counters before and after it, and whether the loss scaler skipped its update.
  void add(const exec::CommCounters& before, const exec::CommCounters& after, bool skipped) {
    if (skipped) {
      ++skipped_;
      return;
    }
    ++applied_;
    for (std::size_t k = 0; k < bytes_.size(); ++k) bytes_[k] += after.bytes[k] - before.bytes[k];
  }
  // Mean bytes of collective kind `kind` per applied step (0 when no timed step applied its update).
  std::int64_t per_step(int kind) const {
    return applied_ > 0 ? bytes_[static_cast<std::size_t>(kind)] / applied_ : 0;
  }
  std::int64_t applied() const { return applied_; }
  std::int64_t skipped() const { return skipped_; }

 private:
  std::array<std::int64_t, exec::kCommKinds> bytes_{};
  std::int64_t applied_ = 0, skipped_ = 0;
};

}  // namespace zeroplan
