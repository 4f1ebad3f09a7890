// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), modelled for the planner's replays of
// DeepSpeed's allocations (sim/deepspeed_allocator_replay.cpp): CachedSegments, the large pool's segments and blocks
// under best fit, split and merge; SizeClasses and per_parameter_burst, the segments of loops of per-parameter
// tensors. Fixed storage, no allocation: the planner's fast path runs these for every configuration it evaluates,
// so the classes are defined here whole, for inlining.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/units.h"
#include "sim/saturating.h"

namespace zeroplan {

// c10/cuda/CUDACachingAllocator.cpp: a large allocation (over kMinLargeAlloc, 10 MiB) is rounded to kRoundLarge
// (torch's name for it).
inline constexpr Bytes kRoundLarge = 2 * 1024 * 1024;

// The caching allocator's cached segments for the flat buffers (c10/cuda/CUDACachingAllocator.cpp): a request
// is served by the smallest free block at least its size (get_free_block, best fit), which is split when more than
// kSmallSize would be left over (should_split; the rest stays a free block of the same segment); with none large
// enough, cudaMalloc makes a segment of the request's size rounded to kRoundLarge (alloc_block). A freed block merges
// with its free neighbours in the segment (free_block -> try_merge_blocks). Buffers that fit in a block the freed
// activations left are carved from those (get_free_block splits them) and create nothing here. Fixed storage, no
// allocation: the planner's fast path runs this for every configuration it evaluates.
class CachedSegments {
 public:
  // `shortest_early`: the shortest request the replay makes `early` (0: unknown, so hold keeps every rest a block).
  explicit CachedSegments(Bytes activation_block, Bytes shortest_early = 0)
      : activation_block_(activation_block), shortest_early_(shortest_early) {}

