#include "exec/cuda/device_allocator.h"

#include <algorithm>
#include <cstdio>

#include "exec/cuda/cuda_check.h"

namespace zeroplan::exec {

namespace {
std::string gib(std::int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}
}  // namespace

DeviceAllocator::DeviceAllocator() {
  std::size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  device_total_ = static_cast<std::int64_t>(total_b);
  baseline_used_ = static_cast<std::int64_t>(total_b - free_b);
  peak_used_ = baseline_used_;
}

DeviceAllocator::~DeviceAllocator() {
  for (auto& [ptr, block] : blocks_)
    if (block.owned) cudaFree(ptr);  // no throw from a destructor
}

void* DeviceAllocator::allocate(const std::string& component, const std::string& what, std::int64_t bytes) {
  if (bytes <= 0) throw std::invalid_argument("device allocation of " + std::to_string(bytes) + " bytes for " + what);
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, static_cast<std::size_t>(bytes));
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of a failed cudaMalloc
    std::size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw DeviceOutOfMemory("out of device memory allocating " + what + " (" + component + "): " + gib(bytes) +
                            " requested, " + gib(live_total_) + " already allocated by this run, " +
                            gib(static_cast<std::int64_t>(free_b)) + " free of " +
                            gib(static_cast<std::int64_t>(total_b)) + " (" + cudaGetErrorString(err) + ")");
  }
  try {
    blocks_[ptr] = Block{component, bytes};
    if (!live_.count(component)) order_.push_back(component);
  } catch (...) {  // std::bad_alloc: the block must not outlive its record
    blocks_.erase(ptr);
    cudaFree(ptr);
    throw;
  }
  live_[component] += bytes;
  peak_[component] = std::max(peak_[component], live_[component]);
  live_total_ += bytes;
  peak_total_ = std::max(peak_total_, live_total_);
  return ptr;
}

void DeviceAllocator::free(void* ptr) {
  auto it = blocks_.find(ptr);
  if (it == blocks_.end()) return;
  live_[it->second.component] -= it->second.bytes;
  live_total_ -= it->second.bytes;
  if (it->second.owned) CUDA_CHECK(cudaFree(ptr));
  blocks_.erase(it);
}

void DeviceAllocator::record_external(const std::string& component, const std::string& what, void* ptr,
                                      std::int64_t bytes) {
  if (!ptr || bytes <= 0) throw std::invalid_argument("external device memory of " + std::to_string(bytes) +
                                                      " bytes at null or empty for " + what);
  blocks_[ptr] = Block{component, bytes, false};
  if (!live_.count(component)) order_.push_back(component);
  live_[component] += bytes;
  peak_[component] = std::max(peak_[component], live_[component]);
  live_total_ += bytes;
  peak_total_ = std::max(peak_total_, live_total_);
}

std::int64_t DeviceAllocator::peak_bytes(const std::string& c) const {
  auto it = peak_.find(c);
  return it == peak_.end() ? 0 : it->second;
}

std::vector<std::pair<std::string, std::int64_t>> DeviceAllocator::peaks() const {
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (const auto& c : order_) out.emplace_back(c, peak_bytes(c));
  return out;
}

void DeviceAllocator::sample() {
  std::size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  peak_used_ = std::max(peak_used_, static_cast<std::int64_t>(total_b - free_b));
}

}  // namespace zeroplan::exec
