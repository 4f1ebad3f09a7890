// ZeRO-Infinity's swap space: a rank's optimizer states or parameters in files under DeepSpeed's `nvme_path`,
// moved by asynchronous, pipelined direct I/O. Requests return a ticket at once; a thread of the store keeps up
// to queue_depth blocks of block_bytes in flight through io_uring (liburing) on files opened with O_DIRECT, so
// the engine can write one piece of a partition while it reads the next and computes on a third.
//
// Direct I/O moves whole 4096-byte blocks between 4096-aligned memory and 4096-aligned file offsets, and skips
// the page cache (the figures are the disk's, and swapped data does not also take host memory). A request whose
// size is not a multiple of 4096 has its last partial block padded through a 4096-byte buffer of its own; the
// store records each file's true size, and a read past it is refused. DeepSpeed swaps through its aio handle
// (csrc/aio/, libaio); the defaults of its "aio" section (deepspeed/runtime/swap_tensor/constants.py:
// block_size 1048576, queue_depth 8) are ours too.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace zeroplan::exec::offload {

// Alignment of memory addresses, file offsets and lengths for O_DIRECT: the largest logical block size of the
// disks we run on (512 or 4096 bytes).
constexpr std::int64_t kDirectIoAlignment = 4096;

// A failed system or io_uring call, or a failed transfer; the message names the call or the file, the offset,
// the kernel's error text and the source file:line that checked it.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Host memory aligned for direct I/O (posix_memalign to kDirectIoAlignment), `bytes` rounded up to a multiple
// of kDirectIoAlignment. Pinned memory from cudaHostAlloc is page-aligned too and can be used directly.
class DirectIoBuffer {
 public:
  explicit DirectIoBuffer(std::int64_t bytes);
  void* data() const { return data_.get(); }
  std::int64_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  std::int64_t bytes_;
};

struct NvmeStoreOptions {
  int queue_depth = 8;                               // blocks in flight (DeepSpeed aio.queue_depth)
  std::int64_t block_bytes = std::int64_t{1} << 20;  // bytes per I/O (DeepSpeed aio.block_size), 4096 multiple
  // DeepSpeed aio.overlap_events (default true): a block is submitted as soon as one in flight completes. False:
  // the blocks go in batches of queue_depth, each batch submitted once the previous one has completed (DeepSpeed's
  // csrc/aio/common/deepspeed_aio_common.cpp: _do_io_submit_block waits for a whole batch without it).
  bool overlap_events = true;
  // Where nvme_path came from, for error messages: the configuration file and its field.
  std::string config_source = "DeepSpeed config";
  std::string config_field = "zero_optimization.offload_optimizer.nvme_path";
};

class NvmeStore {
 public:
  using Ticket = std::uint64_t;

  // Files go in <nvme_path>/zeroplan_rank<rank>/ (created if needed). An InputError naming options.config_field,
  // the path and what is wrong when nvme_path does not exist, is not a directory, cannot be written, or sits on a
  // file system without direct I/O; std::invalid_argument for rank < 0, queue_depth outside [1, 4096] or a
  // block_bytes that is not a multiple of 4096 in [4096, 1 GiB]; IoError when io_uring cannot be set up.
  NvmeStore(const std::string& nvme_path, int rank, const NvmeStoreOptions& options = {});
  // Finishes every request still in flight, then removes the files it wrote and its directory (when empty).
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Starts writing `bytes` from `data` to file `name` at `file_offset`, or reading them back into `data`.
  // `data` and `file_offset` must be multiples of kDirectIoAlignment (std::invalid_argument otherwise); `bytes`
  // may be any count >= 0. The memory must stay valid (and, for a write, unchanged) until wait() returns.
  // `name`: 1 to 200 of [A-Za-z0-9._-], not "." or "..". A read of a name not written, or past the bytes
  // written, is refused with std::out_of_range naming the file, its size and the range asked; a read of a file
  // with a write in flight, or a write to a file with a read in flight, with std::logic_error. A file removed
  // (unlinked) or replaced under the store since it was opened is an IoError naming it: reading its old inode
  // through the open descriptor would go on working, but whatever removed it meant the data to be gone.
  Ticket write(const std::string& name, std::int64_t file_offset, const void* data, std::int64_t bytes);
  Ticket read(const std::string& name, std::int64_t file_offset, void* data, std::int64_t bytes);
  Ticket write(const std::string& name, const void* data, std::int64_t bytes) { return write(name, 0, data, bytes); }
  Ticket read(const std::string& name, void* data, std::int64_t bytes) { return read(name, 0, data, bytes); }

  // Whether the request has finished (successfully or not), without blocking.
  bool ready(Ticket ticket);
  // Blocks until the request has finished; IoError when it failed. A ticket is waited for once
  // (std::invalid_argument for an unknown or already waited ticket).
  void wait(Ticket ticket);
  // wait() for every request not yet waited for; the first failure is thrown after all have finished.
  void wait_all();

  // True size of a file written through the store (the bytes up to the end of its furthest write), or -1.
  std::int64_t stored_bytes(const std::string& name);
  const std::string& directory() const;
  int queue_depth() const;
  std::int64_t block_bytes() const;
  bool overlap_events() const;

 private:
  struct State;  // the ring, the I/O thread and the bookkeeping (nvme_io.cpp)
  std::unique_ptr<State> state_;
};

}  // namespace zeroplan::exec::offload
