// Flat parameter layout: every parameter tensor is a contiguous range [offset, offset + numel) of one flat
// buffer, and the gradients, fp32 master weights and Adam moments use the same offsets in their own flat
// buffers. ZeRO (next issue) partitions these buffers into contiguous per-rank ranges, so the layout is
// layer-major: the embeddings, then each block's tensors together, then the final LayerNorm.
//
// Inside a block the four 2-D weights come first and the eight 1-D tensors (LayerNorm weights/biases and
// linear biases) last, so weight decay (applied to 2-D weights and embeddings only) is one range test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/exec_config.h"
#include "exec/init_rng.h"

namespace zeroplan::exec {

struct ParamTensor {
  std::string name;       // "h.3.attn.c_attn.weight" (GPT-2 / nanoGPT naming)
  std::int64_t offset;    // elements from the start of the flat buffer
  std::int64_t rows;      // out features (1 for vectors)
  std::int64_t cols;      // in features
  bool weight_decay;      // 2-D weights and embeddings
  InitKind init;          // GPT-2 initialization of this tensor (exec/init_rng.h)
  // Position of the tensor in the unaligned layout: the index the initialization hashes, so that a layout
  // aligned for N ranks holds the same values as the one-rank layout.
  std::int64_t init_index;
  std::int64_t numel() const { return rows * cols; }
};

// Indices into a block's tensors (BlockTensors::t).
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
  explicit ParamLayout(const Gpt2Shape& shape, std::int64_t align = 1);

  const Gpt2Shape& shape() const { return shape_; }
  std::int64_t total() const { return total_; }                 // elements in the flat buffer (padded vocab)
  std::int64_t align() const { return align_; }
  // Parameters of the model as described (real vocabulary rows only): the N of the 6N FLOP convention.
  std::int64_t model_params() const;
  const std::vector<ParamTensor>& tensors() const { return tensors_; }

  const ParamTensor& wte() const { return tensors_[0]; }
  const ParamTensor& wpe() const { return tensors_[1]; }
  const ParamTensor& block(std::int64_t layer, BlockTensor which) const {
    return tensors_[2 + layer * kBlockTensorCount + which];
  }
  const ParamTensor& lnf_w() const { return tensors_[tensors_.size() - 2]; }
  const ParamTensor& lnf_b() const { return tensors_[tensors_.size() - 1]; }

  // Block-major geometry used by the fused AdamW kernel to decide weight decay without a table:
  // [0, blocks_begin) embeddings (decayed); each block is block_stride elements whose first
  // block_decay_elements are the 2-D weights; [blocks_end, total) the final LayerNorm (not decayed).
  std::int64_t blocks_begin() const { return blocks_begin_; }
  std::int64_t block_stride() const { return block_stride_; }
  std::int64_t block_decay_elements() const { return block_decay_; }
  std::int64_t blocks_end() const { return blocks_begin_ + shape_.layers * block_stride_; }
  bool decayed(std::int64_t flat_index) const;
  // std of the residual projections' init: 0.02 / sqrt(2L) (GPT-2 paper sec. 2.3, nanoGPT)
  float residual_std() const;
  // Fills the flat buffer with the initialization of every element (the CUDA backend does the same on the GPU).
  void initialize(std::uint64_t seed, float* flat) const;

 private:
  Gpt2Shape shape_;
  std::int64_t align_ = 1;
  std::vector<ParamTensor> tensors_;
  std::int64_t total_ = 0;
  std::int64_t blocks_begin_ = 0;
  std::int64_t block_stride_ = 0;
  std::int64_t block_decay_ = 0;
};

}  // namespace zeroplan::exec
