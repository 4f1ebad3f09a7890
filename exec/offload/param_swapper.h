// ZeRO-Infinity's parameter offload to NVMe (offload_param {"device": "nvme"}, stage 3): a rank's 16-bit parameter
// partition lives in files under nvme_path, one file per partition chunk (a bucket's chunk: what one all-gather
// reads), and only a few pinned buffers are in host memory. The engine (exec/zero/zero_engine.cpp) tells the
// swapper in which order a micro-step's all-gathers will read the chunks (the stage-3 fetch plan); the swapper reads
// that many ahead as it has free buffers, so the disk works on the next units' chunks while the device computes
// on the current one. After the optimizer step every updated chunk is written back through the same buffers.
// Which buffer holds which chunk is exec/offload/swap_buffer_policy.h's to say: a buffer keeps its chunk after
// use, and a later use of it finds it there (the update's last chunks at the next forward, a backward's last
// chunks at the next micro-step's forward) without a read.
//
// DeepSpeed's AsyncPartitionedParameterSwapper (deepspeed/runtime/swap_tensor/partitioned_param_swapper.py) keeps
// offload_param.buffer_count pinned buffers of buffer_size elements (_configure_aio), assigns one to each
// parameter swapped in (swap_in, _allocate_and_return_buffers_for_swap_in) and gives it back once the parameter is
// released (remove_partition_and_release_buffers); the coordinator (zero/partitioned_param_coordinator.py,
// __prefetch_nvme_param_partitions) swaps in the parameters of the next modules of its trace while there are free
// buffers, and stage3.py writes the updated fp16 partition back after the optimizer step
// (_reassign_or_swap_out_partitioned_parameters, swap_out_and_release). Here a buffer holds one chunk (a run of
// tensors, as the engine gathers them) and is sized to the largest chunk on NVMe, which buffer_size must hold
// (DeepSpeed's get_buffer refuses a partition larger than buffer_size); a chunk no buffer holds any more is read
// again for the all-gather that needs it, so the bytes per step follow from the fetch plan and the policy
// (exec/zero/zero_buffer_layout.h param_nvme_reads replays both).
// Unlike DeepSpeed, every chunk goes to NVMe whatever its size: DeepSpeed keeps a partition smaller than
// max(1 MiB, aio.block_size) in host memory (swappable_tensor, min_aio_bytes), because its aio handle moves whole
// blocks; the store here pads a chunk's last partial block itself (nvme_io.h), so small chunks cost no host copy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exec/offload/nvme_io.h"
#include "exec/offload/optimizer_swapper.h"
#include "exec/offload/swap_buffer_policy.h"

namespace zeroplan::exec::offload {

class ParamSwapper {
 public:
  using HostAllocator = std::function<void*(std::int64_t bytes)>;
  // Called before a buffer receives new data (a read or a write's values): whatever still reads it (the device
  // copy the engine enqueued from it) must be done by then.
  using BufferIdle = std::function<void(int buffer)>;
  // Whether the buffer's readers are done already, without blocking: reads ahead go only into such buffers, so
  // that the host never stalls behind the device to read ahead (a read the engine asks for now still waits).
  using BufferReady = std::function<bool(int buffer)>;

  // `chunk_elements`: per chunk (the engine's buckets), its elements in a file, 0 for a chunk the swapper does not
  // hold. `element_bytes`: of the partition's element type. The files go under <nvme_path>/zeroplan_rank<rank>/
  // (NvmeStore: an InputError naming options.config_field when nvme_path is unusable); a chunk's file holds nothing
  // until it is first written. std::invalid_argument for buffer_count < 1, element_bytes not 2 or 4, or no chunk.
  ParamSwapper(const std::string& nvme_path, int rank, const NvmeStoreOptions& options,
               std::vector<std::int64_t> chunk_elements, std::int64_t element_bytes, int buffer_count,
               const HostAllocator& allocate, BufferIdle idle, BufferReady ready = {});
  ParamSwapper(const ParamSwapper&) = delete;
  ParamSwapper& operator=(const ParamSwapper&) = delete;

  // The chunks the next acquire() calls will ask for, in order; reads start now into free buffers, at most
  // `ahead` of them not yet acquired (ahead < buffers leaves room for writes in between). Replaces any earlier
  // order (its reads not yet acquired are finished and dropped). An empty order stops reading ahead.
  void plan_reads(const std::vector<int>& order, int ahead);
  void plan_reads(const std::vector<int>& order) { plan_reads(order, buffer_count()); }

  // The chunk's values in a buffer: a buffer that still holds them, the next planned read (waited for), or, for a
  // chunk out of the planned order, read now (the plan dropped). The buffer is the chunk's until release(buffer).
  struct Held {
    const void* data = nullptr;
    int buffer = -1;
  };
  Held acquire(int chunk);
  // The buffer may take other data once the BufferIdle hook says its readers are done; planned reads go on.
  void release(int buffer);

  // A buffer to write `elements` values of `chunk` from element `offset` on (offset x element_bytes must be a
  // multiple of 4096): the caller fills it, then end_write() starts the write. A planned read of the same chunk in
  // flight drops the plan first (a write may not overlap a read of its file); other planned reads go on. A write of
  // the whole chunk leaves its values in the buffer for a later acquire().
  struct Writing {
    void* data = nullptr;
    int buffer = -1;
    int chunk = -1;
    std::int64_t offset = 0, elements = 0;
  };
  Writing begin_write(int chunk, std::int64_t offset, std::int64_t elements);
  void end_write(const Writing& w);
  // Every write started is on disk (IoError for the first that failed, naming its file).
  void wait_writes();

  // Bytes read and written since the last call (whole 4096-byte blocks, what the disk moved), and the seconds the
  // calling thread blocked waiting for them.
  SwapTimes take_times();

  std::int64_t nvme_bytes() const { return nvme_bytes_; }      // the swap files' bytes (each chunk 4096-padded)
  std::int64_t buffer_bytes() const { return buffer_bytes_; }  // host memory asked of the allocator
  int buffer_count() const { return static_cast<int>(buffers_.size()); }
  const std::string& directory() const { return store_.directory(); }
  std::string file_name(int chunk) const;

 private:
  struct Buffer {
    char* base = nullptr;
    int io_chunk = -1;            // whose values its last read or write moved
    NvmeStore::Ticket read = 0;   // 0: none in flight
    NvmeStore::Ticket write = 0;
  };
  struct PendingRead {  // reserved by the policy, waiting for the buffer's readers to finish
    std::size_t position = 0;
    int buffer = -1;
    int chunk = -1;
  };
  std::int64_t padded(int chunk) const;
  void finish(NvmeStore::Ticket& ticket);
  void prepare(int b, int chunk);  // idle hook, its own write done, the chunk's writes done
  void top_up();                   // reserves planned buffers, starts the reads whose buffers are ready
  void start_ready_reads();
  void finish_dropped();           // the dropped reservations' reads finished, their pending reads forgotten
  void start_read(int b, int chunk);
  void check_on_nvme(int chunk) const;

  NvmeStore store_;
  std::vector<std::int64_t> chunks_;
  std::int64_t element_bytes_;
  std::vector<Buffer> buffers_;
  SwapBufferPolicy policy_;
  BufferIdle idle_;
  BufferReady ready_;
  std::string prefix_;
  std::int64_t nvme_bytes_ = 0, buffer_bytes_ = 0;
  std::vector<PendingRead> pending_;
  std::vector<int> dropped_;
  std::vector<SwapBufferPolicy::Reservation> reserved_;
  SwapTimes times_;
};

}  // namespace zeroplan::exec::offload
