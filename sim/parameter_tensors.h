// The parameter tensors of a layer, one call per tensor with its element count: what DeepSpeed's per-tensor
// work (pinned partitions, host buffers, stage 3's coordinator) sees. Shared by sim/memory_inputs.cpp and
// sim/deepspeed_param_coordinator.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/model_description.h"

namespace zeroplan {

// Calls `tensor(numel)` for each parameter tensor of a layer: a transformer's from its shape (the tensors
// parameter_tensors in sim/simulator.cpp counts); a layer list names no tensors, so each module counts as one
// tensor of an equal share of the layer's parameters.
template <typename Tensor>
inline void for_each_parameter_tensor(const ModelDescription& model, const LayerDescription& layer, Tensor&& tensor) {
  if (layer.params <= 0) return;
  if (!model.transformer) {
    const std::int64_t modules = std::max<std::int64_t>(1, layer.module_count);
    for (std::int64_t m = 0; m < modules; ++m) tensor(layer.params / modules + (m < layer.params % modules ? 1 : 0));
    return;
  }
  const TransformerShape& s = *model.transformer;
  const std::int64_t h = s.hidden;
  const auto norm = [&] {
    tensor(h);
    if (s.norm == NormKind::layer_norm) tensor(h);
  };
  if (layer.kind == "embedding") {
    tensor(s.vocab_size * h);
    if (s.learned_positions) tensor(s.max_seq * h);
    if (s.embedding_norm) norm();
  } else if (layer.kind == "transformer_block") {
    norm();
    norm();
    const std::int64_t kv = s.kv_dim();
    if (s.family == ModelFamily::gpt2) {
      tensor(h * (h + 2 * kv));
      if (s.attention_bias) tensor(h + 2 * kv);
    } else {
      tensor(h * h);
      tensor(h * kv);
      tensor(h * kv);
      if (s.attention_bias) {
        tensor(h);
        tensor(kv);
        tensor(kv);
      }
    }
    tensor(h * h);
    if (s.attention_bias && s.attention_output_bias) tensor(h);
    const int up = s.activation == ActivationKind::swiglu ? 2 : 1;
    for (int i = 0; i < up; ++i) {
      tensor(h * s.ffn_hidden);
      if (s.mlp_bias) tensor(s.ffn_hidden);
    }
    tensor(s.ffn_hidden * h);
    if (s.mlp_bias) tensor(h);
  } else if (layer.kind == "norm") {
    norm();
  } else {
    tensor(layer.params);  // lm_head
  }
}

}  // namespace zeroplan
