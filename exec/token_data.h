// Training tokens: synthetic (deterministic from a seed) or read from a file.
// File formats accepted by --data:
//   - llm.c token file: a 256 x int32 header with header[0] = 20240520 (magic), header[1] = version
//     (1: uint16 tokens, GPT-2; 2: uint32 tokens, LLaMA-3), header[2] = token count; then the tokens
//     (karpathy/llm.c dev/data/data_common.py write_datafile).
//   - nanoGPT token file: any other file named *.bin is raw little-endian uint16 tokens, no header
//     (karpathy/nanoGPT data/*/prepare.py, np.memmap(dtype=np.uint16)).
//   - anything else is text, tokenized byte-level: token = byte value 0..255, so the model's vocabulary must hold
//     256 tokens. When it holds more, kEndOfText = 256 opens the stream (GPT-2's <|endoftext|> role); a byte-level
//     model of exactly 256 gets the bytes only, since an end-of-text id must not push the vocabulary past it.
// Batches are consecutive windows (llm.c's DataLoader without shuffling): row b of a micro-batch is tokens
// [p + b*T, p + b*T + T) and its targets are shifted by one; p advances by B*T and wraps to 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zeroplan::exec {

inline constexpr std::int32_t kByteVocab = 256;  // one token per byte value
inline constexpr std::int32_t kEndOfText = 256;
inline constexpr std::int32_t kLlmcMagic = 20240520;

struct TokenBatch {
  std::vector<std::int32_t> inputs;   // B*T
  std::vector<std::int32_t> targets;  // B*T
};

class TokenSource {
 public:
  // Uniform random tokens in [0, vocab) from splitmix64(seed, position).
  static TokenSource synthetic(std::int64_t vocab, std::uint64_t seed);
  // Reads FILE (format above). Throws std::invalid_argument naming the file and the problem; every token must
  // be < vocab.
  static TokenSource from_file(const std::string& path, std::int64_t vocab);
  // Byte-level tokenization of a text held in memory for a model of `vocab` tokens (the same rule as for text
  // files): kEndOfText first only when the vocabulary has room for it.
  static std::vector<std::int32_t> tokenize_bytes(const std::string& text, std::int64_t vocab);

  TokenBatch next_batch(std::int64_t batch, std::int64_t seq);
  std::string description() const { return description_; }
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  // Where the next batch starts (checkpoints resume the data exactly there).
  std::int64_t position() const { return position_; }
  void seek(std::int64_t position);

 private:
  bool synthetic_ = false;
  std::uint64_t seed_ = 0;
  std::int64_t vocab_ = 0;
  std::vector<std::int32_t> tokens_;
  std::int64_t position_ = 0;
  std::string description_;
};

}  // namespace zeroplan::exec
