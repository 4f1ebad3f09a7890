#include "run/safetensors_export.h"

#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/input_error.h"
#include "exec/param_layout.h"
#include "run/checkpoint.h"
#include "run/hf_checkpoint.h"
#include "run/safetensors_file.h"

namespace zeroplan {

void export_safetensors(const std::string& checkpoint_dir, const std::string& out, const std::string& dtype) {
  if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16")
    throw InputError("command line", "--dtype", "expected fp32, bf16 or fp16, got '" + dtype + "'");
  CheckpointReader reader(checkpoint_dir, "--checkpoint");
  if (reader.is_network())
    throw InputError(reader.directory(), "--checkpoint", "a layer-list model's checkpoint: export writes "
                                                         "transformers' checkpoints only for now");
  if (reader.state().lora)
    throw InputError(reader.directory(), "--checkpoint", "holds a LoRA run's adapters, not the model (the frozen base "
                                                         "is not in it): export them with --adapter DIR");
  const exec::ModelShape& shape = reader.state().shape;
  const exec::ParamLayout layout(shape, 1);
  const std::string st_dtype = dtype == "fp32" ? "F32" : dtype == "bf16" ? "BF16" : "F16";
  // The names and layouts of run/hf_checkpoint.h (the table --init-from reads by), written through
  // SafetensorsWriter (PATH.tmp renamed over PATH, bf16 / fp16 rounded to nearest even). Its failures to create,
  // write or rename the file are reported against --out; the checkpoint reader's own errors pass unchanged.
  try {
    write_hf_safetensors(out, layout,
                         [&](const exec::ParamTensor& t, std::int64_t first, std::int64_t count, float* values) {
                           reader.read(t.name, first, count, values, nullptr, nullptr);
                         },
                         st_dtype,
                         {{"format", "pt"},
                          {"source", "zeroplan checkpoint " + reader.directory()},
                          {"step", std::to_string(reader.state().step)}});
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw InputError(out, "--out", e.what());
  }
}

}  // namespace zeroplan
