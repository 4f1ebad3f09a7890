// Dynamic loss scaling for fp16 with DeepSpeed's semantics (deepspeed/runtime/fp16/loss_scaler.py,
// DynamicLossScaler.update_scale, scale_factor 2):
//   overflow: if hysteresis is exhausted (delayed_shift == 1 or cur_hysteresis == 1) the scale halves (not
//             below min_scale; at min_scale DeepSpeed raises, raise_error_at_min_scale=True, and so do we),
//             otherwise cur_hysteresis -= 1; the step is skipped; last_overflow_iter = cur_iter.
//   no overflow: with consecutive_hysteresis the hysteresis budget is restored at once (so only overflows in a row
//             lower the scale); every scale_window iterations since the last overflow the scale doubles, and
//             without consecutive_hysteresis the budget is restored then.
// A static scale (loss_scale > 0) never changes; overflow still skips the step.
#pragma once

#include <cstdint>

#include "exec/exec_config.h"

namespace zeroplan::exec {

// Everything the scaler carries from step to step (checkpoints).
struct LossScalerState {
  double scale = 1.0;
  std::int64_t cur_iter = 0;
  std::int64_t last_overflow_iter = -1;
  std::int64_t cur_hysteresis = 1;
  std::int64_t skipped = 0;
};

class LossScaler {
 public:
  LossScaler(ExecPrecision precision, const LossScaleSettings& settings);

  double scale() const { return scale_; }
  // Record one optimizer step's overflow check; returns true when the step must be skipped.
  bool update(bool overflow);
  std::int64_t skipped_steps() const { return skipped_; }
  LossScalerState state() const { return {scale_, cur_iter_, last_overflow_iter_, cur_hysteresis_, skipped_}; }
  void restore(const LossScalerState& s) {
    scale_ = s.scale;
    cur_iter_ = s.cur_iter;
    last_overflow_iter_ = s.last_overflow_iter;
    cur_hysteresis_ = s.cur_hysteresis;
    skipped_ = s.skipped;
  }

 private:
  bool dynamic_ = false;
  double scale_ = 1.0;
  LossScaleSettings settings_;
  std::int64_t cur_iter_ = 0;
  std::int64_t last_overflow_iter_ = -1;
  std::int64_t cur_hysteresis_ = 1;
  std::int64_t skipped_ = 0;
};

}  // namespace zeroplan::exec
