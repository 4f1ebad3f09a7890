#include "exec/lora_layout.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/parallel_ranges.h"
#include "exec/init_rng.h"
#include "exec/zero/zero_partition.h"

namespace zeroplan::exec {

std::vector<AdaptedLinear> transformers_linears(const ModelShape& s) {
  const std::int64_t C = s.hidden, Q = s.q_dim(), KV = s.kv_dim(), F = s.ffn_hidden;
  // transformers' module paths (modeling_llama.py LlamaAttention / LlamaMLP, modeling_gpt2.py GPT2Attention /
  // GPT2MLP) and where each sits in our fused block tensors (exec/param_layout.cpp roles: q, k, v rows; gate, up).
  if (s.naming == TensorNaming::llama)
    return {{"self_attn.q_proj", kQkvW, 0, Q, C},      {"self_attn.k_proj", kQkvW, Q, KV, C},
            {"self_attn.v_proj", kQkvW, Q + KV, KV, C}, {"self_attn.o_proj", kAttProjW, 0, C, Q},
            {"mlp.gate_proj", kFcW, 0, F, C},           {"mlp.up_proj", kFcW, F, F, C},
            {"mlp.down_proj", kFcProjW, 0, C, F}};
  return {{"attn.c_attn", kQkvW, 0, s.qkv_dim(), C}, {"attn.c_proj", kAttProjW, 0, C, Q},
          {"mlp.c_fc", kFcW, 0, s.mlp_in_dim(), C},   {"mlp.c_proj", kFcProjW, 0, C, F}};
}

std::vector<AdaptedLinear> adapted_linears(const ModelShape& s, const LoraExecSettings& lora) {
  const std::vector<AdaptedLinear> known = transformers_linears(s);
  std::vector<AdaptedLinear> out;
  for (const std::string& path : lora.modules) {
    bool found = false;
    for (const AdaptedLinear& k : known)
      if (path == k.path) {
        out.push_back(k);
        found = true;
      }
    if (!found) throw std::invalid_argument("executor: lora target module " + path + ": not a linear module of this model");
  }
  if (out.empty()) throw std::invalid_argument("executor: lora: no adapted module");
  return out;
}

std::vector<std::int64_t> nf4_module_elements(const ModelShape& s, BlockTensor which) {
  // The modules of `which` are contiguous row ranges in row order (q, k, v; gate, up), and a module's [out, in]
  // weight is row-major in both layouts, so module j's elements follow module j-1's.
  std::vector<std::int64_t> elements;
  std::int64_t next_row = 0;
  for (const AdaptedLinear& m : transformers_linears(s)) {
    if (m.base != which) continue;
    if (m.row_offset != next_row) throw std::logic_error("nf4_module_elements: " + m.path + " out of row order");
    elements.push_back(m.out * m.in);
    next_row += m.out;
  }
  if (elements.empty()) throw std::logic_error("nf4_module_elements: not a block weight");
  return elements;
}

std::string peft_block_prefix(const ModelShape& s, std::int64_t layer) {
  return (s.naming == TensorNaming::llama ? "base_model.model.model.layers." : "base_model.model.transformer.h.") +
         std::to_string(layer) + ".";
}

ParamLayout lora_adapter_layout(const ModelShape& s, const LoraExecSettings& lora, std::int64_t align) {
  if (lora.rank < 1) throw std::invalid_argument("executor: lora rank: expected >= 1");
  const std::vector<AdaptedLinear> modules = adapted_linears(s, lora);
  std::vector<std::vector<TensorSpec>> units;
  for (std::int64_t l = 0; l < s.layers; ++l) {
    std::vector<TensorSpec> unit;
    for (const AdaptedLinear& m : modules) {
      const std::string p = peft_block_prefix(s, l) + m.path;
      // nn.init.kaiming_uniform_(a=sqrt(5)) of an (r, in) weight: bound 1/sqrt(in); B zeros.
      unit.push_back({p + ".lora_A.weight", lora.rank, m.in, InitKind::uniform,
                      1.0f / std::sqrt(static_cast<float>(m.in))});
      unit.push_back({p + ".lora_B.weight", m.out, lora.rank, InitKind::zeros, 0.0f});
    }
    units.push_back(std::move(unit));
  }
  return ParamLayout(units, align);
}

std::int64_t lora_adapter_params(const ModelShape& s, const LoraExecSettings& lora) {
  std::int64_t n = 0;
  for (const AdaptedLinear& m : adapted_linears(s, lora)) n += lora.rank * (m.in + m.out);
  return n * s.layers;
}

ParamLayout trained_layout(const ExecConfig& config, int world) {
  if (config.lora.enabled) return lora_adapter_layout(config.shape, config.lora, zero_alignment(world));
  return ParamLayout(config.shape, zero_alignment(world));
}

std::uint64_t lora_adapter_seed(std::uint64_t seed) { return splitmix64(seed ^ 0x4c6f5241ull); }

std::int64_t lora_adapters_per_weight(const std::vector<AdaptedLinear>& modules) {
  std::int64_t most = 0;
  for (BlockTensor w : {kQkvW, kAttProjW, kFcW, kFcProjW})
    most = std::max<std::int64_t>(most, std::count_if(modules.begin(), modules.end(),
                                                      [w](const AdaptedLinear& m) { return m.base == w; }));
  return most;
}

int nf4_weight_slot(BlockTensor which) {
  for (int slot = 0; slot < 4; ++slot)
    if (kNf4BlockWeights[slot] == which) return slot;
  throw std::logic_error("nf4_weight_slot: not a block weight");
}

void quantize_frozen_block_weights(const ModelShape& shape, const ParamLayout& source_layout,
                                   const std::function<void(std::int64_t, std::int64_t, float*)>& read,
                                   bool read_in_parallel, const std::function<float(float)>& round, int threads,
                                   const std::function<void(std::int64_t, Nf4ModuleTensors&&)>& consume) {
  constexpr std::int64_t kMinValuesPerThread = std::int64_t{1} << 20;
  for (std::int64_t l = 0; l < shape.layers; ++l)
    for (BlockTensor w : kNf4BlockWeights) {
      const ParamTensor& t = source_layout.block(l, w);
      std::vector<float> values(static_cast<std::size_t>(t.numel()));
      float* v = values.data();
      for_each_range(t.numel(), read_in_parallel ? threads : 1, kMinValuesPerThread,
                     [&](std::int64_t lo, std::int64_t hi) { read(t.offset + lo, hi - lo, v + lo); });
      if (round)
        for_each_range(t.numel(), threads, kMinValuesPerThread, [&](std::int64_t lo, std::int64_t hi) {
          for (std::int64_t i = lo; i < hi; ++i) v[i] = round(v[i]);
        });
      consume(l * 4 + nf4_weight_slot(w), quantize_nf4_modules(v, nf4_module_elements(shape, w), threads));
    }
}

}  // namespace zeroplan::exec
