#include "exec/zero/zero_buffer_layout.h"

#include "exec/offload/swap_buffer_policy.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace zeroplan::exec {

namespace {

// The flat ranges backward writes at once: the units from the last (a transformer's head unit) to the first.
std::vector<std::pair<std::int64_t, std::int64_t>> backward_ranges(const ParamLayout& layout) {
  std::vector<std::pair<std::int64_t, std::int64_t>> r;
  for (auto u = layout.units().rbegin(); u != layout.units().rend(); ++u) r.emplace_back(u->begin, u->end);
  return r;
}

void gradient_buffers(ZeroBufferLayout& z, const ParamLayout& layout, const ZeroPartition& partition,
                      const ZeroSettings& zero, std::int64_t grad_accum) {
  // The tied embeddings' buckets have their own buffers (written at the start of backward by the logits and at its
  // end by the encoder); the others rotate over enough buffers that a block never waits for a reduction that needs
  // the block itself, plus one with overlap_comm so that the next block's backward does not wait for the last
  // reduction either. Untied embeddings are written once, at the end of backward, and join the rotation where
  // their bucket is no larger than its buffers (Llama-2 7B: 131M elements beside 202M blocks; not TinyLlama's 66M
  // beside 44M, whose rotation would grow). The partitioned and the persistent buckets rotate apart (below), so a
  // unit's count of each sets its own rotation: Llama-2 7B at stage 3 rotated three 202M-element buffers where two
  // serve (each block one partitioned bucket and one persistent one).
  const auto& buckets = partition.buckets();
  std::int64_t largest = 0, largest_persistent = 0;
  for (const GradientBucket& b : buckets)
    if (!b.embeddings && !b.persistent) largest = std::max(largest, b.elements());
  for (const GradientBucket& b : buckets)
    if (!b.embeddings && b.persistent) largest_persistent = std::max(largest_persistent, b.elements());
  const bool tied = layout.embeddings_reread();
  const auto own_buffer = [&](const GradientBucket& b) {
    return b.embeddings && (tied || b.persistent || b.elements() > largest);
  };
  int per_range = 1, persistent_per_range = 1;
  for (const auto& [lo, hi] : backward_ranges(layout)) {
    int k = 0, p = 0;
    for (const GradientBucket& b : buckets)
      if (!own_buffer(b) && b.begin < hi && b.end > lo) (b.persistent ? p : k) += 1;
    per_range = std::max(per_range, k);
    persistent_per_range = std::max(persistent_per_range, p);
  }
  const int rotating = zero.overlap_comm ? per_range + 1 : per_range;
  // Stage 3: a unit's persistent tensors (norms, biases, small convolutions) are a bucket of their own beside its
  // partitioned one (or several, reduce_bucket_size each), and they rotate over small buffers of their own: twice a
  // unit's persistent buckets with overlap_comm, since a unit writes its own while the previous unit's are reduced.
  // In the one rotation, with one buffer more than a unit's buckets, a unit took back the buffer of the previous
  // unit's first bucket while that reduction was still running, and the compute waited at every unit: ResNet-101 at
  // stage 3 on 2x H200, ~1 ms a step over its 35 units at 25-30 us a reduction beside the convolutions
  // (bench/resnet/results/2026-11-29-h200x2/call16).
  const int persistent_rotating = zero.overlap_comm ? 2 * persistent_per_range : persistent_per_range;
  z.bucket_slot.assign(buckets.size(), -1);
  int next = 0, next_persistent = 0;
  std::vector<std::size_t> persistent;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    if (own_buffer(buckets[k])) continue;
    if (buckets[k].persistent) persistent.push_back(k);
    else z.bucket_slot[k] = next++ % rotating;
  }
  z.slot_elements.assign(std::min(rotating, next), largest);
  const int persistent_first = static_cast<int>(z.slot_elements.size());
  for (std::size_t k : persistent) z.bucket_slot[k] = persistent_first + next_persistent++ % persistent_rotating;
  for (int i = 0; i < std::min(persistent_rotating, next_persistent); ++i) z.slot_elements.push_back(largest_persistent);
  for (std::size_t k = 0; k < buckets.size(); ++k)
    if (own_buffer(buckets[k])) {
      z.bucket_slot[k] = static_cast<int>(z.slot_elements.size());
      z.slot_elements.push_back(buckets[k].elements());
    }
  if (grad_accum > 1 || zero.fp32_communication != zero.fp32_grad_accumulation)
    z.accumulation_scratch = partition.largest_chunk();
  if (zero.fp32_communication) z.communication_copy = partition.largest_bucket();
}

