// Owners of a trainer's CUDA handles (events, its stream, pinned host buffers) and the host-side conversions its
// downloads need, shared by the transformer trainer (cuda_trainer.cu) and the layer-list trainer
// (cuda_network_trainer.cu).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "exec/cuda/cuda_check.h"

namespace zeroplan::exec::cuda {

template <typename T>
float host_to_float(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    std::uint16_t bits;
    std::memcpy(&bits, &x, 2);
    const std::uint32_t f = static_cast<std::uint32_t>(bits) << 16;
    float r;
    std::memcpy(&r, &f, 4);
    return r;
  } else {
    return __half2float(x);
  }
}

// Owners of the trainer's CUDA handles. Each releases its handle in its destructor, so a constructor that throws
// half-way releases whatever it had created (members are destroyed in reverse order of declaration).
class CudaEvent {
 public:
  CudaEvent() { CUDA_CHECK(cudaEventCreate(&e_)); }
  ~CudaEvent() { cudaEventDestroy(e_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return e_; }
 private:
  cudaEvent_t e_{};
};

// Null until create(); converts to cudaStream_t so it passes straight to the launchers.
class CudaStream {
 public:
  CudaStream() = default;
  ~CudaStream() {
    if (s_) cudaStreamDestroy(s_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  void create() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }
 private:
  cudaStream_t s_ = nullptr;
};

// Page-locked host memory (the targets of the asynchronous loss and norm copies); null until allocate().
template <typename U>
class PinnedHost {
 public:
  PinnedHost() = default;
  ~PinnedHost() {
    if (p_) cudaFreeHost(p_);
  }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  void allocate(std::size_t count) { CUDA_CHECK(cudaMallocHost(&p_, count * sizeof(U))); }
  U* get() const { return p_; }
 private:
  U* p_ = nullptr;
};

inline double elapsed_s(const CudaEvent& a, const CudaEvent& b) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return ms * 1e-3;
}

}  // namespace zeroplan::exec::cuda
