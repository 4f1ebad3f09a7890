#include "exec/offload/param_swapper.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <utility>

namespace zeroplan::exec::offload {

namespace {

using i64 = std::int64_t;

// Swappers made by this process name their files with their own number (tests keep several trainers of one rank
// alive, all in the one zeroplan_rank<r> directory).
std::atomic<std::uint64_t> param_swappers_made{0};

i64 checked_mul(i64 a, i64 b, const char* what) {
  i64 r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error(std::string("ParamSwapper: ") + what + " overflows 64 bits");
  return r;
}

i64 checked_add(i64 a, i64 b, const char* what) {
  i64 r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw std::overflow_error(std::string("ParamSwapper: ") + what + " overflows 64 bits");
  return r;
}

// More buffers than chunks on NVMe would never be used (at least one: the constructor refuses no chunk after).
int buffers_used(const std::vector<i64>& chunks, int buffer_count) {
  i64 swapped = 0;
  for (i64 n : chunks) swapped += n > 0;
  return static_cast<int>(std::max<i64>(1, std::min<i64>(buffer_count, swapped)));
}

// Bytes of `elements` rounded up to the direct-I/O block: a chunk's room in its file and in a buffer (the store
// moves whole blocks; exec/zero/zero_buffer_layout.cpp padded_swap_bytes, which the planner reads, is the same).
i64 padded_bytes(i64 elements, i64 element_bytes) {
  return checked_add(checked_mul(elements, element_bytes, "a chunk's bytes"), kDirectIoAlignment - 1, "a chunk's bytes") /
         kDirectIoAlignment * kDirectIoAlignment;
}

}  // namespace

ParamSwapper::ParamSwapper(const std::string& nvme_path, int rank, const NvmeStoreOptions& options,
                           std::vector<i64> chunk_elements, i64 element_bytes, int buffer_count,
                           const HostAllocator& allocate, BufferIdle idle, BufferReady ready)
    : store_(nvme_path, rank, options), chunks_(std::move(chunk_elements)), element_bytes_(element_bytes),
      policy_(buffers_used(chunks_, std::max(1, buffer_count))), idle_(std::move(idle)), ready_(std::move(ready)) {
  if (buffer_count < 1)
    throw std::invalid_argument("zero_optimization.offload_param.buffer_count: " + std::to_string(buffer_count) +
                                "; expected at least 1");
  if (element_bytes != 2 && element_bytes != 4)
    throw std::invalid_argument("ParamSwapper: element bytes " + std::to_string(element_bytes) + "; expected 2 or 4");
  i64 largest = 0, swapped = 0;
  for (i64 n : chunks_) {
    if (n < 0) throw std::invalid_argument("ParamSwapper: a chunk of " + std::to_string(n) + " elements");
    if (n == 0) continue;
    ++swapped;
    largest = std::max(largest, n);
    nvme_bytes_ = checked_add(nvme_bytes_, padded_bytes(n, element_bytes), "the swap files");
  }
  if (swapped == 0) throw std::invalid_argument("ParamSwapper: no chunk to swap");
  const int count = policy_.buffers();
  const i64 slot = padded_bytes(largest, element_bytes);
  // One allocation, with room to align its start (pinned memory is page-aligned; the CPU backend's is 64-byte).
  buffer_bytes_ = checked_add(checked_mul(slot, count, "the swap buffers"), kDirectIoAlignment, "the swap buffers");
  char* raw = static_cast<char*>(allocate(buffer_bytes_));
  const auto address = reinterpret_cast<std::uintptr_t>(raw);
  char* base = raw + (kDirectIoAlignment - static_cast<i64>(address % kDirectIoAlignment)) % kDirectIoAlignment;
  buffers_.resize(static_cast<std::size_t>(count));
  for (int b = 0; b < count; ++b) buffers_[b].base = base + b * slot;
  prefix_ = "param_" + std::to_string(::getpid()) + "_" + std::to_string(param_swappers_made.fetch_add(1)) + "_chunk";
}

std::string ParamSwapper::file_name(int chunk) const { return prefix_ + std::to_string(chunk) + ".swp"; }

i64 ParamSwapper::padded(int chunk) const { return padded_bytes(chunks_[chunk], element_bytes_); }

void ParamSwapper::finish(NvmeStore::Ticket& ticket) {
  if (ticket == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const NvmeStore::Ticket t = ticket;
  ticket = 0;
  store_.wait(t);
  times_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ParamSwapper::check_on_nvme(int chunk) const {
  if (chunk < 0 || chunk >= static_cast<int>(chunks_.size()) || chunks_[chunk] == 0)
    throw std::logic_error("ParamSwapper: chunk " + std::to_string(chunk) + " is not on NVMe");
}

void ParamSwapper::prepare(int b, int chunk) {
  Buffer& buf = buffers_[b];
  idle_(b);
  finish(buf.write);  // its previous values are on disk before new ones land
  // The store refuses a read of a file with a write in flight: finish the chunk's writes (from other buffers).
  for (Buffer& other : buffers_)
    if (other.write != 0 && other.io_chunk == chunk) finish(other.write);
  buf.io_chunk = chunk;
}

void ParamSwapper::start_read(int b, int chunk) {
  prepare(b, chunk);
  buffers_[b].read = store_.read(file_name(chunk), buffers_[b].base, chunks_[chunk] * element_bytes_);
  times_.read_bytes = checked_add(times_.read_bytes, padded(chunk), "the bytes read");
}

void ParamSwapper::finish_dropped() {
  for (int b : dropped_) {
    finish(buffers_[b].read);
    std::erase_if(pending_, [b](const PendingRead& r) { return r.buffer == b; });
  }
  dropped_.clear();
}

void ParamSwapper::start_ready_reads() {
  // In plan order; the first whose buffer's readers are not done stops the rest (the host never waits here).
  std::size_t started = 0;
  while (started < pending_.size() && (!ready_ || ready_(pending_[started].buffer))) {
    start_read(pending_[started].buffer, pending_[started].chunk);
    ++started;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(started));
}

void ParamSwapper::top_up() {
  reserved_.clear();
  policy_.top_up(reserved_);
  for (const SwapBufferPolicy::Reservation& r : reserved_)
    if (r.read) pending_.push_back(PendingRead{r.position, r.buffer, policy_.chunk_in(r.buffer)});
  start_ready_reads();
}

void ParamSwapper::plan_reads(const std::vector<int>& order, int ahead) {
  for (int k : order) check_on_nvme(k);
  policy_.plan(order, ahead, dropped_);
  finish_dropped();
  top_up();
}

ParamSwapper::Held ParamSwapper::acquire(int chunk) {
  check_on_nvme(chunk);
  const bool planned = policy_.planned_next(chunk);
  if (planned) top_up();
  const SwapBufferPolicy::Use use = policy_.acquire(chunk, dropped_);
  finish_dropped();
  if (use.read) {
    // Reserved by this call, or ahead but not started yet (its buffer's readers were not done): the read starts
    // now, after them. A read started ahead is in flight or done.
    const auto it = std::find_if(pending_.begin(), pending_.end(),
                                 [&](const PendingRead& r) { return use.planned && r.position == use.position; });
    if (use.reserved_now || it != pending_.end()) {
      if (it != pending_.end()) pending_.erase(it);
      start_read(use.buffer, chunk);
    }
  }
  finish(buffers_[use.buffer].read);
  return Held{buffers_[use.buffer].base, use.buffer};
}

void ParamSwapper::release(int buffer) {
  policy_.release(buffer);
  // The next planned reads go on into buffers whose readers are done (the device copy just enqueued from this one
  // is not, most likely: its read starts at a later acquire or release, never with the host waiting here).
  top_up();
}

ParamSwapper::Writing ParamSwapper::begin_write(int chunk, i64 offset, i64 elements) {
  check_on_nvme(chunk);
  if (offset < 0 || elements < 0 || offset > chunks_[chunk] || elements > chunks_[chunk] - offset)
    throw std::out_of_range("ParamSwapper: elements [" + std::to_string(offset) + ", +" + std::to_string(elements) +
                            ") of a chunk of " + std::to_string(chunks_[chunk]));
  const int b = policy_.begin_write(chunk, offset == 0 && elements == chunks_[chunk], dropped_);
  finish_dropped();
  prepare(b, chunk);
  return Writing{buffers_[b].base, b, chunk, offset, elements};
}

void ParamSwapper::end_write(const Writing& w) {
  Buffer& buf = buffers_.at(static_cast<std::size_t>(w.buffer));
  policy_.end_write(w.buffer);
  // The store pads the last partial block itself; the disk moves whole blocks, which is what is counted.
  buf.write = store_.write(file_name(w.chunk), checked_mul(w.offset, element_bytes_, "a write's offset"), buf.base,
                           checked_mul(w.elements, element_bytes_, "a write's bytes"));
  times_.write_bytes = checked_add(times_.write_bytes, padded_bytes(w.elements, element_bytes_), "the bytes written");
}

void ParamSwapper::wait_writes() {
  // Every write is finished before the first failure is reported: the buffers must outlive their requests.
  std::exception_ptr first;
  for (Buffer& buf : buffers_) {
    try {
      finish(buf.write);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

SwapTimes ParamSwapper::take_times() {
  const SwapTimes t = times_;
  times_ = SwapTimes{};
  return t;
}

}  // namespace zeroplan::exec::offload
