// How ZeRO splits the flat buffers of one model over the ranks: gradient buckets and each rank's partition.
//
// The flat layout (exec/param_layout.h) is aligned for the world: every tensor starts at a multiple of
// world * 64 elements. A bucket is a run of whole tensors, [begin, end), so its length splits into `world` equal
// chunks of a multiple of 64 elements, and chunk r of every bucket belongs to rank r. Rank r's partition (the
// fp32 master parameters, AdamW moments and, from stage 2, the gradients it keeps) is the concatenation of its
// chunks, bucket after bucket; one NCCL reduce-scatter per bucket delivers exactly that chunk, and one
// all-gather per bucket rebuilds the bucket's parameters from the chunks. This is FSDP's flat-parameter sharding
// applied per bucket; DeepSpeed stages 1-2 partition one flat buffer contiguously instead and must then reduce
// bucket pieces to several owners (stage_1_and_2.py average_tensor), which costs it extra collective calls.
//
// Buckets follow the order in which backward finishes the gradients. The layout is [wte, wpe, block 0 .. L-1,
// ln_f] and backward runs ln_f, block L-1, ..., block 0, then the embeddings (the tied wte is written first by
// the logits and last by the encoder), so the final gradients always form a suffix [x, total) of the buffer.
// Buckets are cut from the top down at tensor boundaries, each at most `bucket_elements` unless a single tensor
// is larger (then it is a bucket alone, as DeepSpeed puts a parameter larger than reduce_bucket_size in a bucket
// of its own); the embeddings always close with a bucket of their own (their gradients are written at the start
// of backward, so their bucket buffer stays live through it), and block 0's tensors are cut apart from the blocks
// above (their reduction is the one left after backward's compute: it is kept to one block).
//
// Stage 3 gathers parameters unit by unit (the embeddings, each block, the final norm: what one forward phase
// computes with), so its buckets never cross a unit boundary, and tensors at or below
// stage3_param_persistence_threshold (DeepSpeed parameter_offload.py mark_persistent_parameters: numel <=
// threshold) form buckets of their own, marked persistent: kept whole on every rank, never gathered.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/param_layout.h"

namespace zeroplan::exec {

// The alignment (elements) of tensors in a layout meant for `world` ranks: 64 elements per rank, i.e. 128-byte
// aligned 16-bit chunks.
std::int64_t zero_alignment(int world);

struct GradientBucket {
  std::int64_t begin = 0, end = 0;     // flat range of whole tensors
  std::int64_t chunk = 0;              // (end - begin) / world: each rank's share
  std::int64_t partition_offset = 0;   // where this bucket's chunk sits in the rank's partition
  bool embeddings = false;             // holds wte/wpe: written at the start and the end of backward
  bool persistent = false;             // stage 3: whole on every rank (below the persistence threshold)
  std::int64_t elements() const { return end - begin; }
  // flat index of rank r's chunk
  std::int64_t chunk_begin(int rank) const { return begin + static_cast<std::int64_t>(rank) * chunk; }
};

// Stage 3's gather units of a GPT-2 layout, in layout order: [wte, wpe], each block, [ln_f]: flat ranges.
std::vector<std::pair<std::int64_t, std::int64_t>> gather_unit_ranges(const ParamLayout& layout);

struct PartitionRules {
  std::int64_t bucket_elements = 500000000;  // reduce_bucket_size
  bool stage3 = false;                       // cut at gather units and persistence runs
  std::int64_t persistence_threshold = 0;    // stage 3: tensors with numel <= this persist (0: none)
};

class ZeroPartition {
 public:
  // layout must be aligned to zero_alignment(world). bucket_elements >= 1.
  ZeroPartition(const ParamLayout& layout, int world, int rank, const PartitionRules& rules);

  int world() const { return world_; }
  int rank() const { return rank_; }
  // In the order backward completes them (top of the buffer first).
  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  std::int64_t partition_elements() const { return partition_elements_; }  // sum of chunks = total / world
  std::int64_t largest_bucket() const { return largest_bucket_; }
  std::int64_t largest_chunk() const { return largest_chunk_; }
  // The bucket holding flat index i (binary search).
  int bucket_of(std::int64_t flat_index) const;
  std::int64_t persistent_elements() const { return persistent_elements_; }  // stage 3: whole on every rank

 private:
  int world_, rank_;
  std::vector<GradientBucket> buckets_;
  std::int64_t partition_elements_ = 0, largest_bucket_ = 0, largest_chunk_ = 0, persistent_elements_ = 0;
  std::vector<int> by_begin_;  // bucket indices sorted by begin
};

}  // namespace zeroplan::exec
