// What the CUDA tests (tests/exec/*_cuda_test.cu) share: the skip without a GPU, random inputs, device buffers
// rounded to a kernel's element type, and comparisons of float vectors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_trainer.h"

// Every CUDA test starts with it: skipped, saying why, where no GPU is present.
#define REQUIRE_GPU()                                                        \
  do {                                                                       \
    std::string why;                                                         \
    if (!::zeroplan::exec::cuda_device_available(&why)) GTEST_SKIP() << why; \
  } while (0)

namespace zeroplan::exec::cuda_test {

inline std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <typename T>
T to_t(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __float2half(x);
  else return __float2bfloat16(x);
}
template <typename T>
float from_t(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else return __bfloat162float(x);
}

// Device buffer of T, filled from floats (rounded to T); the host copy keeps the rounded values so the CPU
// reference sees exactly the GPU's inputs.
template <typename T>
struct Buf {
  T* d = nullptr;
  std::size_t n = 0;
  explicit Buf(std::size_t count) : n(count) {
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(T)));
    poison();
  }
  explicit Buf(std::vector<float>& host) : Buf(host.size()) { upload(host); }
  ~Buf() { cudaFree(d); }
  void upload(std::vector<float>& host) {  // rounds host in place to T precision
    std::vector<T> t(n);
    for (std::size_t i = 0; i < n; ++i) {
      t[i] = to_t<T>(host[i]);
      host[i] = from_t<T>(t[i]);
    }
    CUDA_CHECK(cudaMemcpy(d, t.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void poison() { CUDA_CHECK(cudaMemset(d, 0x7F, n * sizeof(T))); }  // NaN-ish garbage: unwritten output shows
  std::vector<float> get() const {
    std::vector<T> t(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(t.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = from_t<T>(t[i]);
    return out;
  }
};

// Where two runs' parameters part: how many elements differ, the first index and both values (the index
// names the tensor through the trainer's ParamLayout); "equal" when none does.
inline std::string differing_elements(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return "sizes " + std::to_string(got.size()) + " and " + std::to_string(ref.size());
  std::size_t count = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0 && count++ == 0) first = i;
  if (count == 0) return "equal";
  char text[160];
  std::snprintf(text, sizeof text, "%zu of %zu elements differ, the first at %zu: %.9g against %.9g", count,
                got.size(), first, got[first], ref[first]);
  return text;
}

// ||got - ref|| / ||ref|| over a flat range.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& ref, std::int64_t begin, std::int64_t n) {
  double d = 0, r = 0;
  for (std::int64_t i = begin; i < begin + n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    d += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(r, 1e-30));
}

// The same over the whole of ref (got at least as long).
inline double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  return rel_err(got, ref, 0, static_cast<std::int64_t>(ref.size()));
}

}  // namespace zeroplan::exec::cuda_test
