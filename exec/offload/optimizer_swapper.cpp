#include "exec/offload/optimizer_swapper.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace zeroplan::exec::offload {

namespace {

using i64 = std::int64_t;

// Swappers made by this process: each names its files with its own number, so that two (tests keep several
// trainers of one rank alive) never write each other's files in the shared zeroplan_rank<r> directory.
std::atomic<std::uint64_t> swappers_made{0};

// Three states per piece.
constexpr i64 kStates = 3;

i64 checked_mul(i64 a, i64 b, const char* what) {
  i64 r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error(std::string("OptimizerSwapper: ") + what + " overflows 64 bits");
  return r;
}

i64 checked_add(i64 a, i64 b, const char* what) {
  i64 r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw std::overflow_error(std::string("OptimizerSwapper: ") + what + " overflows 64 bits");
  return r;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

i64 OptimizerSwapper::stride_bytes(i64 elements) {
  const i64 bytes = checked_mul(elements, static_cast<i64>(sizeof(float)), "a piece's bytes");
  return checked_add(bytes, kDirectIoAlignment - 1, "a piece's bytes") / kDirectIoAlignment * kDirectIoAlignment;
}

OptimizerSwapper::OptimizerSwapper(const std::string& nvme_path, int rank, const NvmeStoreOptions& options,
                                   std::vector<i64> piece_elements, int buffer_count, const HostAllocator& allocate)
    : store_(nvme_path, rank, options), pieces_(std::move(piece_elements)) {
  if (buffer_count < 1)
    throw std::invalid_argument("zero_optimization.offload_optimizer.buffer_count: " + std::to_string(buffer_count) +
                                "; expected at least 1");
  if (pieces_.empty()) throw std::invalid_argument("OptimizerSwapper: no pieces to swap");
  i64 largest = 0;
  for (i64 n : pieces_) {
    if (n < 1) throw std::invalid_argument("OptimizerSwapper: a piece of " + std::to_string(n) + " elements");
    largest = std::max(largest, n);
    nvme_bytes_ = checked_add(nvme_bytes_, checked_mul(kStates, stride_bytes(n), "a piece's file"), "the swap files");
  }
  // More buffers than pieces would never be used.
  const int count = static_cast<int>(std::min<i64>(buffer_count, static_cast<i64>(pieces_.size())));
  const i64 slot_bytes = checked_mul(kStates, stride_bytes(largest), "a swap buffer");
  // One allocation for every buffer, with room to align its start (pinned memory is page-aligned already; the
  // CPU backend's host memory is 64-byte aligned).
  buffer_bytes_ = checked_add(checked_mul(slot_bytes, count, "the swap buffers"), kDirectIoAlignment, "the swap buffers");
  char* raw = static_cast<char*>(allocate(buffer_bytes_));
  const auto address = reinterpret_cast<std::uintptr_t>(raw);
  char* base = raw + (kDirectIoAlignment - static_cast<i64>(address % kDirectIoAlignment)) % kDirectIoAlignment;
  for (int s = 0; s < count; ++s) slots_.push_back(Slot{base + s * slot_bytes, 0, 0});
  prefix_ = "optimizer_" + std::to_string(::getpid()) + "_" + std::to_string(swappers_made.fetch_add(1)) + "_piece";
}

std::string OptimizerSwapper::file_name(int piece) const { return prefix_ + std::to_string(piece) + ".swp"; }

void OptimizerSwapper::finish(NvmeStore::Ticket& ticket, SwapTimes& times) {
  if (ticket == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const NvmeStore::Ticket t = ticket;
  ticket = 0;
  store_.wait(t);
  times.wait_s += seconds_since(t0);
}

SwapTimes OptimizerSwapper::for_each_piece(SwapAccess access,
                                           const std::function<void(int piece, const SwappedStates&)>& visit) {
  SwapTimes times;
  const int pieces = static_cast<int>(pieces_.size());
  const int buffers = static_cast<int>(slots_.size());
  const bool reads = access != SwapAccess::write, writes = access != SwapAccess::read;
  // Pieces read ahead of the one visited: every buffer but the visited one and the one being written back
  // (DeepSpeed's pipeline_read / pipeline_write overlap one of each; more buffers read further ahead).
  const int ahead = reads ? std::max(0, buffers - (writes ? 2 : 1)) : 0;
  int next_read = 0;
  try {
    for (int k = 0; k < pieces; ++k) {
      // A buffer is read into once the write back of the piece it held last is done (each buffer holds piece
      // k % buffers: the read of piece j waits for the write of piece j - buffers).
      for (; reads && next_read < pieces && next_read <= k + ahead; ++next_read) {
        Slot& s = slots_[next_read % buffers];
        finish(s.write, times);
        const i64 bytes = kStates * stride_bytes(pieces_[next_read]);
        s.read = store_.read(file_name(next_read), s.base, bytes);
        times.read_bytes += bytes;
      }
      Slot& slot = slots_[k % buffers];
      finish(reads ? slot.read : slot.write, times);
      const i64 n = pieces_[k], stride = stride_bytes(n);
      SwappedStates states;
      states.master = reinterpret_cast<float*>(slot.base);
      states.exp_avg = reinterpret_cast<float*>(slot.base + stride);
      states.exp_avg_sq = reinterpret_cast<float*>(slot.base + 2 * stride);
      states.count = n;
      visit(k, states);
      if (writes) {
        slot.write = store_.write(file_name(k), slot.base, kStates * stride);
        times.write_bytes += kStates * stride;
      }
    }
    for (Slot& s : slots_) finish(s.write, times);
  } catch (...) {
    // The buffers must outlive every request that uses them: finish them all (their own failures are secondary
    // to the one being reported).
    for (Slot& s : slots_) s.read = s.write = 0;
    try {
      store_.wait_all();
    } catch (const std::exception&) {
    }
    throw;
  }
  return times;
}

}  // namespace zeroplan::exec::offload