  // Returns a handle for release(); -1 for a buffer served from the activations' blocks. `early`: allocated at the
  // start of the backward pass, before it has freed any activation block, so served from these segments whatever
  // its size (the loss's tensors and what the LM head's backward makes).
  int allocate(Bytes request, bool early = false) {
    if (request <= 0 || (!early && request <= activation_block_)) return -1;
    const Bytes bytes = sat_mul(ceil_div(request, kMinBlockSize), kMinBlockSize);  // round_size
    int best = best_fit(bytes);
    if (best < 0) {
      best = free_slot();
      if (best < 0) return -1;  // beyond any step DeepSpeed runs (each sub-group reuses the last's)
      blocks_[static_cast<std::size_t>(best)] = {segments_++, 0, sat_mul(ceil_div(bytes, kRoundLarge), kRoundLarge),
                                                 false, true};
    }
    Block& block = blocks_[static_cast<std::size_t>(best)];
    split(block, bytes);
    block.used = true;
    return best;
  }
  // A tensor held for the rest of the run (the optimizer's states, stage 3's fp32 masters), served as allocate serves
  // it. Where it makes a segment of its own, that segment is never free again: it is not kept as a block, and the rest
  // split off it (below kRoundLarge) is counted idle where no later request can take it (a request not `early` is
  // longer than the activation block, an `early` one at least `shortest_early`). So the blocks best fit and
  // free_sizes walk do not grow with the sub-groups.
  void hold(Bytes request, bool early = false) {
    if (request <= 0 || (!early && request <= activation_block_)) return;
    const Bytes bytes = sat_mul(ceil_div(request, kMinBlockSize), kMinBlockSize);
    const Bytes rest = sat_mul(ceil_div(bytes, kRoundLarge), kRoundLarge) - bytes;
    const bool rest_unreachable = rest <= activation_block_ && rest < shortest_early_;
    if (best_fit(bytes) >= 0 || (rest > kSmallSize && !rest_unreachable)) {
      allocate(request, early);
      return;
    }
    ++segments_;
    if (rest > kSmallSize) held_rest_ = sat_add(held_rest_, rest);
  }
  void release(int handle) {
    if (handle < 0) return;
    Block& block = blocks_[static_cast<std::size_t>(handle)];
    block.used = false;
    // Merge with the free neighbours of its segment (the block that ends where it starts, the one that starts
    // where it ends).
    for (int i = 0; i < count_; ++i) {
      Block& other = blocks_[static_cast<std::size_t>(i)];
      if (i == handle || !other.alive || other.used || other.segment != block.segment) continue;
      if (other.offset + other.bytes == block.offset) {
        block.offset = other.offset;
        block.bytes += other.bytes;
        other.alive = false;
      } else if (block.offset + block.bytes == other.offset) {
        block.bytes += other.bytes;
        other.alive = false;
      }
    }
  }
  // A forward pass's activations when they are many tensors no larger than the activation block (transformers'
  // eager modules: TinyLlama's 32, 64 and 88 MiB blocks; bench/deepspeed/results-pending/README.md, 2026-11-29):
  // each request is served by best fit, so they take, smallest first, the segments their own earlier requests made
  // (exact fits), then every free block of the other segments at least `smallest_request` long, split to what is
  // left; only what none of those holds gets new segments of its own (kept cached, and reused first by every later
  // forward). Replayed as a volume: `bytes` poured into the free blocks in the order best fit takes them.
  // release_activations frees them all (the backward pass, before its reductions).
  void fill_with_activations(Bytes bytes, Bytes smallest_request) {
    const Bytes own = std::min(bytes, own_activation_segments_ - own_activation_used_);
    own_activation_used_ = sat_add(own_activation_used_, own);
    bytes -= own;
    while (bytes > 0) {
      const int best = best_fit(smallest_request);
      if (best < 0) {  // cudaMalloc: segments of the activations' own
        own_activation_segments_ = sat_add(own_activation_segments_, bytes);
        own_activation_used_ = sat_add(own_activation_used_, bytes);
        return;
      }
      Block& block = blocks_[static_cast<std::size_t>(best)];
      split(block, std::min(bytes, block.bytes));
      block.used = true;
      block.activations = true;
      bytes -= std::min(bytes, block.bytes);
    }
  }
  // Holds `bytes` at the end of the largest cached block the forward's activations fill, so that it stays there
  // when they are freed; false when they fill none longer than that.
  bool hold_among_activations(Bytes bytes) {
    int largest = -1;
    for (int i = 0; i < count_; ++i) {
      const Block& block = blocks_[static_cast<std::size_t>(i)];
      if (block.alive && block.activations && block.bytes > bytes &&
          (largest < 0 || block.bytes > blocks_[static_cast<std::size_t>(largest)].bytes))
        largest = i;
    }
    const int held = largest < 0 ? -1 : free_slot();
    if (held < 0) return false;
    Block& block = blocks_[static_cast<std::size_t>(largest)];
    const Bytes rounded = sat_mul(ceil_div(bytes, kMinBlockSize), kMinBlockSize);
    block.bytes -= rounded;
    blocks_[static_cast<std::size_t>(held)] = {block.segment, block.offset + block.bytes, rounded, true, true};
    return true;
  }
  void release_activations() {
    own_activation_used_ = 0;
    for (int i = 0; i < count_; ++i) {
      Block& block = blocks_[static_cast<std::size_t>(i)];
      if (!block.alive || !block.activations) continue;
      block.activations = false;
      release(i);
    }
  }
  // The free block best fit takes for `bytes` (-1: none is large enough): the smallest at least that long; among
  // free blocks of one size the allocator's set orders by address (BlockComparatorSize), here segment by segment
  // in the order they were made, then by offset.
  int best_fit(Bytes bytes) const {
    int best = -1;
    for (int i = 0; i < count_; ++i) {
      const Block& block = blocks_[static_cast<std::size_t>(i)];
      if (!block.alive || block.used || block.bytes < bytes) continue;
      if (best < 0) {
        best = i;
        continue;
      }
      const Block& chosen = blocks_[static_cast<std::size_t>(best)];
      if (block.bytes < chosen.bytes ||
          (block.bytes == chosen.bytes &&
           (block.segment < chosen.segment || (block.segment == chosen.segment && block.offset < chosen.offset))))
        best = i;
    }
    return best;
  }
  // Bytes cached and not allocated: the free blocks of every segment (the optimizer states the first step created
  // are held from then on), and the activations' own segments they do not use.
  Bytes idle_bytes() const {
    Bytes idle = sat_add(own_activation_segments_ - own_activation_used_, held_rest_);
    for (int i = 0; i < count_; ++i) {
      const Block& block = blocks_[static_cast<std::size_t>(i)];
      if (block.alive && !block.used) idle = sat_add(idle, block.bytes);
    }
    return idle;
  }
  // The free blocks' sizes, sorted: two states with the same are served alike by every later request.
  struct FreeSizes {
    std::array<Bytes, 256> sizes;  // [0, count) in use
    int count = 0;
    bool operator==(const FreeSizes& other) const {
      if (count != other.count) return false;
      for (int i = 0; i < count; ++i)
        if (sizes[static_cast<std::size_t>(i)] != other.sizes[static_cast<std::size_t>(i)]) return false;
      return true;
    }
  };
  FreeSizes free_sizes() const {
    FreeSizes f;
    for (int i = 0; i < count_ && f.count < static_cast<int>(f.sizes.size()); ++i) {
      const Block& block = blocks_[static_cast<std::size_t>(i)];
      if (block.alive && !block.used) f.sizes[static_cast<std::size_t>(f.count++)] = block.bytes;
    }
    std::sort(f.sizes.begin(), f.sizes.begin() + f.count);
    return f;
  }

