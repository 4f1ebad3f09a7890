// `zeroplan export --adapter DIR`: a LoRA run's checkpoint (run/checkpoint.h, its "lora" section) as PEFT 0.21 saves
// an adapter (peft/peft_model.py PeftModel.save_pretrained): DIR/adapter_model.safetensors, the adapters under the
// names get_peft_model_state_dict gives them ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
// lora_A [r, in], lora_B [out, r]; exec/lora_layout.h), and DIR/adapter_config.json, the LoraConfig
// (peft/tuners/lora/config.py) that PeftModel.from_pretrained reads: peft_type LORA, task_type CAUSAL_LM, r,
// lora_alpha, target_modules, lora_dropout 0, bias "none", fan_in_fan_out (true for GPT-2's Conv1D modules, whose
// weight transformers stores [in, out]; the adapters' own shapes do not change with it), base_model_name_or_path
// (the --init-from the run started from, else null).
#pragma once

#include <string>

#include "core/training_config.h"

namespace zeroplan {

// dtype: "fp32" (the master values, exact), "bf16" or "fp16". Throws InputError naming --checkpoint (not a LoRA
// checkpoint, or damaged), --adapter (cannot write) or --dtype. The files are written through temporary names and
// renamed.
void export_peft_adapter(const std::string& checkpoint_dir, const std::string& out_dir, const std::string& dtype);

// `zeroplan run --init-adapter PATH`: the adapter to start from, as PEFT saves one (PATH its folder, or the
// adapter_model.safetensors file in it): the safetensors file's path, after adapter_config.json beside it (when there
// is one; PEFT always writes it) was checked against the run's LoRA settings: "r" the rank, "lora_alpha" the alpha,
// "target_modules" the targets (as sets), "peft_type" LORA. Throws InputError naming the flag (no such file or
// folder, a folder without adapter_model.safetensors) or adapter_config.json and the field that differs.
std::string resolve_peft_adapter(const std::string& path, const LoraSettings& lora, const std::string& flag);

}  // namespace zeroplan
