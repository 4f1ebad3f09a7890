// Flat parameter layout: every parameter tensor is a contiguous range [offset, offset + numel) of one flat
// buffer, and the gradients, fp32 master weights and Adam moments use the same offsets in their own flat
// buffers. ZeRO partitions these buffers into contiguous per-rank ranges, so the layout is unit-major, in the
// order forward uses the units: the embeddings unit (token embedding, GPT-2's position embedding), each block
// together, then the head unit (an untied lm_head, then the final norm). Backward runs the units in reverse.
//
// Inside a block the four 2-D weights come first and the 1-D tensors (norm weights/biases and linear biases)
// last, so weight decay (2-D weights and embeddings only) is one range test per block; in the head unit the
// lm_head matrix (decayed) comes before the final norm (not decayed). A block's tensors are the same roles for
// every model (BlockTensor); a model without biases (Llama) or without LayerNorm biases simply lacks those.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/exec_config.h"
#include "exec/init_rng.h"

namespace zeroplan::exec {

inline constexpr std::int64_t kNetworkTensorAlignment = 64;  // elements

struct ParamTensor {
  std::string name;       // "h.3.attn.c_attn.weight" (GPT-2) or "layers.3.self_attn.qkv_proj.weight" (Llama)
  std::int64_t offset;    // elements from the start of the flat buffer
  std::int64_t rows;      // out features (1 for vectors)
  std::int64_t cols;      // in features
  bool weight_decay;      // 2-D weights and embeddings
  InitKind init;          // initialization of this tensor (exec/init_rng.h)
  // Position of the tensor in the unaligned layout: the index the initialization hashes, so that a layout
  // aligned for N ranks holds the same values as the one-rank layout.
  std::int64_t init_index;
  // The spread of its initialization: the std of normal and residual_normal, the bound of uniform.
  float init_std = 0.02f;
  // The tensor's shape in the framework's checkpoints where it is not [rows, cols] (or [cols] for a vector):
  // a layer list's convolution weight, torchvision's [out, in / groups, k, k]. Empty otherwise.
  std::vector<std::int64_t> dims = {};
  std::int64_t numel() const { return rows * cols; }
};

// A tensor of a layout listed unit by unit (LoRA's adapters, exec/lora_layout.h).
struct TensorSpec {
  std::string name;
  std::int64_t rows = 0, cols = 0;
  InitKind init = InitKind::zeros;
  float spread = 0.0f;  // ParamTensor::init_std
};

// A layer list's buffers: what a rank keeps whole beside its partition of the parameters (BatchNorm's running
// mean and variance, under torchvision's names "<module>.running_mean" / ".running_var"), `numel` floats each.
struct BufferTensor {
  std::string name;
  std::int64_t numel = 0;
};

// A unit of the layout: what the model reads together (stage 3 gathers it whole) and backward finishes together.
// Transformers: the embeddings, each block, the head unit; layer lists: each layer of the description.
struct ParamUnit {
  std::size_t first_tensor = 0, tensor_count = 0;  // tensors()[first_tensor, first_tensor + tensor_count)
  std::int64_t begin = 0, end = 0;                 // flat range
};

// A block's tensor roles (ParamLayout::block): the fused q/k/v projection (rows q, then k, then v), the attention
// output projection, the MLP's first projection (GELU: fc; SwiGLU: gate and up fused, gate rows first) and its
// output projection; then the norms' weights and biases and the linear biases. Roles a model lacks are absent.
enum BlockTensor : int {
  kQkvW = 0, kAttProjW, kFcW, kFcProjW,                        // 2-D, decayed
  kLn1W, kLn1B, kQkvB, kAttProjB, kLn2W, kLn2B, kFcB, kFcProjB,  // 1-D, not decayed
  kBlockTensorCount
};

class ParamLayout {
 public:
  // `align` (elements): every tensor starts at a multiple of it and the total is rounded up to it, the gaps
  // holding zeros. The ZeRO engine aligns to world * 64 so that every gradient bucket (whole tensors) splits
  // into equal, 128-byte-aligned per-rank chunks (exec/zero/zero_partition.h); 1 is the dense layout.
  // block_weights false: the blocks' four 2-D weights are left out (a LoRA base whose linear weights are held
  // quantised outside the layout, --quantize-base nf4); has() is then false for their roles.
  explicit ParamLayout(const ModelShape& shape, std::int64_t align = 1, bool block_weights = true);
  // A layer-list network (exec_config.h NetworkShape): one unit per layer, its parameterised ops' tensors placed
  // largest first (see network_tensor), initialized as torchvision does; every tensor decays (the DeepSpeed
  // tutorial's optimizer has one parameter group).
  // Every tensor of a layer list starts at a multiple of at least kNetworkTensorAlignment elements: its sizes are the
  // description's (a 10-class head's bias has 10), and the GPU's packed kernels (the gradient norm, AdamW) and
  // cuBLASLt take ranges of whole 16-byte packs. Transformers' tensors are multiples of 64 by construction.
  ParamLayout(const NetworkShape& network, std::int64_t align);
  // Tensors listed by unit, one unit per list, in forward order, every tensor decayed, the units repeated (LoRA's
  // adapters: one unit per transformer block, exec/lora_layout.h). Names are kept as given.
  ParamLayout(const std::vector<std::vector<TensorSpec>>& units, std::int64_t align);

