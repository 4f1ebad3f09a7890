#include "cli/export_command.h"

#include <iostream>
#include <memory>
#include <string>

#include "run/safetensors_export.h"

namespace zeroplan {

namespace {
struct ExportOptions {
  std::string checkpoint;
  std::string out;
  std::string dtype = "fp32";
};
}  // namespace

void add_export_command(CLI::App& app, int* status) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a checkpoint's consolidated model as safetensors (Hugging Face GPT-2 names and layouts)");
  cmd->add_option("--checkpoint", options->checkpoint,
                  "A checkpoint: a step directory, or a save directory (its latest complete step)")
      ->required();
  cmd->add_option("--out", options->out, "The .safetensors file to write")->required();
  cmd->add_option("--dtype", options->dtype, "fp32 (the master parameters, exact), bf16 or fp16")->capture_default_str();
  cmd->callback([options, status]() {
    export_safetensors(options->checkpoint, options->out, options->dtype);
    std::cout << "wrote " << options->out << " (" << options->dtype << ") from " << options->checkpoint << '\n';
    *status = 0;
  });
}

}  // namespace zeroplan