// Stages 0-1: the gradients (in the accumulation precision) are the reduction's buffer; a communication copy is
// needed only when they are 16-bit and the reduction fp32 (fp32 accumulation with 16-bit communication converts
// into the micro-step gradients' finished region instead).
void whole_gradient_buffers(ZeroBufferLayout& z, const ParamLayout& layout, const ZeroPartition& partition,
                            const ZeroSettings& zero) {
  if (zero.fp32_grad_accumulation) z.micro_step_gradients = layout.total();
  if (zero.fp32_communication && !zero.fp32_grad_accumulation) z.communication_copy = partition.largest_bucket();
}

void stage3_units(ZeroBufferLayout& z, const ParamLayout& layout, const ZeroPartition& partition,
                  const ZeroSettings& zero) {
  const auto& buckets = partition.buckets();
  z.units = gather_unit_ranges(layout);
  const int U = static_cast<int>(z.units.size());
  z.unit_buckets.assign(U, {});
  z.unit_gather_lo.assign(U, 0);
  z.bucket_unit.assign(buckets.size(), -1);
  z.persistent_offset.assign(buckets.size(), -1);
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const GradientBucket& b = buckets[k];
    int u = 0;
    while (!(b.begin >= z.units[u].first && b.end <= z.units[u].second)) ++u;  // buckets never cross units
    z.bucket_unit[k] = u;
    if (b.persistent) {
      z.persistent_offset[k] = z.persistent_elements;
      z.persistent_elements += b.elements();
    } else {
      z.unit_buckets[u].push_back(static_cast<int>(k));
    }
  }
  // A unit's gathered span runs from its lowest to its highest partitioned bucket (persistent tensors between
  // them, which GPT-2's layout never has and a ResNet block's does, leave their part of the span unused: the arena
  // holds the span, the all-gathers move only the buckets).
  std::vector<std::int64_t> unit_elements(U, 0);
  for (int u = 0; u < U; ++u) {
    if (z.unit_buckets[u].empty()) continue;
    std::int64_t lo = z.units[u].second, hi = z.units[u].first;
    for (int k : z.unit_buckets[u]) {
      lo = std::min(lo, buckets[k].begin);
      hi = std::max(hi, buckets[k].end);
    }
    z.unit_gather_lo[u] = lo;
    unit_elements[u] = hi - lo;
  }
  // The model's uses of its units (the trainers call params_needed in this order). A transformer: forward
  // [embeddings, blocks, head unit, and the embeddings again when they are the tied LM head], backward [the tied
  // LM head's embeddings, head unit, blocks top down]; the embedding's backward reads no parameters. A layer
  // list: forward every layer, backward every layer top down (each layer's input gradient reads its weights).
  const bool reread = layout.embeddings_reread();
  std::vector<int> forward, train;
  for (int u = 0; u < U; ++u) forward.push_back(u);
  if (reread) forward.push_back(0);
  train = forward;
  if (reread) train.push_back(0);
  const int lowest_backward = static_cast<int>(layout.lowest_backward_unit());
  for (int u = U - 1; u >= lowest_backward; --u) train.push_back(u);
  Zero3FetchRules rules;
  rules.prefetch_elements = zero.prefetch_bucket_elements;
  rules.max_live_elements = zero.max_live_parameters;
  rules.max_reuse_distance = zero.max_reuse_distance;
  // A layer list's micro-step is replayed as one CUDA graph (exec/cuda/step_graphs.cuh). ResNet-101's prefetch,
  // issued in one burst (at its fourth unit the 27 units left, the whole model within the 5e7-element bucket), held
  // the compute lane until the burst's last all-gather was done, 0.45-1.2 ms a step on 2x H200; issued a unit or two
  // per use (a 1e6-element bucket) the all-gathers ran beside the kernels and forward took 2.9-3.1 ms against
  // 3.3-3.9 (`zeroplan run --trace`, bench/resnet/results/2026-11-30-h200x2/call21 and call23). Transformers run
  // eagerly and keep DeepSpeed's rule alone.
  if (layout.is_network()) rules.max_units_ahead = kGraphPrefetchUnitsAhead;
  z.train_plan = make_zero3_fetch_plan(unit_elements, train, rules);
  z.forward_plan = make_zero3_fetch_plan(unit_elements, forward, rules);
  z.arena_elements = std::max(z.train_plan.arena_elements, z.forward_plan.arena_elements);
  for (const GradientBucket& b : buckets) z.largest_chunk = std::max(z.largest_chunk, b.chunk);
  if (zero.offload_param) {
    // One buffer per chunk in flight: a unit's chunks are staged and all-gathered in groups of at most this
    // many (zero_engine.cpp gather_buckets), so more buffers than buckets would never be used.
    z.param_staging_buffers = static_cast<int>(std::min<std::int64_t>(zero.param_buffer_count,
                                                                      static_cast<std::int64_t>(buckets.size())));
    z.param_staging_elements = z.largest_chunk;
  }
  if (zero.offload_param && !zero.param_nvme_path.empty()) {
    // Chunks stay in pinned host memory while they fit in max_in_cpu elements (DeepSpeed's default 1e9), a prefix
    // of the bucket order (the top of the layout first: the last blocks', which the backward gathers first, right
    // after the forward gathered them last). DeepSpeed keeps a prefix of its sub-groups within max_params_in_cpu in
    // a pinned flat buffer the same way (stage3.py _create_param_groups_fp16_flat_cpu_memory): with GPT-2 124M,
    // 355M (one H200) and 1.5B (two) its swapper moved 0 bytes per step (bench/deepspeed/ds_peer.py wraps its
    // swap-in and swap-out methods; bench/exec/results/2026-11-29-h200x2-param-nvme/deepspeed/).
    const std::int64_t cap = zero.param_max_in_cpu;
    std::int64_t kept = 0;
    bool full = false;
    z.param_nvme_chunk.assign(buckets.size(), 0);
    z.param_host_offset.assign(buckets.size(), -1);
    std::int64_t on_nvme = 0;
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      const GradientBucket& b = buckets[k];
      if (!b.persistent && !full && kept + b.chunk > cap) full = true;
      if (b.persistent || !full) {
        if (!b.persistent) kept += b.chunk;
        z.param_host_offset[k] = z.param_host_elements;
        z.param_host_elements += b.chunk;
      } else {
        z.param_nvme_chunk[k] = b.chunk;
        z.param_swap_buffer_elements = std::max(z.param_swap_buffer_elements, b.chunk);
        ++on_nvme;
      }
    }
    z.param_swap_buffers = static_cast<int>(std::min<std::int64_t>(zero.param_buffer_count, on_nvme));
  }
}

