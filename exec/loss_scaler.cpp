#include "exec/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace zeroplan::exec {

LossScaler::LossScaler(ExecPrecision precision, const LossScaleSettings& settings) : settings_(settings) {
  if (precision != ExecPrecision::fp16) {
    scale_ = 1.0;  // bf16 and fp32 have fp32's exponent range: no scaling (DeepSpeed's bf16 path has none)
    return;
  }
  if (settings.static_scale > 0) {
    scale_ = settings.static_scale;
  } else {
    dynamic_ = true;
    scale_ = std::pow(2.0, settings.initial_scale_power);
    cur_hysteresis_ = settings.hysteresis;
  }
}

bool LossScaler::update(bool overflow) {
  if (overflow) ++skipped_;
  if (!dynamic_) {
    ++cur_iter_;
    return overflow;
  }
  if (overflow) {
    if (settings_.hysteresis == 1 || cur_hysteresis_ == 1) {
      if (scale_ <= settings_.min_scale)
        throw std::runtime_error("fp16 loss scale is at min_loss_scale (" + std::to_string(settings_.min_scale) +
                                 ") and the gradients still overflow (DeepSpeed raises here too)");
      scale_ = std::max(scale_ / 2.0, settings_.min_scale);
    } else {
      --cur_hysteresis_;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (settings_.consecutive_hysteresis) cur_hysteresis_ = settings_.hysteresis;
    if ((cur_iter_ - last_overflow_iter_) % settings_.scale_window == 0) {
      if (!settings_.consecutive_hysteresis) cur_hysteresis_ = settings_.hysteresis;
      scale_ *= 2.0;
    }
  }
  ++cur_iter_;
  return overflow;
}

}  // namespace zeroplan::exec
