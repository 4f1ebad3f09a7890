// What the GUI's input panel holds: the same inputs as the CLI's shared flags (--model, --cluster, --gpus,
// --ds-config, --micro-batch, --seq, --grad-accum, --precision, --checkpointing), with the same precedence:
// defaults < DeepSpeed config < the values set here. An unset optional means "not given".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/cluster_description.h"
#include "core/training_config.h"

namespace zeroplan {

struct GuiInputs {
  std::string model;                             // bundled name, model description file or HF config.json
  std::string cluster = kDefaultClusterName;     // bundled name or cluster description file
  std::optional<int> gpus;                       // GPUs of the cluster's kind (data-parallel degree)
  std::optional<std::string> ds_config;          // DeepSpeed config file
  std::optional<std::int64_t> micro_batch;       // samples per GPU per micro-step
  std::optional<std::int64_t> seq;              // tokens per sample
  std::optional<std::int64_t> grad_accum;        // micro-steps per optimizer step
  std::optional<Precision> precision;
  std::optional<Checkpointing> checkpointing;

  bool operator==(const GuiInputs&) const = default;
};

}  // namespace zeroplan
