// What both backends' layer-list trainers share (exec/cpu/cpu_network_trainer.cpp, exec/cuda/cuda_network_trainer.cu):
// they train on images, so the token entry points refuse, and the images and labels a step or an evaluation is given
// are checked against the network one way.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/engine_trainer.h"

namespace zeroplan::exec {

class NetworkTrainer : public EngineTrainer {
 public:
  StepResult step(const std::vector<std::int32_t>&, const std::vector<std::int32_t>&) override {
    throw std::invalid_argument("this trainer runs a layer-list network on images (step_images), not tokens");
  }
  double forward_loss(const std::vector<std::int32_t>&, const std::vector<std::int32_t>&) override {
    throw std::invalid_argument("this trainer runs a layer-list network on images, not tokens");
  }
  double forward_backward(const std::vector<std::int32_t>&, const std::vector<std::int32_t>&) override {
    throw std::invalid_argument("this trainer runs a layer-list network on images, not tokens");
  }

 protected:
  // Backward reaching an op of layer `next` (ops run in reverse): the layer left behind has its final gradients
  // (the engine reduces its buckets), the next one's gradients are prepared and its parameters gathered (stage 3).
  static void backward_enter_layer(ZeroEngine& engine, const ParamLayout& layout, std::size_t& layer,
                                   std::size_t next) {
    if (layer < layout.units().size()) engine.gradients_final_from(layout.units()[layer].begin);
    layer = next;
    const ParamUnit& u = layout.units()[layer];
    engine.prepare_gradients(u.begin, u.end);
    engine.params_needed(u.begin, u.end);
  }

  // `count` samples of the network's input shape and their labels, each in [0, classes).
  void check_images(const std::vector<float>& images, const std::vector<std::int32_t>& labels,
                    std::int64_t count) const {
    const NetworkShape& net = *config().network;
    const std::int64_t sample = net.input.elements();
    if (static_cast<std::int64_t>(labels.size()) != count || static_cast<std::int64_t>(images.size()) != count * sample)
      throw std::invalid_argument(backend() + " network trainer: expected " + std::to_string(count) + " images of " +
                                  std::to_string(sample) + " values and their labels");
    for (std::int64_t i = 0; i < count; ++i)
      if (labels[i] < 0 || labels[i] >= net.classes)
        throw std::invalid_argument(backend() + " network trainer: label " + std::to_string(labels[i]) + " at sample " +
                                    std::to_string(i) + " is outside [0, " + std::to_string(net.classes) + ")");
  }
};

}  // namespace zeroplan::exec
