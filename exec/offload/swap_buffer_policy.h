// Which pinned swap buffer holds which parameter chunk, for ZeRO-Infinity's parameter offload to NVMe: the
// bookkeeping alone, no I/O. exec/offload/param_swapper.h moves the bytes as this policy says; the planner
// (exec/zero/zero_buffer_layout.cpp param_nvme_reads) replays a training step through the same policy to count
// them, so that the bytes a plan predicts are the bytes a run moves.
//
// A buffer keeps the chunk it last held after it is released: a later use of that chunk finds the values there and
// is not read from disk again. DeepSpeed does the same for its parameters (stage3.py _partitioned_params_swap_out:
// a partition still AVAILABLE in its swap buffer is updated in place and stays there; partitioned_param_swapper.py
// swap_in skips a parameter whose status is AVAILABLE), which let its NVMe parameter offload run 1.35-1.43x faster
// than a swapper that read every chunk back (bench/exec/results/2026-11-29-h200x1-param-nvme/README.md). The
// chunks the update wrote last are still in the buffers when the next forward begins, and a backward's last
// chunks when the next micro-step's forward begins.
//
// Which buffer takes new values: a free one holding nothing current first, then one whose chunk the plan does not
// ask for again, least recently released first, then the one whose chunk the plan asks for furthest ahead
// (Belady's rule over the known order, the fetch plan's). Writes are write-through: every updated chunk goes to
// disk (what a checkpoint or a later read needs), and the buffer keeps the values it wrote.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zeroplan::exec::offload {

class SwapBufferPolicy {
 public:
  // std::invalid_argument for buffers < 1.
  explicit SwapBufferPolicy(int buffers);

  // The next planned read: `position` in the order, the buffer it has, and whether the disk must fill it (false: the
  // buffer holds the chunk's current values already).
  struct Reservation {
    std::size_t position = 0;
    int buffer = -1;
    bool read = false;
  };

  // Replaces the plan: the chunks the next acquire() calls will ask for, in order, at most `ahead` reserved and not
  // yet acquired. The previous plan's reservations not acquired are dropped: their buffers (appended to `dropped`)
  // are free and hold nothing current (a read may have been in flight). Reservations start at top_up().
  void plan(const std::vector<int>& order, int ahead, std::vector<int>& dropped);
  // Reserves buffers for the next planned positions while a buffer is free and within `ahead`; appends them.
  void top_up(std::vector<Reservation>& reserved);

  // A use of `chunk`. planned: it was the plan's next position (its buffer reserved now if it was not yet, as
  // top_up would); otherwise the plan is dropped first (its buffers appended to `dropped`). read: whether the
  // disk must fill the buffer (for a planned use reserved earlier, whether that reservation said so). The buffer
  // is the chunk's until release().
  struct Use {
    int buffer = -1;
    bool read = false;
    bool planned = false;
    bool reserved_now = false;  // the buffer was chosen by this call (not reserved ahead by top_up)
    std::size_t position = 0;   // planned only
  };
  Use acquire(int chunk, std::vector<int>& dropped);
  void release(int buffer);

  // A buffer to write `chunk`'s new values (whole: all of the chunk; otherwise a part, after which no buffer holds
  // the chunk's current values). A planned, unacquired read of the chunk drops the plan first (its buffers appended
  // to `dropped`). Any other buffer's copy of the chunk is stale from now on.
  int begin_write(int chunk, bool whole, std::vector<int>& dropped);
  void end_write(int buffer);

  // Whether `chunk` is the plan's next position (acquire() takes it as planned).
  bool planned_next(int chunk) const { return next_use_ < order_.size() && order_[next_use_] == chunk; }
  int buffers() const { return static_cast<int>(slots_.size()); }
  int chunk_in(int buffer) const { return slots_.at(static_cast<std::size_t>(buffer)).chunk; }

 private:
  struct Slot {
    int chunk = -1;
    bool current = false;  // holds the chunk's current values (or will, once its reserved read lands)
    bool busy = false;     // reserved for a planned read, acquired, or being written
    bool whole_write = false;
    std::uint64_t released_at = 0;
  };
  int free_holding(int chunk) const;  // a free buffer with the chunk's current values, or -1
  int victim() const;                 // the free buffer to take new values, or -1
  void drop_plan(std::vector<int>& dropped);
  void forget(int chunk);             // no free buffer holds the chunk's current values any more
  void reserve(std::size_t position, int buffer, bool read);

  std::vector<Slot> slots_;
  std::vector<int> order_;
  std::vector<int> order_buffer_;  // per planned position: its buffer once reserved
  std::vector<char> order_read_;   // per planned position: whether its reservation reads
  std::size_t next_use_ = 0, next_reserve_ = 0;
  int ahead_ = 0;
  std::uint64_t releases_ = 0;
};

}  // namespace zeroplan::exec::offload
