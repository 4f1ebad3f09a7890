#include "run/peft_adapter_export.h"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "exec/lora_layout.h"
#include "run/atomic_file.h"
#include "run/checkpoint.h"
#include "run/hf_checkpoint.h"

namespace zeroplan {

void export_peft_adapter(const std::string& checkpoint_dir, const std::string& out_dir, const std::string& dtype) {
  if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16")
    throw InputError("command line", "--dtype", "expected fp32, bf16 or fp16, got '" + dtype + "'");
  CheckpointReader reader(checkpoint_dir, "--checkpoint");
  if (!reader.state().lora)
    throw InputError(reader.directory(), "--checkpoint", "holds no LoRA adapters (a full model's checkpoint: export "
                                                         "it with --out FILE)");
  const CheckpointLora& lora = *reader.state().lora;
  const exec::ModelShape& shape = reader.state().shape;
  exec::ParamLayout layout = [&] {
    try {
      return exec::lora_adapter_layout(shape, lora.settings, 1);
    } catch (const std::invalid_argument& e) {
      throw InputError(reader.directory(), "--checkpoint", std::string("manifest lora: ") + e.what());
    }
  }();
  const bool gpt2 = shape.naming == exec::TensorNaming::gpt2;
  // LoraConfig's fields as PEFT 0.21 writes them (peft/tuners/lora/config.py, peft/config.py PeftConfigMixin
  // to_dict); what is not written takes LoraConfig's default when PEFT reads the file.
  const nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", lora.base_model ? nlohmann::json(*lora.base_model) : nlohmann::json(nullptr)},
      {"r", lora.settings.rank},
      {"lora_alpha", lora.settings.alpha},
      {"target_modules", lora.settings.targets},
      {"lora_dropout", 0.0},
      {"bias", "none"},
      {"fan_in_fan_out", gpt2},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"use_rslora", false},
      {"use_dora", false},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
      {"revision", nullptr}};
  const std::filesystem::path dir(out_dir);
  try {
    std::filesystem::create_directories(dir);
    write_hf_safetensors((dir / "adapter_model.safetensors").string(), layout,
                         [&](const exec::ParamTensor& t, std::int64_t first, std::int64_t count, float* values) {
                           reader.read(t.name, first, count, values, nullptr, nullptr);
                         },
                         dtype == "fp32" ? "F32" : dtype == "bf16" ? "BF16" : "F16",
                         {{"format", "pt"},
                          {"source", "zeroplan checkpoint " + reader.directory()},
                          {"step", std::to_string(reader.state().step)}});
    const std::string text = config.dump(2) + "\n";
    write_file_atomically((dir / "adapter_config.json").string(), {{text.data(), text.size()}});
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(out_dir, "--adapter", e.what());
  }
}

}  // namespace zeroplan
