// Safetensors files, read by byte range and written in pieces: Hugging Face checkpoints loaded straight into
// each rank's ZeRO partition (at stage 3 no process may hold the whole model, so nothing here reads a whole
// file), and checkpoints exported under transformers' names.
//
// Format (huggingface/safetensors README, "Format"): 8 bytes N, a little-endian u64; N bytes of UTF-8 JSON that
// MUST begin with '{' and MAY be padded at the end with spaces, {name: {"dtype", "shape", "data_offsets":
// [begin, end]}} with an optional "__metadata__" string-to-string map; then the byte buffer, to which the
// offsets are relative. Tensors are little-endian and row-major. The reference implementation
// (safetensors/src/tensor.rs, read_metadata and Metadata::validate) also refuses a header over 100,000,000
// bytes and requires the tensors, sorted by offset, to cover the byte buffer exactly: no overlap, no hole,
// nothing after the last tensor. This reader refuses the same files, each with a one-line InputError.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace zeroplan {

// fp32 -> bf16 and fp16 bits, rounded to nearest even (a NaN stays a quiet NaN; fp16 overflows to infinity).
std::uint16_t bf16_bits_from_float(float f);
std::uint16_t f16_bits_from_float(float f);
// bf16 and fp16 bits -> fp32: exact (every bf16 and fp16 value, subnormals, infinities and NaN payloads
// included, is an fp32 value).
float float_from_bf16_bits(std::uint16_t bits);
float float_from_f16_bits(std::uint16_t bits);

// Bytes of one element of a safetensors dtype ("F32" -> 4), or 0 for a name the format does not define.
int safetensors_dtype_size(const std::string& dtype);

// One tensor of a checkpoint: where its bytes are.
struct TensorInfo {
  std::string name;
  std::string dtype;                 // as in the header: "F32", "BF16", "F16", "F64", "I8", ...
  std::vector<std::int64_t> shape;   // row-major; {} is a scalar (one element)
  std::string file;                  // the .safetensors file that holds it
  std::int64_t offset = 0;           // of its first byte in `file` (8 + N + data_offsets[0])
  std::int64_t bytes = 0;            // data_offsets[1] - data_offsets[0] = elements x dtype size
  std::int64_t elements = 0;         // product of shape
};

// A Hugging Face checkpoint opened for reading by byte range. Opening reads and validates every header (and
// the index) but no tensor data; each shard stays open (one file descriptor each) until destruction, and
// read_as_float reads with pread, so concurrent reads from several threads are safe.
class SafetensorsCheckpoint {
 public:
  // `path` is one of:
  //   (a) a safetensors file (any name that does not end in ".json");
  //   (b) a sharded checkpoint's index, a JSON file ("model.safetensors.index.json") whose "weight_map" maps
  //       each tensor name to a shard file name in the index's folder ("metadata" in it is informational and
  //       not read);
  //   (c) a folder holding model.safetensors or model.safetensors.index.json. When both exist the single file
  //       is taken, as transformers' PreTrainedModel.from_pretrained does for a local folder (it tests for
  //       SAFE_WEIGHTS_NAME before SAFE_WEIGHTS_INDEX_NAME, transformers/modeling_utils.py), so a folder
  //       loads the same tensors here as there.
  // Sharded: every tensor of the weight_map must be in the shard it names; a shard's tensors that the
  // weight_map does not list are kept too (transformers loads every tensor of each shard file); a tensor held
  // by two shards is an error. Throws InputError (source: the file; field: the tensor, when there is one) for
  // a missing path, file or shard, a malformed header or index, or any file the reference reader refuses.
  explicit SafetensorsCheckpoint(const std::string& path);
  ~SafetensorsCheckpoint();
  SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) noexcept;
  SafetensorsCheckpoint(const SafetensorsCheckpoint&) = delete;
  SafetensorsCheckpoint& operator=(const SafetensorsCheckpoint&) = delete;

  // The tensor called `name`, or null. The pointer stays valid as long as this object (and across moves).
  const TensorInfo* find(const std::string& name) const;
  // Every tensor's name, sorted.
  std::vector<std::string> names() const;
  // The safetensors files opened: one, or the shards in the order of their names.
  std::vector<std::string> files() const;
  // The "__metadata__" map of one of files() (empty when the header has none).
  const std::map<std::string, std::string>& metadata(const std::string& file) const;
  // What the checkpoint was opened from (the file, the index or the folder, as given).
  const std::string& source() const { return source_; }

  // Elements [first_element, first_element + count) of `tensor` (row-major), converted to fp32, into `out`.
  // Reads only those bytes. F32, BF16 and F16 convert exactly; F64 is rounded to nearest. Any other dtype is an
  // InputError naming the file, the tensor and the dtype. A range outside the tensor, or a TensorInfo that is
  // not one of this checkpoint's, is std::out_of_range / std::invalid_argument (a caller's bug). A read
  // error is std::runtime_error naming the file, the tensor and errno's text; a file that ends early (changed
  // since it was opened) is an InputError naming the file, the tensor and the byte where it ended.
  void read_as_float(const TensorInfo& tensor, std::int64_t first_element, std::int64_t count, float* out) const;

 private:
  struct Shard {
    std::string path;
    int fd = -1;
    std::int64_t size = 0;
    std::map<std::string, std::string> metadata;
  };
  void open_file(const std::string& path, std::map<std::string, TensorInfo>& tensors);
  void open_index(const std::string& index_path);

  std::string source_;
  std::vector<Shard> shards_;
  std::unordered_map<std::string, std::size_t> shard_of_path_;
  std::map<std::string, TensorInfo> tensors_;
};