  // The units in forward order. Transformers: unit 0 the embeddings, 1..L the blocks, the last the head unit.
  const std::vector<ParamUnit>& units() const { return units_; }
  // Transformers: whether the embeddings unit is read again as the tied head (end of forward, start of backward).
  bool embeddings_reread() const { return !network_ && shape_.tied_head; }
  // The units that repeat with one size (transformer blocks: units [1, 1 + L)); none for a layer list.
  std::size_t repeated_first() const { return network_ ? 0 : 1; }
  std::size_t repeated_count() const {
    return adapters_ ? units_.size() : network_ ? 0 : static_cast<std::size_t>(shape_.layers);
  }
  // The lowest unit backward reads parameters of: a transformer's embedding backward reads none (unit 1); a layer
  // list's or the adapters' every unit (0).
  std::size_t lowest_backward_unit() const { return network_ ? 0 : 1; }
  // Units whose gradients have buffers of their own at stage 2 (the embeddings: written at both ends of backward
  // when tied). None for a layer list.
  bool own_gradient_buffer(std::size_t unit) const { return !network_ && unit == 0; }
  bool is_network() const { return network_ && !adapters_; }
  bool is_adapters() const { return adapters_; }

  const ModelShape& shape() const { return shape_; }
  std::int64_t total() const { return total_; }                 // elements in the flat buffer (padded vocab)
  std::int64_t align() const { return align_; }
  // Parameters of the model as described (real vocabulary rows only): the N of the 6N FLOP convention.
  std::int64_t model_params() const;
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // A layer list: the index into tensors() of the j-th parameter tensor in op order (each op's weight, then its
  // bias; a batch norm's weight, then its bias: exec/network_plan.h NetworkOp::first_tensor counts so). Inside a
  // unit the layout places them largest first (param_layout.cpp says why), so the two orders differ.
  std::size_t network_tensor(int op_order) const { return network_tensor_.at(static_cast<std::size_t>(op_order)); }
  // A layer list's buffers, in forward order (none for a transformer).
  const std::vector<BufferTensor>& buffers() const { return buffers_; }