std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw std::overflow_error("ZeroBufferLayout: NVMe bytes overflow 64 bits");
  return r;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error("ZeroBufferLayout: NVMe bytes overflow 64 bits");
  return r;
}

}  // namespace

PartitionRules partition_rules(const ZeroSettings& zero) {
  PartitionRules r;
  r.bucket_elements = zero.reduce_bucket_elements;
  r.stage3 = zero.stage == 3;
  r.persistence_threshold = zero.param_persistence_threshold;
  return r;
}

std::int64_t ZeroBufferLayout::gradient_buffer_bytes(std::int64_t element_bytes) const {
  std::int64_t slots = 0;
  for (std::int64_t e : slot_elements) slots += e;
  const std::int64_t scratch_bytes = fp32_communication ? 4 : element_bytes;
  return element_bytes * slots + scratch_bytes * accumulation_scratch + 4 * communication_copy;
}

std::int64_t padded_swap_bytes(std::int64_t elements, std::int64_t element_bytes) {
  constexpr std::int64_t kBlock = 4096;  // offload::kDirectIoAlignment (this library does not link the store)
  return checked_add(checked_mul(elements, element_bytes), kBlock - 1) / kBlock * kBlock;
}

std::int64_t ZeroBufferLayout::param_nvme_file_bytes(std::int64_t element_bytes) const {
  std::int64_t total = 0;
  for (std::int64_t n : param_nvme_chunk)
    if (n > 0) total = checked_add(total, padded_swap_bytes(n, element_bytes));
  return total;
}

