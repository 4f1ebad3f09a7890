// ZeRO-Infinity's optimizer offload to NVMe (offload_optimizer {"device": "nvme"}): a rank's fp32 master
// partition and AdamW moments live in files under nvme_path (exec/offload/nvme_io.h), and only a few swap buffers
// are in host memory. The engine (exec/zero/zero_engine.cpp) visits the partition piece by piece, as it does with
// the states in host memory (offload_optimizer cpu); the swapper brings each piece's three states into a buffer
// before its visit and writes them back after it, reading the next pieces and writing the previous one while the
// engine works on the current one.
//
// DeepSpeed's swapper (deepspeed/runtime/swap_tensor/pipelined_optimizer_swapper.py, PipelinedOptimizerSwapper
// swap_in_optimizer_state / swap_out_optimizer_state, with pipeline_read and pipeline_write) swaps a sub-group in,
// steps it and swaps it out, reading the next sub-group and finishing the previous write asynchronously; its
// buffers (swap_tensor/optimizer_utils.py, SwapBufferManager: buffer_count buffers of the largest sub-group) hold
// one tensor each, so a sub-group takes three (fp32 parameter, exp_avg, exp_avg_sq) plus its gradient's. Here a
// buffer holds one piece's three states side by side (its gradient stays in the host gradient partition), so
// buffer_count buffers keep buffer_count pieces in flight: with DeepSpeed's default 4, piece k-1 is written back
// while piece k is updated and pieces k+1 and k+2 are read. The bytes: buffer_count x 3 x the largest piece x 4 B.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/offload/nvme_io.h"

namespace zeroplan::exec::offload {

// One piece's states in a swap buffer: `count` fp32 values each.
struct SwappedStates {
  float* master = nullptr;      // fp32 master parameters (the parameters themselves in fp32 training)
  float* exp_avg = nullptr;     // AdamW first moment
  float* exp_avg_sq = nullptr;  // AdamW second moment
  std::int64_t count = 0;
};

// What a pass over the pieces does with the files: read (swapped in, not written back: checkpoint saves), write
// (the visit sets every value; swapped out: initialization, checkpoint restores), update (both: the optimizer
// step, set_params).
enum class SwapAccess { read, write, update };

// One pass's I/O: bytes moved, and the seconds the calling thread blocked waiting for them (the I/O not hidden
// behind the visits).
struct SwapTimes {
  std::int64_t read_bytes = 0;
  std::int64_t write_bytes = 0;
  double wait_s = 0;
};

class OptimizerSwapper {
 public:
  // Host memory for the swap buffers, `bytes` of it (the allocator's accounting names it); the swapper aligns
  // inside it for direct I/O.
  using HostAllocator = std::function<void*(std::int64_t bytes)>;

  // `piece_elements`: the pieces in the order every pass visits them (each >= 1). The files go under
  // <nvme_path>/zeroplan_rank<rank>/ (NvmeStore: an InputError naming options.config_field when nvme_path is
  // unusable). std::invalid_argument for buffer_count < 1 or no pieces. The files hold no states until a write
  // pass: the engine writes the initial states first.
  OptimizerSwapper(const std::string& nvme_path, int rank, const NvmeStoreOptions& options,
                   std::vector<std::int64_t> piece_elements, int buffer_count, const HostAllocator& allocate);
  OptimizerSwapper(const OptimizerSwapper&) = delete;
  OptimizerSwapper& operator=(const OptimizerSwapper&) = delete;

  // Visits every piece in order, its states in a swap buffer; returns when every write of the pass is on disk.
  // On an exception (from `visit` or the I/O) every request still in flight is finished first, then it is
  // rethrown; the states of the pieces not written back are those of the previous pass.
  SwapTimes for_each_piece(SwapAccess access, const std::function<void(int piece, const SwappedStates&)>& visit);

  std::int64_t nvme_bytes() const { return nvme_bytes_; }      // the swap files' bytes (4096-padded states)
  std::int64_t buffer_bytes() const { return buffer_bytes_; }  // host memory asked of the allocator
  int buffer_count() const { return static_cast<int>(slots_.size()); }
  int pieces() const { return static_cast<int>(pieces_.size()); }

 private:
  struct Slot {
    char* base = nullptr;
    NvmeStore::Ticket read = 0, write = 0;  // 0: none in flight
  };
  std::string file_name(int piece) const;
  // Bytes of one state of a piece in its buffer and file: 4 x elements rounded up to the direct-I/O alignment.
  static std::int64_t stride_bytes(std::int64_t elements);
  void finish(NvmeStore::Ticket& ticket, SwapTimes& times);

  NvmeStore store_;
  std::vector<std::int64_t> pieces_;
  std::vector<Slot> slots_;
  std::string prefix_;  // file names: unique per swapper, so that two in one process never share a file
  std::int64_t nvme_bytes_ = 0;
  std::int64_t buffer_bytes_ = 0;
};

}  // namespace zeroplan::exec::offload
