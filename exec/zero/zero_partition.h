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
// of backward, so their bucket buffer stays live through it), and the blocks at both ends are cut into buckets
// that double from one block (doubling_bucket_cuts): the reduction of the last bucket of backward and the
// deferred CPU update of the last bucket of forward are kept to one block each.
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
  bool embeddings = false;             // holds the embeddings: written at the end of backward (and at its start
                                       //   when they are the tied head), so they keep buffers of their own
  bool persistent = false;             // stage 3: whole on every rank (below the persistence threshold)
  std::int64_t elements() const { return end - begin; }
  // flat index of rank r's chunk
  std::int64_t chunk_begin(int rank) const { return begin + static_cast<std::int64_t>(rank) * chunk; }
};

// The block boundaries b (0 < b <= layers, b = layers being the final norm: a bucket never holds tensors on both
// sides of b) that cut the blocks at both ends of the layout into buckets doubling towards the middle: [0, 1),
// [1, 2), [2, 4), [4, 8), ... from the bottom and [L-1, L), [L-2, L-1), [L-4, L-2), ... from the top, while a
// segment holds fewer than bucket_elements (beyond that the greedy cut from the top already gives buckets of
// bucket_elements).
// - The bottom, for backward: a bucket's reduction can only start when backward has finished its lowest block,
//   and every reduction must be over before the optimizer; a reduction moves a block's gradients ~10x faster than
//   backward computes them (2x H200, GPT-2 1.5B: ~0.2 ms against ~2.4 ms), so a bucket of b blocks is hidden by
//   the b blocks below it, and the last one, a single block, by the embeddings' backward. Measured on 2x H200
//   (stage 0, two alternating pairs of runs in one call): exposed communication 0.78-0.85 ms per step against
//   0.92-0.98 ms with block 0 alone.
// - The top, for the next forward: with the optimizer on the CPU the update runs bucket by bucket in the order
//   the forward needs them (zero_engine.h, ZeRO-Offload), and the forward of the last bucket updated can only
//   start after the whole update: a single block there instead of 16.
// Buckets that end at block boundaries also let stage 2 rotate over one buffer fewer (zero_buffer_layout.cpp:
// each block then writes a single bucket): with DeepSpeed's 5e8-element buckets two of 0.98 GB instead of three.
// The simulator closes its buckets at the same boundaries (sim/zero_schedule.cpp closes_executor_bucket).
std::vector<std::int64_t> doubling_bucket_cuts(std::int64_t layers, std::int64_t block_elements,
                                               std::int64_t bucket_elements);

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