 private:
  // CUDACachingAllocator.cpp: requests rounded to kMinBlockSize (512 B); a block is split when the remainder
  // exceeds kSmallSize (1 MiB) in the large pool.
  static constexpr Bytes kMinBlockSize = 512;
  static constexpr Bytes kSmallSize = 1024 * 1024;
  static constexpr int kCapacity = 256;
  struct Block {
    int segment;
    Bytes offset;
    Bytes bytes;
    bool used;
    bool alive;               // false once merged into a neighbour
    bool activations = false; // taken by fill_with_activations
  };
  // A slot for a new block: one a merge emptied (no handle names it: only free blocks merge away), else the next.
  int free_slot() {
    for (int i = 0; i < count_; ++i)
      if (!blocks_[static_cast<std::size_t>(i)].alive) return i;
    return count_ < kCapacity ? count_++ : -1;
  }
  // should_split: a block taken for `bytes` is split when more than kSmallSize would be left, the rest a free block
  // of the same segment (kept whole when no slot is left).
  void split(Block& block, Bytes bytes) {
    if (block.bytes - bytes <= kSmallSize) return;
    const int rest = free_slot();
    if (rest < 0) return;
    blocks_[static_cast<std::size_t>(rest)] = {block.segment, block.offset + bytes, block.bytes - bytes, false, true};
    block.bytes = bytes;
  }
  Bytes activation_block_;
  Bytes shortest_early_;
  Bytes held_rest_ = 0;  // hold's rests of the segments it made
  Bytes own_activation_segments_ = 0;  // fill_with_activations' segments of their own, and what it uses of them
  Bytes own_activation_used_ = 0;
  std::array<Block, kCapacity> blocks_;  // [0, count_) in use
  int count_ = 0;
  int segments_ = 0;
};

// The per-parameter segments of stage 0's FP16_UnfusedOptimizer, which hold one tensor per parameter: free blocks
// grouped by size (every transformer block's tensors are alike, so a handful of sizes), taken by best fit as
// CachedSegments takes its blocks (get_free_block: the smallest free block at least the request; should_split: the
// rest stays a free block when more than kSmallSize). Blocks of different segments never merge, and the replay
// frees nothing: a step starts again from a copy of the state deepspeed.initialize left. Fixed storage.
class SizeClasses {
 public:
  // `count` free blocks of `bytes`.
  void add(Bytes bytes, std::int64_t count = 1) {
    if (bytes <= 0 || count <= 0) return;
    for (int i = 0; i < count_; ++i) {
      if (classes_[static_cast<std::size_t>(i)].bytes == bytes) {
        classes_[static_cast<std::size_t>(i)].count += count;
        return;
      }
    }
    if (count_ < kCapacity) classes_[static_cast<std::size_t>(count_++)] = {bytes, count};
    else overflow_ = sat_add(overflow_, sat_mul(bytes, count));  // idle, offered to no request
  }
  // The size of the block best fit takes for `request` (rounded to 512 B), 0 when none is large enough.
  Bytes best_fit(Bytes request) const {
    const Bytes bytes = round(request);
    Bytes best = 0;
    for (int i = 0; i < count_; ++i) {
      const SizeClass& c = classes_[static_cast<std::size_t>(i)];
      if (c.count > 0 && c.bytes >= bytes && (best == 0 || c.bytes < best)) best = c.bytes;
    }
    return best;
  }
  // Serves `request` from the best-fitting free block; false when none is large enough.
  bool take(Bytes request) {
    const Bytes bytes = round(request);
    const Bytes block = best_fit(bytes);
    if (block == 0) return false;
    for (int i = 0; i < count_; ++i) {
      SizeClass& c = classes_[static_cast<std::size_t>(i)];
      if (c.bytes != block) continue;
      --c.count;
      break;
    }
    used_ = sat_add(used_, bytes);
    if (block - bytes > kSmallSize) add(block - bytes);
    else unsplit_ = sat_add(unsplit_, block - bytes);  // the whole block is the request's
    return true;
  }
  // Bytes of these segments that no request uses: the free blocks and the unsplit rest of the blocks taken.
  Bytes idle_bytes() const {
    Bytes idle = sat_add(overflow_, unsplit_);
    for (int i = 0; i < count_; ++i) {
      const SizeClass& c = classes_[static_cast<std::size_t>(i)];
      idle = sat_add(idle, sat_mul(c.bytes, c.count));
    }
    return idle;
  }
  Bytes used_bytes() const { return used_; }