// Writes one safetensors file, fed from fp32 values in pieces in any order.
//
// Use: add() every tensor (and set_metadata()) first, then write() pieces of tensors in any order (the first
// write() fixes the layout: later add()s are refused), then finish(). Each element must be written exactly once:
// write() refuses a piece that overlaps one already written, and finish() refuses a tensor left incomplete.
// Tensors are laid out in the order added; the header is JSON with its keys sorted (nlohmann::json), padded
// with spaces so the data starts 8-byte aligned, as the reference serializer pads it (tensor.rs, prepare).
//
// The file is built as PATH.tmp: created with its final size at the first write() (or finish()); each piece is
// converted and pwritten at its offset, so only the piece being written is in memory (write_file_atomically,
// run/atomic_file.h, needs the whole contents in memory and is not used for that reason); finish() fsyncs it,
// renames it over PATH and fsyncs the folder. A writer destroyed before finish() removes PATH.tmp and leaves
// PATH as it was. Not thread-safe: one thread calls a writer.
//
// Hugging Face loaders want {"format": "pt"} in the metadata (transformers' load_state_dict checks it); the
// caller sets it, nothing is added by default.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::string path);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The "__metadata__" map (replaces any set before). Before the first write().
  void set_metadata(std::map<std::string, std::string> metadata);
  // Declares a tensor: dtype "F32", "BF16" or "F16"; dimensions >= 0 ({} is a scalar). Before the first write().
  // std::invalid_argument on a duplicate or empty name, "__metadata__", another dtype or a negative dimension;
  // std::overflow_error when the file's size would not fit in int64.
  void add(const std::string& name, const std::string& dtype, std::vector<std::int64_t> shape);
  // Elements [first_element, first_element + count) of tensor `name` (row-major) from `values`, converted to
  // its dtype (round to nearest even). std::invalid_argument for an unknown name, a range outside the tensor or
  // overlapping a piece already written; std::runtime_error (naming the call, PATH.tmp and errno's text) when a
  // system call fails.
  void write(const std::string& name, std::int64_t first_element, const float* values, std::int64_t count);
  // Checks that every element of every tensor was written (std::invalid_argument naming the first tensor that
  // was not), then makes PATH the new file. Once only.
  void finish();

  const std::string& path() const { return path_; }

 private:
  struct Tensor {
    std::string name, dtype;
    std::vector<std::int64_t> shape;
    std::int64_t elements = 0, begin = 0, bytes = 0;  // begin: in the data buffer
    int element_size = 0;
    std::map<std::int64_t, std::int64_t> written;     // element ranges written: begin -> end, merged
    std::int64_t written_elements = 0;
  };
  void start();
  void remove_temporary() noexcept;

  std::string path_, tmp_;
  std::map<std::string, std::string> metadata_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::int64_t data_bytes_ = 0;
  std::int64_t data_start_ = 0;  // 8 + N, set by start()
  int fd_ = -1;
  bool started_ = false, finished_ = false;
};

}  // namespace zeroplan