std::int64_t ZeroBufferLayout::param_swap_buffer_bytes(std::int64_t element_bytes) const {
  if (param_swap_buffers == 0) return 0;
  return checked_add(checked_mul(param_swap_buffers, padded_swap_bytes(param_swap_buffer_elements, element_bytes)),
                     4096);
}

ZeroBufferLayout::ParamNvmeTraffic ZeroBufferLayout::param_nvme_traffic(std::int64_t element_bytes,
                                                                       std::int64_t grad_accum,
                                                                       bool update_reads) const {
  ParamNvmeTraffic t;
  if (grad_accum < 1) throw std::invalid_argument("param_nvme_traffic: gradient accumulation " + std::to_string(grad_accum));
  if (param_swap_buffers == 0) {  // every chunk in host memory: no gather reads anything
    std::size_t gathers = 0;
    for (const Zero3UseStep& step : train_plan.steps) gathers += step.gathers.size();
    t.gather_read_bytes.assign(static_cast<std::size_t>(grad_accum), std::vector<std::int64_t>(gathers, 0));
    return t;
  }
  offload::SwapBufferPolicy policy(param_swap_buffers);
  std::vector<int> dropped;  // nothing is in flight here: the dropped buffers need no finishing
  std::vector<offload::SwapBufferPolicy::Reservation> reserved;
  const auto chunk_bytes = [&](int k) { return padded_swap_bytes(param_nvme_chunk[k], element_bytes); };
  // ParamSwapper::acquire then release, as gather_buckets and update_offloaded_params call them.
  const auto use = [&](int k) {
    if (policy.planned_next(k)) policy.top_up(reserved);
    const offload::SwapBufferPolicy::Use u = policy.acquire(k, dropped);
    policy.release(u.buffer);
    policy.top_up(reserved);
    return u.read ? chunk_bytes(k) : std::int64_t{0};
  };
  std::vector<int> train_order;
  for (const Zero3UseStep& step : train_plan.steps)
    for (const Zero3Gather& g : step.gathers)
      for (int k : unit_buckets[g.unit])
        if (param_nvme_chunk[k] > 0) train_order.push_back(k);
  std::vector<int> bucket_order;
  for (std::size_t k = 0; k < param_nvme_chunk.size(); ++k)
    if (param_nvme_chunk[k] > 0) bucket_order.push_back(static_cast<int>(k));
  // The first step starts from the initial writes; the policy's state repeats from the second on, which the third
  // step is counted from.
  for (int step = 0; step < 3; ++step) {
    t = ParamNvmeTraffic{};
    for (std::int64_t m = 0; m < grad_accum; ++m) {
      policy.plan(train_order, param_swap_buffers, dropped);
      policy.top_up(reserved);
      std::vector<std::int64_t>& gathers = t.gather_read_bytes.emplace_back();
      for (const Zero3UseStep& s : train_plan.steps)
        for (const Zero3Gather& g : s.gathers) {
          std::int64_t bytes = 0;
          for (int k : unit_buckets[g.unit])
            if (param_nvme_chunk[k] > 0) bytes = checked_add(bytes, use(k));
          gathers.push_back(bytes);
          t.read_bytes = checked_add(t.read_bytes, bytes);
        }
    }
    policy.plan(update_reads ? bucket_order : std::vector<int>{}, param_swap_buffers - 1, dropped);
    policy.top_up(reserved);
    for (int k : bucket_order) {
      if (update_reads) t.read_bytes = checked_add(t.read_bytes, use(k));
      policy.end_write(policy.begin_write(k, true, dropped));
      t.write_bytes = checked_add(t.write_bytes, chunk_bytes(k));
    }
    if (update_reads) policy.plan({}, 0, dropped);
  }
  return t;
}

ZeroBufferLayout zero_buffer_layout(const ParamLayout& layout, const ZeroPartition& partition,
                                    const ZeroSettings& zero, std::int64_t grad_accum) {
  ZeroBufferLayout z;
  z.fp32_communication = zero.fp32_communication;
  if (zero.stage >= 2) gradient_buffers(z, layout, partition, zero, grad_accum);
  else whole_gradient_buffers(z, layout, partition, zero);
  if (zero.stage == 3) stage3_units(z, layout, partition, zero);
  return z;
}

}  // namespace zeroplan::exec
