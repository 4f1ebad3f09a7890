// Checkpoints of a `zeroplan run`: every rank writes its share of the model states in parallel, rank 0 writes
// one manifest last, and a checkpoint is complete exactly when its manifest exists.
//
// Layout: SAVE_DIR/step-00000010/rank-00000.bin ... and manifest.json. A rank file holds fp32 values of the
// rank's owned ranges (chunk `rank` of every ZeRO bucket, exec/zero/zero_engine.h owned_ranges) in three
// sections, master parameters then AdamW momentum then variance; the manifest maps each piece of a section to
// (tensor name, offset in the tensor, count), so a checkpoint restores at any world size and stage
// (resharding reads the pieces each new rank needs). The 16-bit parameters are rebuilt as the rounding of the
// fp32 master, which is how AdamW writes them, so resuming is bit for bit. Writes are atomic: each file is
// written to a temporary name, fsync'ed and renamed, the directory fsync'ed; a crash while saving leaves no
// manifest, and such a directory is never taken for a checkpoint. Each file's CRC-32 (zlib) and size are in
// the manifest; a truncated or corrupted file is an error naming it. A layer list's buffers (BatchNorm's running
// statistics, equal on every rank: DeepSpeed does not partition buffers) are rank 0's, in buffers.bin.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/comm/communicator.h"
#include "exec/loss_scaler.h"
#include "exec/trainer.h"

namespace zeroplan {

// A LoRA run's checkpoint (ExecConfig::lora): its states are the adapters' (the trainer's layout), the base is not
// in it; the manifest's "lora" says how the adapters were built and which base they were trained on, for resuming
// and for `zeroplan export --adapter` (PEFT's adapter_config.json).
struct CheckpointLora {
  exec::LoraExecSettings settings;
  std::optional<std::string> base_model;  // --init-from's path; none: the base drawn from the seed
};

// What a resumed run continues from, and what must match to resume it.
struct CheckpointState {
  std::int64_t step = 0;            // optimizer steps completed
  int optimizer_step = 0;           // AdamW updates (steps skipped on fp16 overflow excluded)
  exec::LossScalerState scaler;
  std::int64_t data_position = 0;   // tokens the data source had handed out (global, all ranks)
  std::uint64_t seed = 0;
  std::string data;                 // the data source's description
  int world = 1;
  int stage = 0;
  std::string precision;
  exec::ModelShape shape;
  std::optional<CheckpointLora> lora;
};

// SAVE_DIR/step-NNNNNNNN for a step.
std::string checkpoint_step_dir(const std::string& save_dir, std::int64_t step);

// Throws InputError naming --save-dir when one of the steps this run will save already holds a complete
// checkpoint (checked before training, so that nothing fails late and nothing is overwritten).
void check_save_dir(const std::string& save_dir, const std::vector<std::int64_t>& steps);

// Called by every rank with the same state; `comm` null for one rank. Throws InputError naming --save-dir when
// the directory cannot be written or the step already holds a complete checkpoint (nothing is overwritten).
void save_checkpoint(const std::string& save_dir, exec::Trainer& trainer, exec::Communicator* comm,
                     const CheckpointState& state);

// A complete checkpoint, opened for reading.
class CheckpointReader {
 public:
  // `dir`: a step directory with a manifest, or a save directory (its latest complete step). Throws InputError
  // naming `flag` and the path when there is none, the manifest is malformed, or a file is missing.
  CheckpointReader(const std::string& dir, const std::string& flag);
  ~CheckpointReader();
  const CheckpointState& state() const { return state_; }
  // A layer list's checkpoint (its tensors' names and sizes instead of a transformer's shape).
  bool is_network() const { return !network_tensors_.empty(); }
  const std::string& directory() const { return dir_; }
  // Values of `count` elements of `tensor` from `offset`, for each non-null destination (master, m, v).
  // Verifies the CRC-32 of a file the first time it is read.
  void read(const std::string& tensor, std::int64_t offset, std::int64_t count, float* master, float* m, float* v);
  // Reads every file once: sizes and CRC-32 against the manifest (InputError naming the first bad file).
  void verify();
  // Restores every state `trainer` holds (its own layout, world and stage), the optimizer step and the scaler.
  void restore(exec::Trainer& trainer);

 private:
  struct Segment {
    std::int64_t tensor_offset, count, offset;  // elements
    int file;
  };
  struct File {
    std::string path;
    std::int64_t elements = 0;  // per section
    std::int64_t bytes = 0;
    std::uint32_t crc = 0;
    int fd = -1;
    bool verified = false;
  };
  void open_file(File& f);
  std::string dir_;
  std::string flag_;
  CheckpointState state_;
  std::vector<File> files_;
  std::map<std::string, std::vector<Segment>> segments_;  // by tensor, sorted by tensor_offset
  // A layer list's buffers (BatchNorm running statistics): one file of fp32 values, the tensors in order.
  File buffers_file_;
  std::vector<std::pair<std::string, std::int64_t>> network_tensors_;
  std::vector<exec::BufferTensor> buffer_tensors_;
};

}  // namespace zeroplan