  const ParamTensor& wte() const { return tensors_[0]; }
  bool has_wpe() const { return shape_.position == PositionKind::learned; }
  const ParamTensor& wpe() const;  // learned positions only
  // The head's matrix: the token embedding when tied, else lm_head (first tensor of the head unit).
  const ParamTensor& head() const { return shape_.tied_head ? tensors_[0] : tensors_[tail_first_]; }
  bool has(BlockTensor which) const { return block_index_[which] >= 0; }
  const ParamTensor& block(std::int64_t layer, BlockTensor which) const {
    return tensors_[first_block_tensor_ + layer * block_tensor_count_ + block_index_[which]];
  }
  // Final norm: weight, and bias (LayerNorm only).
  const ParamTensor& final_norm_w() const { return tensors_[final_norm_first_]; }
  const ParamTensor& final_norm_b() const;

  // Tensor indices (into tensors()) where the blocks and the head unit begin, and tensors per block.
  std::size_t first_block_tensor() const { return first_block_tensor_; }
  std::size_t tail_first_tensor() const { return tail_first_; }
  std::size_t block_tensor_count() const { return block_tensor_count_; }
  // Flat ranges of the units: [0, block_begin(0)) embeddings, [block_begin(l), block_end(l)) block l,
  // [tail_begin(), total()) the head unit.
  std::int64_t block_begin(std::int64_t layer) const { return tensors_[first_block_tensor_ + layer * block_tensor_count_].offset; }
  std::int64_t block_end(std::int64_t layer) const {
    return layer + 1 < shape_.layers ? block_begin(layer + 1) : tail_begin();
  }
  std::int64_t tail_begin() const { return tensors_[tail_first_].offset; }

  // Block-major geometry used by the fused AdamW kernels to decide weight decay without a table:
  // [0, blocks_begin) embeddings (decayed); each block is block_stride elements whose first
  // block_decay_elements are the 2-D weights; [blocks_end, tail_decay_end) the untied lm_head (decayed);
  // [tail_decay_end, total) the final norm (not decayed).
  std::int64_t blocks_begin() const { return blocks_begin_; }
  std::int64_t block_stride() const { return block_stride_; }
  std::int64_t block_decay_elements() const { return block_decay_; }
  std::int64_t blocks_end() const { return blocks_begin_ + shape_.layers * block_stride_; }
  std::int64_t tail_decay_end() const { return tail_decay_end_; }
  bool decayed(std::int64_t flat_index) const;
  // std of the residual projections' init: 0.02 / sqrt(2L) (GPT-2 paper sec. 2.3, nanoGPT)
  float residual_std() const;
  // Fills the flat buffer with the initialization of every element (the CUDA backend does the same on the GPU).
  void initialize(std::uint64_t seed, float* flat) const;
  // The same values for the flat range [begin, begin + n) only, into out[0, n) (a ZeRO rank's chunk: the work is
  // that of the range, not of the whole buffer).
  void initialize_range(std::uint64_t seed, std::int64_t begin, std::int64_t n, float* out) const;
  // Rows of tensor t that hold values (the padded vocabulary rows of the embedding and the head stay 0).
  std::int64_t live_elements(const ParamTensor& t) const;

 private:
  void add_unit(std::size_t first_tensor, std::int64_t begin);
  ModelShape shape_;
  bool network_ = false;  // not the transformer pipeline: a layer list or adapters (shape_ then describes nothing)
  bool adapters_ = false;  // tensors listed by unit (LoRA's adapters)
  std::int64_t align_ = 1;
  std::vector<ParamTensor> tensors_;
  std::vector<BufferTensor> buffers_;
  std::vector<std::size_t> network_tensor_;  // a layer list: op-order index -> tensors() index
  std::vector<ParamUnit> units_;
  std::int64_t total_ = 0;
  std::size_t first_block_tensor_ = 0, block_tensor_count_ = 0, tail_first_ = 0, final_norm_first_ = 0;
  int block_index_[kBlockTensorCount];  // role -> index inside a block, or -1
  std::int64_t blocks_begin_ = 0;
  std::int64_t block_stride_ = 0;
  std::int64_t block_decay_ = 0;
  std::int64_t tail_decay_end_ = 0;
};

}  // namespace zeroplan::exec
