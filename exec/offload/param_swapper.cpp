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
      idle_(std::move(idle)), ready_(std::move(ready)) {
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
  // More buffers than chunks would never be used.
  const int count = static_cast<int>(std::min<i64>(buffer_count, swapped));
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

int ParamSwapper::take_free_buffer(bool only_ready) {
  int best = -1;
  for (int b = 0; b < buffer_count(); ++b)
    if (!buffers_[b].busy && (best < 0 || buffers_[b].released_at < buffers_[best].released_at)) best = b;
  if (best >= 0 && only_ready && ready_ && !ready_(best)) return -1;  // the oldest is not done: neither are the rest
  return best;
}

void ParamSwapper::prepare(int b, int chunk) {
  Buffer& buf = buffers_[b];
  idle_(b);
  finish(buf.write);  // its previous values are on disk before new ones land
  // The store refuses a read of a file with a write in flight: finish the chunk's writes (from other buffers).
  for (Buffer& other : buffers_)
    if (other.write != 0 && other.chunk == chunk) finish(other.write);
  buf.chunk = chunk;
  buf.busy = true;
}

void ParamSwapper::start_read(int b, int chunk) {
  if (chunk < 0 || chunk >= static_cast<int>(chunks_.size()) || chunks_[chunk] == 0)
    throw std::logic_error("ParamSwapper: chunk " + std::to_string(chunk) + " is not on NVMe");
  prepare(b, chunk);
  const i64 bytes = padded(chunk);
  buffers_[b].read = store_.read(file_name(chunk), buffers_[b].base, chunks_[chunk] * element_bytes_);
  times_.read_bytes = checked_add(times_.read_bytes, bytes, "the bytes read");
}

void ParamSwapper::top_up() {
  while (next_read_ < order_.size() && next_read_ < next_use_ + static_cast<std::size_t>(ahead_)) {
    const int b = take_free_buffer(true);
    if (b < 0) return;
    start_read(b, order_[next_read_]);
    order_buffer_[next_read_++] = b;
  }
}

void ParamSwapper::drop_planned() {
  for (std::size_t p = next_use_; p < next_read_; ++p) {
    Buffer& buf = buffers_[order_buffer_[p]];
    finish(buf.read);
    buf.busy = false;
    buf.released_at = ++releases_;
  }
  order_.clear();
  order_buffer_.clear();
  next_use_ = next_read_ = 0;
}

void ParamSwapper::plan_reads(const std::vector<int>& order, int ahead) {
  drop_planned();
  order_ = order;
  order_buffer_.assign(order_.size(), -1);
  ahead_ = std::max(0, std::min(ahead, buffer_count()));
  top_up();
}

ParamSwapper::Held ParamSwapper::acquire(int chunk) {
  int b = -1;
  if (next_use_ < order_.size() && order_[next_use_] == chunk) {
    top_up();
    if (next_read_ == next_use_) {  // not read ahead (no buffer was free, or ahead 0): read it now
      b = take_free_buffer();
      if (b < 0) throw std::logic_error("ParamSwapper: every buffer is acquired; release one first");
      start_read(b, chunk);
      order_buffer_[next_read_++] = b;
    }
    b = order_buffer_[next_use_++];
  } else {
    drop_planned();  // the plan no longer says what comes next
    b = take_free_buffer();
    if (b < 0) throw std::logic_error("ParamSwapper: every buffer is acquired; release one first");
    start_read(b, chunk);
  }
  finish(buffers_[b].read);
  return Held{buffers_[b].base, b};
}

void ParamSwapper::release(int buffer) {
  Buffer& buf = buffers_.at(static_cast<std::size_t>(buffer));
  buf.busy = false;
  buf.released_at = ++releases_;
  // The next planned reads go on into buffers whose readers are done (the device copy just enqueued from this one
  // is not, most likely: it is refilled at a later acquire or release, never with the host waiting here).
  top_up();
}

ParamSwapper::Writing ParamSwapper::begin_write(int chunk, i64 offset, i64 elements) {
  if (chunk < 0 || chunk >= static_cast<int>(chunks_.size()) || chunks_[chunk] == 0)
    throw std::logic_error("ParamSwapper: chunk " + std::to_string(chunk) + " is not on NVMe");
  if (offset < 0 || elements < 0 || offset > chunks_[chunk] || elements > chunks_[chunk] - offset)
    throw std::out_of_range("ParamSwapper: elements [" + std::to_string(offset) + ", +" + std::to_string(elements) +
                            ") of a chunk of " + std::to_string(chunks_[chunk]));
  // A read of this chunk planned and in flight would race the write (the store refuses it): drop the plan then.
  for (std::size_t p = next_use_; p < next_read_; ++p)
    if (order_[p] == chunk) {
      drop_planned();
      break;
    }
  const int b = take_free_buffer();
  if (b < 0) throw std::logic_error("ParamSwapper: every buffer is acquired; release one first");
  prepare(b, chunk);
  return Writing{buffers_[b].base, b, chunk, offset, elements};
}

void ParamSwapper::end_write(const Writing& w) {
  Buffer& buf = buffers_.at(static_cast<std::size_t>(w.buffer));
  buf.busy = false;
  buf.released_at = ++releases_;
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
