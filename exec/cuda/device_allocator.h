// The one device allocator of a run. Every cudaMalloc goes through it with the planner component it belongs to
// (params, grads, master_params, optimizer_states, activations, logits, workspace), so the run reports the
// peak bytes of each component and of their sum, beside cudaMemGetInfo's view (which also holds the CUDA
// context, cuBLASLt and other libraries). A failed allocation throws DeviceOutOfMemory naming the tensor, the
// component and the bytes asked for, with what was already allocated and what the device had free.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace zeroplan::exec {

class DeviceOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DeviceAllocator {
 public:
  DeviceAllocator();  // records the device's used bytes before any allocation (the baseline)
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  void* allocate(const std::string& component, const std::string& what, std::int64_t bytes);
  template <typename T>
  T* allocate_n(const std::string& component, const std::string& what, std::int64_t count) {
    return static_cast<T*>(allocate(component, what, count * static_cast<std::int64_t>(sizeof(T))));
  }
  void free(void* ptr);
  // Counts `bytes` at `ptr` that another library allocated and frees (NCCL's symmetric memory, the ZeRO engine's
  // gathered-parameter arena: exec/comm/communicator.h allocate_window) under its component, as allocate() would.
  void record_external(const std::string& component, const std::string& what, void* ptr, std::int64_t bytes);

  std::int64_t peak_bytes(const std::string& component) const;
  std::int64_t peak_total() const { return peak_total_; }
  std::vector<std::pair<std::string, std::int64_t>> peaks() const;  // every component seen, in first-use order

  // cudaMemGetInfo: total and used (= total - free) bytes now; sample() keeps the largest used value seen.
  std::int64_t device_total() const { return device_total_; }
  std::int64_t baseline_used() const { return baseline_used_; }
  void sample();
  std::int64_t peak_used() const { return peak_used_; }

 private:
  struct Block {
    std::string component;
    std::int64_t bytes;
    bool owned = true;  // false: record_external's, freed by its owner
  };
  std::map<void*, Block> blocks_;
  std::vector<std::string> order_;
  std::map<std::string, std::int64_t> live_, peak_;
  std::int64_t live_total_ = 0, peak_total_ = 0;
  std::int64_t device_total_ = 0, baseline_used_ = 0, peak_used_ = 0;
};

}  // namespace zeroplan::exec
