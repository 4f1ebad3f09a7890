#include "exec/param_layout.h"

#include <algorithm>
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

ModelShape make_shape(std::int64_t vocab, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                      std::int64_t max_seq) {
  ModelShape s;
  s.vocab = vocab;
  s.padded_vocab = pad_vocab(vocab);
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = heads;
  s.head_size = heads > 0 ? hidden / heads : 0;
  s.ffn_hidden = 4 * hidden;
  s.max_seq = max_seq;
  return s;  // the defaults are GPT-2's kinds
}

ModelShape make_llama_shape(std::int64_t vocab, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                            std::int64_t kv_heads, std::int64_t ffn_hidden, std::int64_t max_seq, double rope_theta,
                            double norm_eps) {
  ModelShape s = make_shape(vocab, hidden, layers, heads, max_seq);
  s.kv_heads = kv_heads;
  s.ffn_hidden = ffn_hidden;
  s.norm = NormKind::rms_norm;
  s.norm_eps = norm_eps;
  s.norm_bias = false;
  s.position = PositionKind::rope;
  s.rope_theta = rope_theta;
  s.mlp = MlpKind::swiglu;
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = false;
  s.tied_head = false;
  s.naming = TensorNaming::llama;
  return s;
}

void validate(const ExecConfig& c) {
  auto fail = [](const std::string& field, const std::string& what) {
    throw std::invalid_argument("executor: " + field + ": " + what);
  };
  const ModelShape& s = c.shape;
  if (s.vocab < 1) fail("vocab_size", "expected a positive vocabulary size");
  if (s.padded_vocab < s.vocab || s.padded_vocab % 128 != 0) fail("padded_vocab", "expected pad_vocab(vocab)");
  if (s.hidden < 8 || s.hidden % 8 != 0) fail("hidden", "expected a positive multiple of 8 (16-byte vector access)");
  if (s.heads < 1) fail("heads", "expected at least one head");
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    fail("kv_heads", "expected a divisor of heads (" + std::to_string(s.heads) + "), got " + std::to_string(s.kv_heads));
  if (s.head_size < 8 || s.head_size % 8 != 0) fail("head_dim", "expected a multiple of 8");
  if (s.position == PositionKind::rope && s.head_size % 2 != 0) fail("head_dim", "rotary embeddings need an even head size");
  if (s.ffn_hidden < 8 || s.ffn_hidden % 8 != 0) fail("intermediate_size", "expected a positive multiple of 8");
  if (!(s.norm_eps > 0)) fail("norm_eps", "expected > 0");
  if (s.position == PositionKind::rope && !(s.rope_theta > 0)) fail("rope_theta", "expected > 0");
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

ParamLayout::ParamLayout(const ModelShape& shape, std::int64_t align, bool block_weights)
    : shape_(shape), align_(align) {
  if (align < 1) throw std::invalid_argument("ParamLayout: align must be >= 1");
  const std::int64_t C = shape.hidden;
  const bool llama = shape.naming == TensorNaming::llama;
  // GPT-2 scales its two residual output projections (nanoGPT); transformers' Llama initializes every matrix
  // with N(0, initializer_range = 0.02) (LlamaPreTrainedModel._init_weights).
  const InitKind residual = llama ? InitKind::normal : InitKind::residual_normal;
  std::int64_t dense = 0;  // offset in the unaligned layout
  auto round_up = [align](std::int64_t x) { return (x + align - 1) / align * align; };
  const float spread_residual = residual_std();
  auto add = [&](std::string name, std::int64_t rows, std::int64_t cols, bool decay, InitKind init) {
    tensors_.push_back(ParamTensor{std::move(name), total_, rows, cols, decay, init, dense,
                                   init == InitKind::residual_normal ? spread_residual : 0.02f});
    total_ = round_up(total_ + rows * cols);
    dense += rows * cols;
  };
  add(llama ? "embed_tokens" : "wte", shape.padded_vocab, C, true, InitKind::normal);
  if (has_wpe()) add("wpe", shape.max_seq, C, true, InitKind::normal);
  add_unit(0, 0);
  first_block_tensor_ = tensors_.size();
  blocks_begin_ = total_;
  // A block's tensors in their order, with the name each carries (GPT-2's, or transformers' Llama module names
  // with q/k/v and gate/up fused: run/hf_tensor_names.cpp splits them).
  struct Role {
    BlockTensor which;
    const char* gpt2;
    const char* llama;
    std::int64_t rows, cols;
    bool present;
    InitKind init;
  };
  const std::int64_t Q = shape.q_dim(), QKV = shape.qkv_dim(), F = shape.ffn_hidden, FI = shape.mlp_in_dim();
  const InitKind norm_w = InitKind::ones;
  const Role roles[kBlockTensorCount] = {
      {kQkvW, "attn.c_attn.weight", "self_attn.qkv_proj.weight", QKV, C, block_weights, InitKind::normal},
      {kAttProjW, "attn.c_proj.weight", "self_attn.o_proj.weight", C, Q, block_weights, residual},
      {kFcW, "mlp.c_fc.weight", "mlp.gate_up_proj.weight", FI, C, block_weights, InitKind::normal},
      {kFcProjW, "mlp.c_proj.weight", "mlp.down_proj.weight", C, F, block_weights, residual},
      {kLn1W, "ln_1.weight", "input_layernorm.weight", 1, C, true, norm_w},
      {kLn1B, "ln_1.bias", "input_layernorm.bias", 1, C, shape.norm_bias, InitKind::zeros},
      {kQkvB, "attn.c_attn.bias", "self_attn.qkv_proj.bias", 1, QKV, shape.qkv_bias, InitKind::zeros},
      {kAttProjB, "attn.c_proj.bias", "self_attn.o_proj.bias", 1, C, shape.attn_out_bias, InitKind::zeros},
      {kLn2W, "ln_2.weight", "post_attention_layernorm.weight", 1, C, true, norm_w},
      {kLn2B, "ln_2.bias", "post_attention_layernorm.bias", 1, C, shape.norm_bias, InitKind::zeros},
      {kFcB, "mlp.c_fc.bias", "mlp.gate_up_proj.bias", 1, FI, shape.mlp_bias, InitKind::zeros},
      {kFcProjB, "mlp.c_proj.bias", "mlp.down_proj.bias", 1, C, shape.mlp_bias, InitKind::zeros},
  };
  block_tensor_count_ = 0;
  for (const Role& r : roles) block_index_[r.which] = r.present ? static_cast<int>(block_tensor_count_++) : -1;
  for (std::int64_t l = 0; l < shape.layers; ++l) {
    const std::string p = (llama ? "layers." : "h.") + std::to_string(l) + ".";
    const std::int64_t start = total_;
    const std::size_t first = tensors_.size();
    for (const Role& r : roles) {
      if (!r.present) continue;
      add(p + (llama ? r.llama : r.gpt2), r.rows, r.cols, r.rows > 1, r.init);
      if (r.which == kFcProjW) block_decay_ = total_ - start;
    }
    block_stride_ = total_ - start;
    add_unit(first, start);
  }
  tail_first_ = tensors_.size();
  const std::int64_t tail_start = total_;
  if (!shape.tied_head) add("lm_head", shape.padded_vocab, C, true, InitKind::normal);
  tail_decay_end_ = total_;
  final_norm_first_ = tensors_.size();
  add(llama ? "norm.weight" : "ln_f.weight", 1, C, false, InitKind::ones);
  if (shape.norm_bias) add(llama ? "norm.bias" : "ln_f.bias", 1, C, false, InitKind::zeros);
  add_unit(tail_first_, tail_start);
}

void ParamLayout::add_unit(std::size_t first_tensor, std::int64_t begin) {
  units_.push_back(ParamUnit{first_tensor, tensors_.size() - first_tensor, begin, total_});
}

ParamLayout::ParamLayout(const NetworkShape& network, std::int64_t align)
    : network_(true), align_(std::max<std::int64_t>(align, kNetworkTensorAlignment)) {
  if (align < 1) throw std::invalid_argument("ParamLayout: align must be >= 1");
  align = align_;
  auto round_up = [align](std::int64_t x) { return (x + align - 1) / align * align; };
  // A layer's tensors in op order first: their op-order position (what the ops address, network_tensor) and
  // their dense position (init_index: the initialization does not depend on where a tensor is placed).
  std::int64_t dense = 0;
  std::size_t op_order = 0;
  std::vector<ParamTensor> layer_tensors;
  std::vector<std::size_t> layer_op_order;
  auto add = [&](std::string name, std::int64_t rows, std::int64_t cols, InitKind init, float spread,
                 std::vector<std::int64_t> dims = {}) {
    layer_tensors.push_back(ParamTensor{std::move(name), 0, rows, cols, true, init, dense, spread, std::move(dims)});
    layer_op_order.push_back(op_order++);
    dense += rows * cols;
  };
  for (const std::vector<LayerOp>& layer : network.layers) {
    layer_tensors.clear();
    layer_op_order.clear();
    for (const LayerOp& op : layer) {
      switch (op.kind) {
        case LayerOpKind::conv2d: {
          // torchvision ResNet: kaiming_normal_(mode="fan_out", nonlinearity="relu"), std sqrt(2 / fan_out)
          const std::int64_t fan_out = op.out_channels * op.kernel * op.kernel;
          add(op.name + ".weight", op.out_channels, op.in_channels / op.groups * op.kernel * op.kernel,
              InitKind::normal, std::sqrt(2.0f / static_cast<float>(fan_out)),
              {op.out_channels, op.in_channels / op.groups, op.kernel, op.kernel});
          if (op.bias) add(op.name + ".bias", 1, op.out_channels, InitKind::zeros, 0.0f);
          break;
        }
        case LayerOpKind::batch_norm:  // nn.init.constant_(weight, 1), constant_(bias, 0)
          add(op.name + ".weight", 1, op.channels, InitKind::ones, 0.0f);
          add(op.name + ".bias", 1, op.channels, InitKind::zeros, 0.0f);
          buffers_.push_back({op.name + ".running_mean", op.channels});
          buffers_.push_back({op.name + ".running_var", op.channels});
          break;
        case LayerOpKind::linear: {  // nn.Linear.reset_parameters: U(-1/sqrt(in), 1/sqrt(in)) for both
          const float bound = 1.0f / std::sqrt(static_cast<float>(op.in_features));
          add(op.name + ".weight", op.out_features, op.in_features, InitKind::uniform, bound);
          if (op.bias) add(op.name + ".bias", 1, op.out_features, InitKind::uniform, bound);
          break;
        }
        case LayerOpKind::relu:
        case LayerOpKind::max_pool2d:
        case LayerOpKind::add:
        case LayerOpKind::adaptive_avg_pool2d:
        case LayerOpKind::flatten: break;
      }
    }
    // Placed largest first (stable): whatever stage3_param_persistence_threshold a run gives, the tensors at or
    // below it (DeepSpeed keeps them whole: batch norm's weights and biases, small convolutions) are then one run
    // at the unit's end, so stage 3 gathers a unit's partitioned tensors as one bucket and reduces the unit in at
    // most two (exec/zero/zero_partition.h cuts a bucket at every change between persistent and partitioned
    // tensors). In op order, a ResNet bottleneck's convolutions alternate with its batch norms: ResNet-101 at
    // stage 3 then had 179 buckets, each an NCCL call of its own, beside small kernels.
    std::vector<std::size_t> order(layer_tensors.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return layer_tensors[a].numel() > layer_tensors[b].numel();
    });
    const std::size_t first = tensors_.size();
    const std::int64_t start = total_;
    network_tensor_.resize(op_order);
    for (std::size_t i : order) {
      ParamTensor t = std::move(layer_tensors[i]);
      t.offset = total_;
      total_ = round_up(total_ + t.numel());
      network_tensor_[layer_op_order[i]] = tensors_.size();
      tensors_.push_back(std::move(t));
    }
    add_unit(first, start);
  }
  // Every tensor decays: [0, total) is the "embeddings" range of the decay geometry.
  blocks_begin_ = total_;
  block_stride_ = 0;
  block_decay_ = 0;
  tail_decay_end_ = total_;
  first_block_tensor_ = tail_first_ = final_norm_first_ = tensors_.size();
  block_tensor_count_ = 0;
  for (int& i : block_index_) i = -1;
}

