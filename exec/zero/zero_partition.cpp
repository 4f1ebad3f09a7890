#include "exec/zero/zero_partition.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace zeroplan::exec {

std::int64_t zero_alignment(int world) { return world <= 1 ? 1 : 64 * static_cast<std::int64_t>(world); }

std::vector<std::pair<std::int64_t, std::int64_t>> gather_unit_ranges(const ParamLayout& layout) {
  std::vector<std::pair<std::int64_t, std::int64_t>> units;
  for (const ParamUnit& u : layout.units()) units.emplace_back(u.begin, u.end);
  return units;
}

std::vector<std::int64_t> doubling_bucket_cuts(std::int64_t layers, std::int64_t block_elements,
                                               std::int64_t bucket_elements) {
  std::vector<std::int64_t> cuts;
  if (layers < 1) return cuts;
  cuts.push_back(1);  // block 0 alone (with one block: apart from the final norm above it)
  // The segment [b, 2b) holds b blocks; it becomes a bucket of its own while that is below the bucket size.
  for (std::int64_t b = 1; 2 * b < layers && b * block_elements < bucket_elements; b *= 2) cuts.push_back(2 * b);
  // The same from the top: [L - 2b, L - b).
  const std::size_t bottom = cuts.size();
  for (std::size_t i = 0; i < bottom; ++i)
    if (layers - cuts[i] > 0) cuts.push_back(layers - cuts[i]);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

ZeroPartition::ZeroPartition(const ParamLayout& layout, int world, int rank, const PartitionRules& rules)
    : world_(world), rank_(rank) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("ZeroPartition: rank " + std::to_string(rank) + " of world " + std::to_string(world));
  if (rules.bucket_elements < 1) throw std::invalid_argument("ZeroPartition: bucket size must be >= 1 element");
  const std::int64_t align = zero_alignment(world);
  if (layout.align() % align != 0)
    throw std::invalid_argument("ZeroPartition: layout aligned to " + std::to_string(layout.align()) +
                                " elements, the world needs a multiple of " + std::to_string(align));
  const auto& tensors = layout.tensors();
  const std::size_t count = tensors.size();
  // Tensor i occupies [start(i), start(i+1)) with its alignment gap; the last one runs to total().
  auto start = [&](std::size_t i) { return i < count ? tensors[i].offset : layout.total(); };
  const std::vector<ParamUnit>& units = layout.units();
  auto persistent = [&](std::size_t i) {
    return rules.stage3 && rules.persistence_threshold > 0 && tensors[i].numel() <= rules.persistence_threshold;
  };
  // Tensors of units with gradient buffers of their own (the embeddings of a transformer).
  std::vector<bool> own_buffer(count, false);
  for (std::size_t u = 0; u < units.size(); ++u)
    if (layout.own_gradient_buffer(u))
      for (std::size_t i = units[u].first_tensor; i < units[u].first_tensor + units[u].tensor_count; ++i) own_buffer[i] = true;

  // Segments of tensors [lo, hi) no bucket crosses: a unit with its own gradient buffer always; at stage 3 every
  // gather unit and every change between persistent and partitioned tensors.
  std::vector<std::size_t> cuts = {0, count};
  for (std::size_t u = 0; u < units.size(); ++u)
    if (layout.own_gradient_buffer(u)) {
      cuts.push_back(units[u].first_tensor);
      cuts.push_back(units[u].first_tensor + units[u].tensor_count);
    }
  // Repeated units (transformer blocks) at both ends: segments doubling from the first and from the last
  // (doubling_bucket_cuts).
  const std::size_t R = layout.repeated_count(), first_repeated = layout.repeated_first();
  if (R >= 1) {
    const ParamUnit& block0 = units[first_repeated];
    for (std::int64_t b : doubling_bucket_cuts(static_cast<std::int64_t>(R), block0.end - block0.begin,
                                               rules.bucket_elements))
      cuts.push_back(b < static_cast<std::int64_t>(R) ? units[first_repeated + static_cast<std::size_t>(b)].first_tensor
                                                     : units[first_repeated + R - 1].first_tensor +
                                                           units[first_repeated + R - 1].tensor_count);
  }
  if (rules.stage3) {
    for (const ParamUnit& u : units) cuts.push_back(u.first_tensor);
    for (std::size_t i = 1; i < count; ++i)
      if (persistent(i) != persistent(i - 1)) cuts.push_back(i);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  // Buckets from the top down (backward's order), greedily within each segment.
  for (std::size_t s = cuts.size() - 1; s > 0; --s) {
    const std::size_t seg_lo = cuts[s - 1];
    std::size_t hi = cuts[s];
    while (hi > seg_lo) {
      std::size_t lo = hi - 1;
      while (lo > seg_lo && start(hi) - start(lo - 1) <= rules.bucket_elements) --lo;
      GradientBucket b;
      b.begin = start(lo);
      b.end = start(hi);
      b.embeddings = own_buffer[lo];
      b.persistent = persistent(lo);
      buckets_.push_back(b);
      hi = lo;
    }
  }

  for (GradientBucket& b : buckets_) {
    if (b.elements() % world != 0) throw std::logic_error("ZeroPartition: bucket not divisible by the world");
    b.chunk = b.elements() / world;
    b.partition_offset = partition_elements_;
    partition_elements_ += b.chunk;
    largest_bucket_ = std::max(largest_bucket_, b.elements());
    largest_chunk_ = std::max(largest_chunk_, b.chunk);
    if (b.persistent) persistent_elements_ += b.elements();
  }
  by_begin_.resize(buckets_.size());
  for (std::size_t k = 0; k < buckets_.size(); ++k) by_begin_[k] = static_cast<int>(buckets_.size() - 1 - k);
}

int ZeroPartition::bucket_of(std::int64_t i) const {
  // by_begin_ lists the buckets in increasing begin (they were cut from the top down).
  auto it = std::upper_bound(by_begin_.begin(), by_begin_.end(), i,
                             [&](std::int64_t x, int k) { return x < buckets_[k].begin; });
  if (it != by_begin_.begin()) {
    const int k = *(it - 1);
    if (i < buckets_[k].end) return k;
  }
  throw std::out_of_range("ZeroPartition: flat index " + std::to_string(i) + " outside the layout");
}

}  // namespace zeroplan::exec
