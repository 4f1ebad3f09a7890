// Hugging Face checkpoints in and out of the executor's flat layout, one table per family used both ways:
// `zeroplan run --init-from PATH` reads a transformers checkpoint (safetensors file, sharded index or folder) by
// its parameter names straight into each rank's share of the model states (ZeroEngine::restore_state asks for
// flat ranges: at stage 3 a rank reads its partition only, so no process ever holds the whole model), and
// `zeroplan export` writes a checkpoint under the same names.
//
// The names: GPT-2 as transformers' GPT2Model files ("wte.weight", "h.0.attn.c_attn.weight", ...; its Linear
// layers are Conv1D, stored [in, out], the transpose of ours; GPT2LMHeadModel's "transformer." prefix accepted on
// import), Llama / Mistral / Qwen2 as LlamaForCausalLM's ("model.embed_tokens.weight",
// "model.layers.0.self_attn.q_proj.weight", ..., "lm_head.weight"; transformers/models/llama/modeling_llama.py),
// whose q/k/v and gate/up projections are fused in our layout (rows q, k, v; gate, up) and split here. The
// executor's padded vocabulary rows are not in the checkpoint (they stay 0). A layer list (ResNet-101) by
// torchvision's state_dict names ("conv1.weight", "layer1.0.bn1.running_mean", "fc.bias"), its BatchNorm running
// statistics read as buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/param_layout.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan {

class SafetensorsCheckpoint;

// Elements [begin, begin + count) of one of our tensors are the checkpoint tensor `name` (whole), of `shape`;
// transposed: stored [cols, rows] of our [rows, cols] (GPT-2's Conv1D weights).
struct HfTensorPiece {
  std::string name;
  std::int64_t begin = 0, count = 0;
  std::vector<std::int64_t> shape;
  bool transposed = false;
  std::int64_t rows = 0, cols = 0;  // our view of the piece (rows x cols = count)
};
struct HfTensorMapping {
  const exec::ParamTensor* tensor = nullptr;
  std::vector<HfTensorPiece> pieces;
};

// Every tensor of the layout with the checkpoint tensors that hold it (LoRA's adapters under their own names, PEFT's
// adapter_model.safetensors names: exec/lora_layout.h).
std::vector<HfTensorMapping> hf_tensor_mappings(const exec::ParamLayout& layout);

// A checkpoint opened and checked against a layout: every tensor the table names present, with its shape and a
// readable dtype; nothing else in it but what transformers itself ignores (GPT-2's attention-mask buffers
// "attn.bias"/"attn.masked_bias", a tied model's "lm_head.weight", Llama's "rotary_emb.inv_freq"). Each problem is
// one InputError naming the file and the tensor (and the expected shape).
class HfCheckpointSource {
 public:
  HfCheckpointSource(const std::string& path, const exec::ParamLayout& layout, const std::string& flag);
  ~HfCheckpointSource();
  // Fills the flat range [begin, begin + n) of the layout (0 in the gaps and padded rows) with the checkpoint's
  // values; m and v (the AdamW moments of a fresh start) with 0.
  exec::ZeroEngine::StateSource state_source() const;
  // A layer list's buffer (layout.buffers(); checked present with its shape when the checkpoint was opened).
  std::vector<float> buffer(const exec::BufferTensor& b) const;
  std::string description() const;

 private:
  void fill(std::int64_t begin, std::int64_t n, float* out) const;
  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;
  const exec::ParamLayout& layout_;
  std::vector<HfTensorMapping> mappings_;
  std::string flag_;
};

// Writes a flat-layout buffer (parameters, or gradients) as one safetensors file under the checkpoint names of
// hf_tensor_mappings: `values(t, first, count, out)` gives elements of our tensor t. dtype "F32", "BF16" or "F16".
// The file is written through PATH.tmp and renamed (run/safetensors_file.h SafetensorsWriter).
using FlatTensorReader =
    std::function<void(const exec::ParamTensor& t, std::int64_t first, std::int64_t count, float* out)>;
void write_hf_safetensors(const std::string& path, const exec::ParamLayout& layout, const FlatTensorReader& values,
                          const std::string& dtype, const std::map<std::string, std::string>& metadata);

}  // namespace zeroplan
