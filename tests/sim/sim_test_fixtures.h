// Fixtures for the planner tests, built in code so every figure a test checks is visible beside it.
#pragma once

#include <cstdint>
#include <string>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"

namespace zeroplan::testing {

// GPT-2 (Radford et al. 2019; HF gpt2 configs): vocab 50257, 1024 positions, 4h MLP, tied embeddings.
inline TransformerShape gpt2_shape(std::int64_t hidden, std::int64_t layers, std::int64_t heads) {
  TransformerShape s;
  s.family = ModelFamily::gpt2;
  s.vocab_size = 50257;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = heads;
  s.ffn_hidden = 4 * hidden;
  s.max_seq = 1024;
  s.norm = NormKind::layer_norm;
  s.activation = ActivationKind::gelu;
  return s;
}
inline ModelDescription gpt2_xl() { return expand_transformer("gpt2-xl", gpt2_shape(1600, 48, 25), "test"); }
inline ModelDescription gpt2_small() { return expand_transformer("gpt2", gpt2_shape(768, 12, 12), "test"); }

// Llama-2 7B (HF meta-llama/Llama-2-7b-hf config): 32000 vocab, h 4096, 32 layers, 32 heads, ffn 11008.
inline TransformerShape llama2_7b_shape() {
  TransformerShape s;
  s.family = ModelFamily::llama;
  s.vocab_size = 32000;
  s.hidden = 4096;
  s.layers = 32;
  s.heads = 32;
  s.kv_heads = 32;
  s.ffn_hidden = 11008;
  s.max_seq = 4096;
  s.norm = NormKind::rms_norm;
  s.activation = ActivationKind::swiglu;
  s.attention_bias = false;
  s.mlp_bias = false;
  s.tied_embeddings = false;
  s.learned_positions = false;
  return s;
}

// A model given only by its parameter count: one generic layer (no activations), for model-state checks.
inline ModelDescription params_only_model(std::int64_t params) {
  ModelDescription m;
  m.name = "params-only";
  m.source = "test";
  m.family = ModelFamily::generic;
  LayerDescription layer;
  layer.name = "all";
  layer.kind = "generic";
  layer.params = params;
  layer.largest_module_params = params;
  layer.module_count = 1;
  layer.module_calls = 2;  // the module and its layer
  m.layers.push_back(layer);
  return m;
}

// The same, spread evenly over `layers` generic layers (one module each).
inline ModelDescription layered_model(std::int64_t params, int layers) {
  ModelDescription m = params_only_model(params);
  m.layers.clear();
  for (int i = 0; i < layers; ++i) {
    LayerDescription layer;
    layer.name = "layer." + std::to_string(i);
    layer.kind = "generic";
    layer.params = params / layers + (i < params % layers ? 1 : 0);
    layer.largest_module_params = layer.params;
    layer.module_count = 1;
    layer.module_calls = 2;  // the module and its layer
    m.layers.push_back(layer);
  }
  return m;
}

// A node of H200s as device-and-peers.md describes it (143771 MiB, 512 GiB host), with the runtime overhead
// set to zero unless a test asks for it, so model-state figures come out exactly.
inline ClusterDescription test_cluster(int gpus_per_node, int nodes) {
  ClusterDescription c;
  c.name = "test-h200";
  c.source = "test";
  c.gpu_model = "H200";
  c.gpu_memory_bytes = 143771LL * 1024 * 1024;
  c.gpus_per_node = gpus_per_node;
  c.nodes = nodes;
  c.intra_node.bus_bandwidth = 350e9;
  c.inter_node.bus_bandwidth = nodes > 1 ? 50e9 : 0.0;
  c.host_memory_bytes = 512LL * 1024 * 1024 * 1024;
  c.host_cores = 64;
  c.pcie_bandwidth = 55.5e9;
  c.nvme_capacity_bytes = 8LL * 1000 * 1000 * 1000 * 1000;
  return c;
}

}  // namespace zeroplan::testing
