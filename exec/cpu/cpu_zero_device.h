// The CPU backend's side of the ZeRO engine: fp32 host buffers, plain loops, both lanes on the calling thread
// (MPI collectives complete before they return, so no ordering is needed), clock readings as time marks.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/offload/cpu_adamw.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_device.h"

namespace zeroplan::exec {

class CpuZeroDevice final : public ZeroDevice {
 public:
  // optimizer_threads: the host AdamW's threads (offload::default_optimizer_threads: the node's cores divided
  // among its ranks).
  CpuZeroDevice(const ParamLayout& layout, std::uint64_t seed, int optimizer_threads);

  CommDtype element_type() const override { return CommDtype::f32; }
  void* allocate(const char* component, const char* what, std::int64_t elements, CommDtype type) override;
  // The CPU backend's communicators (MPI, self) allocate no windows: nothing is ever recorded.
  void record_external(const char* component, const char*, void*, std::int64_t) override {
    throw std::logic_error(std::string("CPU ZeRO device: no external device memory (") + component + ")");
  }
  void* allocate_host(const char* component, const char* what, std::int64_t bytes, bool pinned) override;
  // Both lanes are the calling thread: the copies complete before they return, and events have passed.
  void copy_to_host(void* host, const void* device, std::int64_t bytes) override;
  void copy_to_device(void* device, const void* host, std::int64_t bytes) override;
  void host_wait_event(int) override {}
  bool event_passed(int) override { return true; }  // one thread: everything enqueued has run
  void init_host_master(float* master, std::int64_t flat_begin, std::int64_t n) override;
  bool kernels_overwrite() const override { return false; }
  bool lanes_concurrent() const override { return false; }
  void init_params(void* params, float* master, std::int64_t flat_begin, std::int64_t n) override;
  void zero(void* p, std::int64_t elements, CommDtype type, Lane lane) override;
  void accumulate(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n,
                  Lane lane) override;
  void convert(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n, Lane lane) override;
  void sum_squares(const void* g, CommDtype type, std::int64_t n, int slot) override;
  void read_sum_squares(double* out, int count) override;
  int max_norm_slots() const override { return static_cast<int>(norm_slots_.size()); }
  void adamw(const AdamwRange& range, float lr, float beta1, float beta2, float eps, float weight_decay,
             float grad_scale, int step) override;
  void upload_params(void* params, float* master, const float* values, std::int64_t n) override;
  void download(const void* src, float* dst, std::int64_t n, CommDtype type, double factor) override;
  void lane_waits_for(Lane, Lane) override {}
  void record_event(int, Lane) override {}
  void wait_event(int, Lane) override {}
  int mark(Lane lane) override;
  double seconds_between(int a, int b) override;
  void clear_marks() override { marks_.clear(); }
  void synchronize() override {}

  // Bytes allocated per component (the memory report).
  const std::vector<std::pair<std::string, std::int64_t>>& bytes_by_component() const { return bytes_; }
  // Bytes of allocate_host per component (offloaded states): host memory beside the "device" buffers.
  const std::vector<std::pair<std::string, std::int64_t>>& host_bytes_by_component() const { return host_bytes_; }

 private:
  const ParamLayout& layout_;
  std::uint64_t seed_;
  std::vector<std::unique_ptr<float[]>> storage_;
  std::vector<std::pair<std::string, std::int64_t>> bytes_;
  struct FreeHost {
    void operator()(void* p) const;
  };
  std::vector<std::unique_ptr<void, FreeHost>> host_storage_;
  std::vector<std::pair<std::string, std::int64_t>> host_bytes_;
  std::vector<double> norm_slots_ = std::vector<double>(1024, 0.0);
  // AdamW: the vectorised, multithreaded host optimizer of ZeRO-Offload (exec/offload/cpu_adamw.h), bit for
  // bit the scalar reference's update; threads = the node's cores divided among its ranks.
  offload::CpuAdamw adamw_;
  offload::DecayGeometry decay_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace zeroplan::exec
