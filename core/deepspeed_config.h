// Reading and writing DeepSpeed configuration files as users write them: // comments, "auto" values resolved
// as the Hugging Face integration resolves them (transformers/integrations/deepspeed.py), warnings for
// unknown keys, errors for contradictions (train_batch_size != micro * accum * world).
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/model_description.h"
#include "core/training_config.h"

namespace zeroplan {

// Applies a DeepSpeed config onto `training` (values the file sets replace the defaults). world_size is the
// data-parallel degree used for batch arithmetic and "auto" resolution. Every resolution is appended to
// training.notes ("reduce_bucket_size auto -> hidden^2 = 2,560,000 (HF integration)"), every unknown key to
// training.warnings. Throws InputError naming the file and the field.
void apply_deepspeed_config(const std::filesystem::path& path, const ModelDescription& model, int world_size,
                            TrainingConfig& training);
void apply_deepspeed_config(const nlohmann::json& document, const std::string& source,
                            const ModelDescription& model, int world_size, TrainingConfig& training);

// A DeepSpeed config for the chosen plan (--emit-ds-config): batch sizes, precision section, optimizer,
// zero_optimization with stage, offload and bucket settings, activation checkpointing.
nlohmann::json emit_deepspeed_config(const TrainingConfig& training, int world_size);

}  // namespace zeroplan