ParamLayout::ParamLayout(const std::vector<std::vector<TensorSpec>>& units, std::int64_t align)
    : network_(true), adapters_(true), align_(align) {
  if (align < 1) throw std::invalid_argument("ParamLayout: align must be >= 1");
  std::int64_t dense = 0;
  for (const std::vector<TensorSpec>& unit : units) {
    const std::size_t first = tensors_.size();
    const std::int64_t start = total_;
    for (const TensorSpec& t : unit) {
      // dims [rows, cols] always: an adapter of rank 1 is still a matrix in PEFT's files.
      tensors_.push_back(ParamTensor{t.name, total_, t.rows, t.cols, true, t.init, dense, t.spread, {t.rows, t.cols}});
      total_ = (total_ + t.rows * t.cols + align - 1) / align * align;
      dense += t.rows * t.cols;
    }
    add_unit(first, start);
  }
  // Every tensor decays (as a layer list's): [0, total) is the "embeddings" range of the decay geometry.
  blocks_begin_ = total_;
  tail_decay_end_ = total_;
  first_block_tensor_ = tail_first_ = final_norm_first_ = tensors_.size();
  for (int& i : block_index_) i = -1;
}

const ParamTensor& ParamLayout::wpe() const {
  if (!has_wpe()) throw std::logic_error("ParamLayout: this model has no position embedding");
  return tensors_[1];
}

