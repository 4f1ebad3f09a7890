#include "exec/zero/zero_partition.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace zeroplan::exec {

std::int64_t zero_alignment(int world) { return world <= 1 ? 1 : 64 * static_cast<std::int64_t>(world); }

ZeroPartition::ZeroPartition(const ParamLayout& layout, int world, int rank, std::int64_t bucket_elements)
    : world_(world), rank_(rank) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("ZeroPartition: rank " + std::to_string(rank) + " of world " + std::to_string(world));
  if (bucket_elements < 1) throw std::invalid_argument("ZeroPartition: bucket size must be >= 1 element");
  const std::int64_t align = zero_alignment(world);
  if (layout.align() % align != 0)
    throw std::invalid_argument("ZeroPartition: layout aligned to " + std::to_string(layout.align()) +
                                " elements, the world needs a multiple of " + std::to_string(align));
  const auto& tensors = layout.tensors();
  // Tensor i occupies [start(i), start(i+1)) with its alignment gap; the last one runs to total().
  auto start = [&](std::size_t i) { return i < tensors.size() ? tensors[i].offset : layout.total(); };
  const std::size_t first_block_tensor = 2;  // wte, wpe come first (param_layout.cpp)

  std::size_t hi = tensors.size();  // tensors [lo, hi) form the current bucket
  while (hi > first_block_tensor) {
    std::size_t lo = hi - 1;
    while (lo > first_block_tensor && start(hi) - start(lo - 1) <= bucket_elements) --lo;
    GradientBucket b;
    b.begin = start(lo);
    b.end = start(hi);
    buckets_.push_back(b);
    hi = lo;
  }
  GradientBucket emb;  // wte and wpe: written first and last in backward, a bucket of their own
  emb.begin = 0;
  emb.end = start(first_block_tensor);
  emb.embeddings = true;
  buckets_.push_back(emb);

  for (GradientBucket& b : buckets_) {
    if (b.elements() % world != 0) throw std::logic_error("ZeroPartition: bucket not divisible by the world");
    b.chunk = b.elements() / world;
    b.partition_offset = partition_elements_;
    partition_elements_ += b.chunk;
    largest_bucket_ = std::max(largest_bucket_, b.elements());
    largest_chunk_ = std::max(largest_chunk_, b.chunk);
  }
}

int ZeroPartition::bucket_of(std::int64_t i) const {
  for (std::size_t k = 0; k < buckets_.size(); ++k)
    if (i >= buckets_[k].begin && i < buckets_[k].end) return static_cast<int>(k);
  throw std::out_of_range("ZeroPartition: flat index " + std::to_string(i) + " outside the layout");
}

}  // namespace zeroplan::exec
