#include "exec/token_data.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "exec/init_rng.h"

namespace zeroplan::exec {

namespace {
[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument(path + ": " + what);
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

TokenSource TokenSource::synthetic(std::int64_t vocab, std::uint64_t seed) {
  TokenSource s;
  s.synthetic_ = true;
  s.seed_ = seed;
  s.vocab_ = vocab;
  s.description_ = "synthetic uniform tokens (seed " + std::to_string(seed) + ")";
  return s;
}

std::vector<std::int32_t> TokenSource::tokenize_bytes(const std::string& text, std::int64_t vocab) {
  std::vector<std::int32_t> out;
  out.reserve(text.size() + 1);
  if (vocab > kEndOfText) out.push_back(kEndOfText);
  for (unsigned char c : text) out.push_back(static_cast<std::int32_t>(c));
  return out;
}

TokenSource TokenSource::from_file(const std::string& path, std::int64_t vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the --data file");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TokenSource s;
  s.vocab_ = vocab;
  std::int32_t magic = 0;
  if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
  if (magic == kLlmcMagic) {
    if (bytes.size() < 256 * 4) fail(path, "llm.c header: file shorter than the 256 x int32 header");
    std::int32_t header[256];
    std::memcpy(header, bytes.data(), sizeof(header));
    const int version = header[1];
    const std::int64_t count = header[2];
    const int width = version == 1 ? 2 : version == 2 ? 4 : 0;
    if (width == 0) fail(path, "llm.c header[1] (version): expected 1 (uint16) or 2 (uint32), got " + std::to_string(version));
    const std::int64_t body = static_cast<std::int64_t>(bytes.size()) - 1024;
    if (body % width != 0)
      fail(path, "llm.c tokens v" + std::to_string(version) + ": the " + std::to_string(body) +
                     " bytes after the header are not a whole number of " + std::to_string(width) + "-byte tokens");
    if (count < 0 || body != count * width)
      fail(path, "llm.c header[2] (token count " + std::to_string(count) + ") disagrees with the file: it holds " +
                     std::to_string(body / width) + " tokens after the header");
    s.tokens_.resize(count);
    for (std::int64_t i = 0; i < count; ++i) {
      if (width == 2) {
        std::uint16_t t;
        std::memcpy(&t, bytes.data() + 1024 + i * 2, 2);
        s.tokens_[i] = t;
      } else {
        std::uint32_t t;
        std::memcpy(&t, bytes.data() + 1024 + i * 4, 4);
        s.tokens_[i] = static_cast<std::int32_t>(t);
      }
    }
    s.description_ = path + " (llm.c tokens v" + std::to_string(version) + ", " + std::to_string(count) + " tokens)";
  } else if (ends_with(path, ".bin")) {
    if (bytes.size() % 2 != 0)
      fail(path, "nanoGPT .bin: expected raw uint16 tokens, but its " + std::to_string(bytes.size()) +
                     " bytes are not a whole number of 2-byte tokens");
    if (vocab > 65536)
      fail(path, "a headerless .bin holds uint16 tokens (nanoGPT), which cannot hold this model's vocabulary of " +
                     std::to_string(vocab) + "; write llm.c's header with version 2 (uint32 tokens)");
    s.tokens_.resize(bytes.size() / 2);
    for (std::size_t i = 0; i < s.tokens_.size(); ++i) {
      std::uint16_t t;
      std::memcpy(&t, bytes.data() + i * 2, 2);
      s.tokens_[i] = t;
    }
    s.description_ = path + " (raw uint16 tokens, " + std::to_string(s.tokens_.size()) + " tokens)";
  } else {
    if (vocab < kByteVocab)
      fail(path, "text is tokenized byte-level: every byte value 0..255 is a token, so vocab_size must be at least " +
                     std::to_string(kByteVocab) + ", got " + std::to_string(vocab));
    s.tokens_ = tokenize_bytes(std::string(bytes.begin(), bytes.end()), vocab);
    s.description_ = path + " (text, byte-level tokens, " + std::to_string(s.tokens_.size()) + " tokens)";
  }
  // Where each token's bytes are, for the message: after llm.c's 1024-byte header, 2 or 4 bytes a token.
  const std::int64_t header = magic == kLlmcMagic ? 1024 : 0;
  const std::int64_t width = magic == kLlmcMagic ? (bytes.size() >= 8 && bytes[4] == 2 ? 4 : 2) : ends_with(path, ".bin") ? 2 : 0;
  for (std::size_t i = 0; i < s.tokens_.size(); ++i)
    if (s.tokens_[i] < 0 || s.tokens_[i] >= vocab)
      fail(path, "token " + std::to_string(static_cast<std::uint32_t>(s.tokens_[i])) + " at position " +
                     std::to_string(i) +
                     (width > 0 ? " (byte offset " + std::to_string(header + static_cast<std::int64_t>(i) * width) + ")"
                                : std::string()) +
                     " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
  if (s.tokens_.size() < 2) fail(path, "needs at least 2 tokens");
  return s;
}

void TokenSource::seek(std::int64_t position) {
  if (position < 0 || (!synthetic_ && position > size()))
    throw std::invalid_argument(description_ + ": data position " + std::to_string(position) + " outside [0, " +
                                std::to_string(size()) + "]");
  position_ = position;
}

TokenBatch TokenSource::next_batch(std::int64_t batch, std::int64_t seq) {
  TokenBatch out;
  const std::int64_t n = batch * seq;
  out.inputs.resize(n);
  out.targets.resize(n);
  if (synthetic_) {
    for (std::int64_t i = 0; i <= n; ++i) {
      const std::uint64_t pos = static_cast<std::uint64_t>(position_ + i);
      const auto tok = static_cast<std::int32_t>(splitmix64(seed_ ^ splitmix64(pos)) % static_cast<std::uint64_t>(vocab_));
      if (i < n) out.inputs[i] = tok;
      if (i > 0) out.targets[i - 1] = tok;
    }
    // rows are independent windows: row b's last target is the next row's first input, as in llm.c
    position_ += n;
    return out;
  }
  if (size() < n + 1)
    throw std::invalid_argument(description_ + ": a micro-batch needs " + std::to_string(n + 1) +
                                " tokens (micro_batch x seq_len + 1) but the file holds " + std::to_string(size()));
  if (position_ + n + 1 > size()) position_ = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    out.inputs[i] = tokens_[position_ + i];
    out.targets[i] = tokens_[position_ + i + 1];
  }
  position_ += n;
  return out;
}

}  // namespace zeroplan::exec
