#include "exec/param_layout.h"

#include <cmath>
#include <stdexcept>

namespace zeroplan::exec {

std::string to_string(ExecPrecision precision) {
  switch (precision) {
    case ExecPrecision::fp32: return "fp32";
    case ExecPrecision::fp16: return "fp16";
    case ExecPrecision::bf16: return "bf16";
  }
  return "?";
}

int element_bytes(ExecPrecision precision) { return precision == ExecPrecision::fp32 ? 4 : 2; }

std::int64_t pad_vocab(std::int64_t vocab) { return (vocab + 127) / 128 * 128; }

Gpt2Shape make_shape(std::int64_t vocab, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                     std::int64_t max_seq) {
  Gpt2Shape s;
  s.vocab = vocab;
  s.padded_vocab = pad_vocab(vocab);
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.max_seq = max_seq;
  return s;
}

void validate(const ExecConfig& c) {
  auto fail = [](const std::string& field, const std::string& what) {
    throw std::invalid_argument("executor: " + field + ": " + what);
  };
  const Gpt2Shape& s = c.shape;
  if (s.vocab < 1) fail("vocab_size", "expected a positive vocabulary size");
  if (s.padded_vocab < s.vocab || s.padded_vocab % 128 != 0) fail("padded_vocab", "expected pad_vocab(vocab)");
  if (s.hidden < 8 || s.hidden % 8 != 0) fail("hidden", "expected a positive multiple of 8 (16-byte vector access)");
  if (s.heads < 1 || s.hidden % s.heads != 0) fail("heads", "expected a divisor of hidden");
  if (s.head_dim() % 8 != 0) fail("heads", "expected hidden/heads to be a multiple of 8");
  if (s.layers < 1) fail("layers", "expected at least one layer");
  if (c.seq_len < 1 || c.seq_len > s.max_seq)
    fail("seq_len", "expected 1 <= seq_len <= max_seq (" + std::to_string(s.max_seq) + "), got " +
                        std::to_string(c.seq_len));
  if (c.micro_batch < 1) fail("micro_batch", "expected >= 1");
  if (c.grad_accum < 1) fail("grad_accum", "expected >= 1");
  if (c.loss_scale.scale_window < 1) fail("loss_scale_window", "expected >= 1");
  if (c.loss_scale.hysteresis < 1) fail("hysteresis", "expected >= 1");
  if (c.loss_scale.min_scale <= 0) fail("min_loss_scale", "expected > 0");
  if (c.zero.stage < 0 || c.zero.stage > 3) fail("zero_optimization.stage", "expected 0, 1, 2 or 3");
  if (c.zero.reduce_bucket_elements < 1) fail("reduce_bucket_size", "expected >= 1 element");
  if (c.zero.allgather_bucket_elements < 1) fail("allgather_bucket_size", "expected >= 1 element");
  if (c.zero.prefetch_bucket_elements < 0) fail("stage3_prefetch_bucket_size", "expected >= 0 elements");
  if (c.zero.param_persistence_threshold < 0) fail("stage3_param_persistence_threshold", "expected >= 0 elements");
  if (c.zero.max_live_parameters < 0) fail("stage3_max_live_parameters", "expected >= 0 elements");
  if (c.zero.max_reuse_distance < 0) fail("stage3_max_reuse_distance", "expected >= 0 elements");
}

ParamLayout::ParamLayout(const Gpt2Shape& shape, std::int64_t align) : shape_(shape), align_(align) {
  if (align < 1) throw std::invalid_argument("ParamLayout: align must be >= 1");
  const std::int64_t C = shape.hidden;
  std::int64_t dense = 0;  // offset in the unaligned layout
  auto round_up = [align](std::int64_t x) { return (x + align - 1) / align * align; };
  auto add = [&](std::string name, std::int64_t rows, std::int64_t cols, bool decay, InitKind init) {
    tensors_.push_back(ParamTensor{std::move(name), total_, rows, cols, decay, init, dense});
    total_ = round_up(total_ + rows * cols);
    dense += rows * cols;
  };
  add("wte", shape.padded_vocab, C, true, InitKind::normal);
  add("wpe", shape.max_seq, C, true, InitKind::normal);
  blocks_begin_ = total_;
  for (std::int64_t l = 0; l < shape.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const std::int64_t start = total_;
    add(p + "attn.c_attn.weight", 3 * C, C, true, InitKind::normal);
    add(p + "attn.c_proj.weight", C, C, true, InitKind::residual_normal);
    add(p + "mlp.c_fc.weight", 4 * C, C, true, InitKind::normal);
    add(p + "mlp.c_proj.weight", C, 4 * C, true, InitKind::residual_normal);
    block_decay_ = total_ - start;
    add(p + "ln_1.weight", 1, C, false, InitKind::ones);
    add(p + "ln_1.bias", 1, C, false, InitKind::zeros);
    add(p + "attn.c_attn.bias", 1, 3 * C, false, InitKind::zeros);
    add(p + "attn.c_proj.bias", 1, C, false, InitKind::zeros);
    add(p + "ln_2.weight", 1, C, false, InitKind::ones);
    add(p + "ln_2.bias", 1, C, false, InitKind::zeros);
    add(p + "mlp.c_fc.bias", 1, 4 * C, false, InitKind::zeros);
    add(p + "mlp.c_proj.bias", 1, C, false, InitKind::zeros);
    block_stride_ = total_ - start;
  }
  add("ln_f.weight", 1, C, false, InitKind::ones);
  add("ln_f.bias", 1, C, false, InitKind::zeros);
}

std::int64_t ParamLayout::model_params() const {
  std::int64_t n = 0;
  for (const ParamTensor& t : tensors_) n += t.numel();
  return n - (shape_.padded_vocab - shape_.vocab) * shape_.hidden;
}

float ParamLayout::residual_std() const {
  return 0.02f / std::sqrt(2.0f * static_cast<float>(shape_.layers));
}

void ParamLayout::initialize(std::uint64_t seed, float* flat) const {
  const float rstd = residual_std();
  for (const ParamTensor& t : tensors_) {
    std::int64_t live = t.numel();
    if (&t == &tensors_[0]) live = shape_.vocab * shape_.hidden;  // padded vocabulary rows stay 0
    for (std::int64_t i = 0; i < t.numel(); ++i)
      flat[t.offset + i] =
          i < live ? init_value(t.init, seed, static_cast<std::uint64_t>(t.init_index + i), rstd) : 0.0f;
    const std::int64_t end = &t == &tensors_.back() ? total_ : (&t)[1].offset;
    for (std::int64_t i = t.offset + t.numel(); i < end; ++i) flat[i] = 0.0f;  // alignment gaps
  }
}

bool ParamLayout::decayed(std::int64_t i) const {
  if (i < blocks_begin_) return true;
  if (i >= blocks_end()) return false;
  return (i - blocks_begin_) % block_stride_ < block_decay_;
}

}  // namespace zeroplan::exec