const ParamTensor& ParamLayout::final_norm_b() const {
  if (!shape_.norm_bias) throw std::logic_error("ParamLayout: this model's final norm has no bias");
  return tensors_[final_norm_first_ + 1];
}

std::int64_t ParamLayout::live_elements(const ParamTensor& t) const {
  if (network_) return t.numel();
  // the token embedding and an untied head have padded_vocab rows, of which vocab hold values
  if (&t == &tensors_[0] || (!shape_.tied_head && &t == &tensors_[tail_first_])) return shape_.vocab * t.cols;
  return t.numel();
}

std::int64_t ParamLayout::model_params() const {
  std::int64_t n = 0;
  for (const ParamTensor& t : tensors_) n += live_elements(t);
  return n;
}

float ParamLayout::residual_std() const {
  return 0.02f / std::sqrt(2.0f * static_cast<float>(shape_.layers));
}

void ParamLayout::initialize(std::uint64_t seed, float* flat) const {
  for (const ParamTensor& t : tensors_) {
    const std::int64_t live = live_elements(t);  // padded vocabulary rows stay 0
    for (std::int64_t i = 0; i < t.numel(); ++i)
      flat[t.offset + i] =
          i < live ? init_value(t.init, seed, static_cast<std::uint64_t>(t.init_index + i), t.init_std) : 0.0f;
    const std::int64_t end = &t == &tensors_.back() ? total_ : (&t)[1].offset;
    for (std::int64_t i = t.offset + t.numel(); i < end; ++i) flat[i] = 0.0f;  // alignment gaps
  }
}

void ParamLayout::initialize_range(std::uint64_t seed, std::int64_t begin, std::int64_t n, float* out) const {
  std::fill(out, out + n, 0.0f);  // alignment gaps and padded vocabulary rows
  const std::int64_t end = begin + n;
  for (const ParamTensor& t : tensors_) {
    const std::int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + live_elements(t));
    for (std::int64_t f = lo; f < hi; ++f)
      out[f - begin] = init_value(t.init, seed, static_cast<std::uint64_t>(t.init_index + (f - t.offset)), t.init_std);
  }
}

bool ParamLayout::decayed(std::int64_t i) const {
  if (network_) return i < total_;
  if (i < blocks_begin_) return true;
  if (i >= blocks_end()) return i < tail_decay_end_;
  return (i - blocks_begin_) % block_stride_ < block_decay_;
}

}  // namespace zeroplan::exec
