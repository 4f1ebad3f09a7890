#include "cli/export_command.h"

#include <iostream>
#include <memory>
#include <string>

#include "core/input_error.h"
#include "run/peft_adapter_export.h"
#include "run/safetensors_export.h"

namespace zeroplan {

namespace {
struct ExportOptions {
  std::string checkpoint;
  std::string out;
  std::string adapter;
  std::string dtype = "fp32";
};
}  // namespace

void add_export_command(CLI::App& app, int* status) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a checkpoint's consolidated model as safetensors (Hugging Face GPT-2 names and layouts), or "
                "a LoRA run's adapters as PEFT saves them (--adapter DIR)");
  cmd->add_option("--checkpoint", options->checkpoint,
                  "A checkpoint: a step directory, or a save directory (its latest complete step)")
      ->required();
  cmd->add_option("--out", options->out, "The .safetensors file to write (the whole model)");
  cmd->add_option("--adapter", options->adapter,
                  "A LoRA run's checkpoint: the folder to write PEFT's adapter_model.safetensors and "
                  "adapter_config.json into (PeftModel.from_pretrained reads it)");
  cmd->add_option("--dtype", options->dtype, "fp32 (the master parameters, exact), bf16 or fp16")->capture_default_str();
  cmd->callback([options, status]() {
    if (options->out.empty() == options->adapter.empty())
      throw InputError("command line", options->out.empty() ? "--out" : "--adapter",
                       options->out.empty() ? "missing: expected --out FILE (the whole model) or --adapter DIR (LoRA)"
                                            : "cannot be combined with --out: one export at a time");
    if (!options->adapter.empty()) {
      export_peft_adapter(options->checkpoint, options->adapter, options->dtype);
      std::cout << "wrote " << options->adapter << "/adapter_model.safetensors and adapter_config.json ("
                << options->dtype << ") from " << options->checkpoint << '\n';
    } else {
      export_safetensors(options->checkpoint, options->out, options->dtype);
      std::cout << "wrote " << options->out << " (" << options->dtype << ") from " << options->checkpoint << '\n';
    }
    *status = 0;
  });
}

}  // namespace zeroplan
