// The CUDA backend's side of the ZeRO engine (exec/zero/zero_device.h): buffers from the tagged device
// allocator, elementwise kernels, AdamW and initialization launched on the compute stream (or the
// communication stream, for work that follows a collective), lane ordering with CUDA events, and CUDA events as
// time marks. One instance per rank (per GPU); nothing in it is shared between devices or threads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "exec/activation_accounting.h"
#include "exec/cuda/device_allocator.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_device.h"

namespace zeroplan::exec {

class CudaZeroDevice final : public ZeroDevice {
 public:
  CudaZeroDevice(const ParamLayout& layout, std::uint64_t seed, CommDtype element, DeviceAllocator& alloc,
                 cudaStream_t compute, cudaStream_t comm);
  ~CudaZeroDevice() override;
  CudaZeroDevice(const CudaZeroDevice&) = delete;
  CudaZeroDevice& operator=(const CudaZeroDevice&) = delete;

  CommDtype element_type() const override { return element_; }
  void* allocate(const char* component, const char* what, std::int64_t elements, CommDtype type) override;
  void record_external(const char* component, const char* what, void* ptr, std::int64_t bytes) override;
  // Pinned: cudaHostAlloc (portable), so that the copy lanes' cudaMemcpyAsync run asynchronously.
  void* allocate_host(const char* component, const char* what, std::int64_t bytes, bool pinned) override;
  void copy_to_host(void* host, const void* device, std::int64_t bytes) override;
  void copy_to_device(void* device, const void* host, std::int64_t bytes) override;
  void host_wait_event(int id) override;
  bool event_passed(int id) override;
  void init_host_master(float* master, std::int64_t flat_begin, std::int64_t n) override;
  bool kernels_overwrite() const override { return true; }
  bool lanes_concurrent() const override { return true; }
  void init_params(void* params, float* master, std::int64_t flat_begin, std::int64_t n) override;
  void zero(void* p, std::int64_t elements, CommDtype type, Lane lane) override;
  void accumulate(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n,
                  Lane lane) override;
  void convert(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n, Lane lane) override;
  void sum_squares(const void* g, CommDtype type, std::int64_t n, int slot) override;
  void read_sum_squares(double* out, int count) override;
  int max_norm_slots() const override { return static_cast<int>(kNormSlots); }
  void adamw(const AdamwRange& range, float lr, float beta1, float beta2, float eps, float weight_decay,
             float grad_scale, int step) override;
  void upload_params(void* params, float* master, const float* values, std::int64_t n) override;
  void download(const void* src, float* dst, std::int64_t n, CommDtype type, double factor) override;
  void lane_waits_for(Lane waiter, Lane producer) override;
  void record_event(int id, Lane lane) override;
  void wait_event(int id, Lane waiter) override;
  int mark(Lane lane) override;
  double seconds_between(int a, int b) override;
  void clear_marks() override { marks_used_ = 0; }
  void synchronize() override;
  void set_graph_mode(GraphMode mode) override;

  // Bytes of allocate_host per component (the memory report's host side).
  const std::vector<std::pair<std::string, std::int64_t>>& host_bytes_by_component() const { return host_bytes_; }

 private:
  cudaStream_t stream(Lane lane) const;
  cudaEvent_t named_event(int id);

  const ParamLayout& layout_;
  std::uint64_t seed_;
  CommDtype element_;
  DeviceAllocator& alloc_;
  cudaStream_t compute_, comm_;
  cudaStream_t to_host_ = nullptr, to_device_ = nullptr;  // ZeRO-Offload's copy lanes (created here)
  float* norm_slots_ = nullptr;     // kNormSlots sums of squares
  float* norm_partials_ = nullptr;  // grad_norm_squared's block partials (compute stream only)
  float* host_norms_ = nullptr;     // pinned
  cudaEvent_t order_[kLanes] = {};  // lane ordering: recorded on the producer lane (indexed by Lane)
  struct HostBlock {
    void* p;
    bool pinned;
  };
  std::vector<HostBlock> host_blocks_;
  std::vector<std::pair<std::string, std::int64_t>> host_bytes_;
  std::vector<cudaEvent_t> named_;
  std::vector<cudaEvent_t> marks_;
  int marks_used_ = 0;
  // GraphMode: while capturing, the lanes that have joined the capture and the named events recorded in it.
  GraphMode graph_mode_ = GraphMode::eager;
  bool lane_captured_[kLanes] = {};
  std::vector<bool> event_captured_;
  // The events a capture records in place of named_: a record captured into a graph leaves its event unusable
  // for eager waits (cudaErrorInvalidValue), and eager work after a launch still waits on named_ (the lanes have
  // joined the graph's end by then: ZeroEngine::follow_graph).
  std::vector<cudaEvent_t> captured_named_;
  cudaEvent_t captured_event(int id);
  bool replayed() const { return graph_mode_ == GraphMode::replayed; }
  void require_eager(const char* what) const;
};

}  // namespace zeroplan::exec
