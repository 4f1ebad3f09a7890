#include "exec/cpu/cpu_zero_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <stdexcept>

#include "exec/cpu/cpu_ops.h"

namespace zeroplan::exec {

namespace {
float* f32(void* p) { return static_cast<float*>(p); }
const float* f32(const void* p) { return static_cast<const float*>(p); }
void require_f32(CommDtype type) {
  if (type != CommDtype::f32) throw std::invalid_argument("CPU backend: buffers are fp32");
}
void add_bytes(std::vector<std::pair<std::string, std::int64_t>>& list, const char* component, std::int64_t bytes) {
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.first == component; });
  if (it == list.end()) list.emplace_back(component, 0), it = list.end() - 1;
  it->second += bytes;
}
}  // namespace

void CpuZeroDevice::FreeHost::operator()(void* p) const { std::free(p); }

CpuZeroDevice::CpuZeroDevice(const ParamLayout& layout, std::uint64_t seed, int optimizer_threads)
    : layout_(layout), seed_(seed), adamw_(optimizer_threads) {
  decay_ = offload::DecayGeometry{layout.blocks_begin(), layout.block_stride(), layout.block_decay_elements(),
                                  layout.blocks_end(), layout.tail_decay_end()};
}

void* CpuZeroDevice::allocate(const char* component, const char* /*what*/, std::int64_t elements, CommDtype type) {
  require_f32(type);
  if (elements < 0) throw std::invalid_argument("CPU backend: negative allocation");
  storage_.emplace_back(new float[std::max<std::int64_t>(1, elements)]());
  add_bytes(bytes_, component, 4 * elements);
  return storage_.back().get();
}

void* CpuZeroDevice::allocate_host(const char* component, const char* what, std::int64_t bytes, bool /*pinned*/) {
  if (bytes < 0) throw std::invalid_argument(std::string("CPU backend: negative host allocation for ") + what);
  // std::aligned_alloc needs a size that is a multiple of the alignment.
  const std::size_t size = static_cast<std::size_t>((std::max<std::int64_t>(1, bytes) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, size);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, size);
  host_storage_.emplace_back(p);
  add_bytes(host_bytes_, component, bytes);
  return p;
}

void CpuZeroDevice::copy_to_host(void* host, const void* device, std::int64_t bytes) {
  std::memcpy(host, device, static_cast<std::size_t>(bytes));
}

void CpuZeroDevice::copy_to_device(void* device, const void* host, std::int64_t bytes) {
  std::memcpy(device, host, static_cast<std::size_t>(bytes));
}

void CpuZeroDevice::init_host_master(float* master, std::int64_t flat_begin, std::int64_t n) {
  init_params(nullptr, master, flat_begin, n);
}

void CpuZeroDevice::init_params(void* params, float* master, std::int64_t flat_begin, std::int64_t n) {
  // The layout's initialization of the asked-for range (the same values as of the whole buffer).
  std::vector<float> range(static_cast<std::size_t>(n));
  layout_.initialize_range(seed_, flat_begin, n, range.data());
  if (params) std::memcpy(params, range.data(), n * sizeof(float));
  if (master) std::memcpy(master, range.data(), n * sizeof(float));
}

void CpuZeroDevice::zero(void* p, std::int64_t elements, CommDtype type, Lane) {
  require_f32(type);
  std::fill(f32(p), f32(p) + elements, 0.0f);
}

void CpuZeroDevice::accumulate(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n,
                               Lane) {
  require_f32(dst_type);
  require_f32(src_type);
  float* d = f32(dst);
  const float* s = f32(src);
  for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
}

void CpuZeroDevice::convert(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n, Lane) {
  require_f32(dst_type);
  require_f32(src_type);
  std::memmove(dst, src, static_cast<std::size_t>(n) * sizeof(float));
}

void CpuZeroDevice::sum_squares(const void* g, CommDtype type, std::int64_t n, int slot) {
  require_f32(type);
  const float* x = f32(g);
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  norm_slots_.at(static_cast<std::size_t>(slot)) = sum;
}

void CpuZeroDevice::read_sum_squares(double* out, int count) {
  std::copy(norm_slots_.begin(), norm_slots_.begin() + count, out);
}

void CpuZeroDevice::adamw(const AdamwRange& r, float lr, float beta1, float beta2, float eps, float weight_decay,
                          float grad_scale, int step) {
  // fp32 training: the parameters are their own master copy.
  offload::AdamwTensors t;
  t.params = f32(r.params);
  t.grads = static_cast<const float*>(r.grads);
  t.exp_avg = r.m;
  t.exp_avg_sq = r.v;
  t.count = r.n;
  t.flat_base = r.flat_base;
  adamw_.update(t, offload::AdamwHyper{lr, beta1, beta2, eps, weight_decay, grad_scale, step}, decay_);
}

void CpuZeroDevice::upload_params(void* params, float* master, const float* values, std::int64_t n) {
  if (params) std::memcpy(params, values, n * sizeof(float));
  if (master) std::memcpy(master, values, n * sizeof(float));
}

void CpuZeroDevice::download(const void* src, float* dst, std::int64_t n, CommDtype type, double factor) {
  require_f32(type);
  const float* s = f32(src);
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i] * factor);
}

int CpuZeroDevice::mark(Lane) {
  marks_.push_back(std::chrono::steady_clock::now());
  return static_cast<int>(marks_.size()) - 1;
}

double CpuZeroDevice::seconds_between(int a, int b) {
  return std::chrono::duration<double>(marks_.at(b) - marks_.at(a)).count();
}

}  // namespace zeroplan::exec