 private:
  static constexpr Bytes kMinBlockSize = 512;
  static constexpr Bytes kSmallSize = 1024 * 1024;
  static constexpr int kCapacity = 64;
  static Bytes round(Bytes request) { return sat_mul(ceil_div(request, kMinBlockSize), kMinBlockSize); }
  struct SizeClass {
    Bytes bytes;
    std::int64_t count;
  };
  std::array<SizeClass, kCapacity> classes_{};
  int count_ = 0;
  Bytes used_ = 0, unsplit_ = 0, overflow_ = 0;
};

// One loop of per-parameter allocations with nothing freed in between (module.to, FP16_UnfusedOptimizer's clones,
// initialize_optimizer_states' zero gradients, Adam's states, the foreach step's temporaries): each tensor of
// `element_bytes` x numel, `copies` in a row (exp_avg and exp_avg_sq of one parameter), in the model's parameter
// order, as c10/cuda/CUDACachingAllocator.cpp serves them: a request of at most kSmallSize (1 MiB) from the small
// pool's 2 MiB segments (left out here: a few MiB, shared with every small tensor); a larger one by best fit from
// the free rest of the loop's earlier segments, else a new segment (get_allocation_size: kLargeBuffer, 20 MiB, below
// kMinLargeAlloc, 10 MiB; else the request rounded to kRoundLarge, 2 MiB), split when more than 1 MiB is left. So a
// transformer's smaller matrices share 20 MiB segments and a larger one takes the rest another left (GPT-2 1.5B's
// 14.6 MiB c_attn gradients beside the 4.9 MiB c_proj ones: 141 segments of 20 MiB and 3 of 16, traced).
// `segments`, when given, gets every segment made (its free blocks once the loop's tensors are freed).
struct PerParameterBurst {
  Bytes segments = 0;  // bytes of the segments the loop made
  Bytes tensors = 0;   // bytes of its tensors in them (the rest is the segments' slack)
};
template <typename EachTensor>
inline PerParameterBurst per_parameter_burst(EachTensor&& each_tensor, int element_bytes, int copies,
                                             SizeClasses* segments) {
  constexpr Bytes kMiB = 1024 * 1024;
  PerParameterBurst burst;
  SizeClasses rest;  // the free rest of this loop's segments
  each_tensor([&](std::int64_t numel) {
    const Bytes bytes = sat_mul(ceil_div(sat_mul(numel, element_bytes), Bytes{512}), Bytes{512});
    if (bytes <= kMiB) return;
    for (int copy = 0; copy < copies; ++copy) {
      burst.tensors = sat_add(burst.tensors, bytes);
      if (rest.take(bytes)) continue;
      const Bytes segment = bytes < 10 * kMiB ? 20 * kMiB : sat_mul(ceil_div(bytes, kRoundLarge), kRoundLarge);
      burst.segments = sat_add(burst.segments, segment);
      if (segments) segments->add(segment);
      if (segment - bytes > kMiB) rest.add(segment - bytes);
    }
  });
  return burst;
}

}  // namespace zeroplan
