// `zeroplan export`: the consolidated model of a checkpoint (run/checkpoint.h) as one safetensors file that the
// `safetensors` package and Hugging Face loaders read, under the names of run/hf_checkpoint.h: GPT-2's as in
// Hugging Face's GPT2Model files ("wte.weight", "h.0.attn.c_attn.weight", ...; Conv1D weights stored
// [in_features, out_features], the transpose of ours), Llama-family models' as LlamaForCausalLM's
// ("model.layers.0.self_attn.q_proj.weight", ..., "lm_head.weight"; q/k/v and gate/up split out of our fused
// tensors), so that from_pretrained loads the file beside the model's config.json; the token embedding (and an
// untied head) without the executor's vocabulary padding rows. Format: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the tensors' bytes (huggingface/safetensors
// README, "Format").
#pragma once

#include <string>

namespace zeroplan {

// dtype: "fp32" (the fp32 master, exact), "bf16" or "fp16" (rounded to nearest even). Throws InputError naming
// --checkpoint, --out or --dtype. The file is written through a temporary name and renamed.
void export_safetensors(const std::string& checkpoint_dir, const std::string& out, const std::string& dtype);

}  // namespace zeroplan
