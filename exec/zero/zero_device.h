// What a backend gives the ZeRO engine: typed buffers in its memory, a handful of elementwise operations, AdamW
// over a range, and the ordering between its compute lane (the stream that runs forward/backward) and its
// communication lane (the stream the collectives run on). The CUDA backend implements it with streams, events and
// kernels (exec/cuda/cuda_zero_device.*); the CPU backend with plain loops, where both lanes are the calling thread
// (exec/cpu/cpu_zero_device.*). The engine (exec/zero/zero_engine.*) is written once against this interface.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "exec/comm/communicator.h"

namespace zeroplan::exec {

// compute: forward/backward and the optimizer; comm: the collectives; to_host / to_device: ZeRO-Offload's
// copies between device buffers and host memory (their own lanes, so that gradients leave while parameters
// arrive: a GPU has a copy engine per direction).
enum class Lane { compute, comm, to_host, to_device };
constexpr int kLanes = 4;

// AdamW on n elements: params[i] (when not null: stage 3 may keep no 16-bit partition) and master[i] (when not
// null: the fp32 copy the update runs on) with
// gradient grads[i] * grad_scale, moments m[i], v[i]; `flat_base` is the flat index of element 0 (weight decay
// applies by position in the layout). The gradients are in the model's precision, or fp32 when fp32_grads (fp32
// gradient accumulation). Runs on the compute lane.
struct AdamwRange {
  void* params = nullptr;
  float* master = nullptr;
  const void* grads = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  std::int64_t n = 0;
  std::int64_t flat_base = 0;
  bool fp32_grads = false;
};

class ZeroDevice {
 public:
  virtual ~ZeroDevice() = default;
  // The element type of parameters and gradients (the model precision).
  virtual CommDtype element_type() const = 0;
  // Tagged with a planner component name ("params", "grads", "gradient_buckets", ...) for the memory report.
  virtual void* allocate(const char* component, const char* what, std::int64_t elements, CommDtype type) = 0;
  // Counts device memory another library allocated (the communicator's window: communicator.h allocate_window) in
  // the memory report under `component`, as allocate() would have.
  virtual void record_external(const char* component, const char* what, void* ptr, std::int64_t bytes) = 0;
  // Host memory for offloaded states, 64-byte aligned and zeroed, tagged with a host component name for the
  // memory report ("offload_master_params", ...). pinned: page-locked (CUDA: cudaHostAlloc), so that the copies
  // below run asynchronously; otherwise ordinary memory (DeepSpeed's pin_memory false). The CPU backend's memory is
  // host memory already: ordinary aligned memory, reported as host.
  virtual void* allocate_host(const char* component, const char* what, std::int64_t bytes, bool pinned) = 0;
  // Asynchronous copies between device memory and allocate_host memory: copy_to_host on Lane::to_host,
  // copy_to_device on Lane::to_device. Order them with lane_waits_for / record_event like any other lane work.
  virtual void copy_to_host(void* host, const void* device, std::int64_t bytes) = 0;
  virtual void copy_to_device(void* device, const void* host, std::int64_t bytes) = 0;
  // Blocks the calling thread until the point recorded by record_event(id, ...) has passed.
  virtual void host_wait_event(int id) = 0;
  // Whether that point has passed, without blocking (an event never recorded has). The default waits for it.
  virtual bool event_passed(int id) {
    host_wait_event(id);
    return true;
  }
  // The fp32 initialization of flat elements [flat_begin, flat_begin + n) (as init_params) into host memory.
  virtual void init_host_master(float* master, std::int64_t flat_begin, std::int64_t n) = 0;
  // Whether backward kernels can overwrite gradients (CUDA: GEMM beta = 0) or always accumulate (CPU reference).
  virtual bool kernels_overwrite() const = 0;
  // Whether the communication lane runs concurrently with the compute lane (streams) or on the same thread.
  virtual bool lanes_concurrent() const = 0;
  // The initialization (exec/init_rng.h, by the layout's init_index) of flat elements [flat_begin, flat_begin+n)
  // into params[0..n) (element type) and master[0..n) (fp32), each when not null; alignment gaps get 0.
  virtual void init_params(void* params, float* master, std::int64_t flat_begin, std::int64_t n) = 0;
  virtual void zero(void* p, std::int64_t elements, CommDtype type, Lane lane) = 0;
  // dst[0..n) += src[0..n), dst of `dst_type` and src of `src_type` (the sum in fp32, rounded to dst_type once).
  virtual void accumulate(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n,
                          Lane lane) = 0;
  // dst[0..n) = src[0..n) converted (rounded to nearest even when dst is narrower).
  virtual void convert(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n,
                       Lane lane) = 0;
  // Sum of squares of g[0..n) (of `type`) into norm slot `slot` (fp32 accumulation on the GPU, double on the CPU).
  virtual void sum_squares(const void* g, CommDtype type, std::int64_t n, int slot) = 0;
  // Waits for the compute lane and returns slots [0, count) in host doubles.
  virtual void read_sum_squares(double* out, int count) = 0;
  virtual int max_norm_slots() const = 0;
  virtual void adamw(const AdamwRange& range, float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_scale, int step) = 0;
  // params[i] = round(values[i]) and master[i] = values[i] (either may be null), values on the host (fp32).
  virtual void upload_params(void* params, float* master, const float* values, std::int64_t n) = 0;
  // Host copy of n elements of a `type` buffer as floats, times `factor`.
  virtual void download(const void* src, float* dst, std::int64_t n, CommDtype type, double factor) = 0;

  // Ordering between the lanes (no-ops where both lanes are the calling thread).
  virtual void lane_waits_for(Lane waiter, Lane producer) = 0;
  // Named events for buffer reuse: record on `lane` now; a later wait makes `waiter` wait for that point.
  virtual void record_event(int id, Lane lane) = 0;
  virtual void wait_event(int id, Lane waiter) = 0;
  // Time marks (events on the GPU, clock readings on the CPU): mark() records one on `lane` and returns its
  // index; seconds_between() is valid once the step has synchronized; clear_marks() starts a new step.
  virtual int mark(Lane lane) = 0;
  virtual double seconds_between(int a, int b) = 0;
  virtual void clear_marks() = 0;
  virtual void synchronize() = 0;

  // A micro-step replayed as a CUDA graph (GraphMode, exec/comm/communicator.h). Capturing: time marks become
  // graph nodes that every replay records, and a wait for an event recorded before the capture began is left out
  // (the caller has joined every lane into the compute lane first, so stream order implies it). Replayed: the
  // lane work of the calls is the launched graph's; mark() hands out the same indices as in the capture and
  // nothing is enqueued. Only the GPU backend takes part; the default refuses anything but eager.
  virtual void set_graph_mode(GraphMode mode) {
    if (mode != GraphMode::eager) throw std::logic_error("this backend's lane work cannot be part of a CUDA graph");
  }
};

}  // namespace zeroplan::exec
