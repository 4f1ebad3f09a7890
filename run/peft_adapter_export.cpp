#include "run/peft_adapter_export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/json_input.h"
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

std::string resolve_peft_adapter(const std::string& path, const LoraSettings& lora, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(path, flag, "no such file or folder: expected an adapter folder as PEFT saves one "
                                 "(adapter_model.safetensors, adapter_config.json) or its adapter_model.safetensors");
  const fs::path file = fs::is_directory(path, ec) ? fs::path(path) / "adapter_model.safetensors" : fs::path(path);
  if (!fs::is_regular_file(file, ec))
    throw InputError(path, flag, "holds no adapter_model.safetensors (PEFT's save_pretrained writes one)");
  const fs::path config_path = file.parent_path() / "adapter_config.json";
  if (!fs::exists(config_path, ec)) return file.string();
  const nlohmann::json config = read_json_file(config_path);
  const std::string source = config_path.string();
  if (!config.is_object()) throw InputError(source, "(top level)", "expected a JSON object (PEFT's LoraConfig)");
  // The rank also shows in the tensors' shapes (checked as they are read); alpha and the targets only here.
  if (config.contains("peft_type") && config.at("peft_type") != "LORA")
    throw InputError(source, "peft_type", "is " + config.at("peft_type").dump() + "; expected \"LORA\"");
  if (config.contains("r") && !(config.at("r").is_number_integer() && config.at("r").get<std::int64_t>() == lora.rank))
    throw InputError(source, "r", "is " + config.at("r").dump() + "; the run's --lora-rank is " +
                                      std::to_string(lora.rank));
  if (config.contains("lora_alpha") &&
      !(config.at("lora_alpha").is_number() && std::abs(config.at("lora_alpha").get<double>() - lora.alpha) <= 1e-9 * lora.alpha)) {
    char alpha[32];
    std::snprintf(alpha, sizeof alpha, "%g", lora.alpha);
    throw InputError(source, "lora_alpha", "is " + config.at("lora_alpha").dump() + "; the run's --lora-alpha is " +
                                               alpha + " (the adapters' scaling alpha / r would differ)");
  }
  if (config.contains("target_modules") && !config.at("target_modules").is_null()) {
    const nlohmann::json& t = config.at("target_modules");
    std::set<std::string> theirs;
    if (t.is_string()) theirs.insert(t.get<std::string>());
    else if (t.is_array())
      for (const nlohmann::json& x : t)
        if (x.is_string()) theirs.insert(x.get<std::string>());
    const std::set<std::string> ours(lora.targets.begin(), lora.targets.end());
    if (theirs != ours) {
      std::string list;
      for (const std::string& x : ours) list += (list.empty() ? "" : ",") + x;
      throw InputError(source, "target_modules", "is " + t.dump() + "; the run's --lora-targets are " + list);
    }
  }
  return file.string();
}

}  // namespace zeroplan
