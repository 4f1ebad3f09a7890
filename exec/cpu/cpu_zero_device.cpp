#include "exec/cpu/cpu_zero_device.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "exec/cpu/cpu_ops.h"

namespace zeroplan::exec {

namespace {
float* f32(void* p) { return static_cast<float*>(p); }
const float* f32(const void* p) { return static_cast<const float*>(p); }
void require_f32(CommDtype type) {
  if (type != CommDtype::f32) throw std::invalid_argument("CPU backend: buffers are fp32");
}
}  // namespace

CpuZeroDevice::CpuZeroDevice(const ParamLayout& layout, std::uint64_t seed, int optimizer_threads)
    : layout_(layout), seed_(seed), adamw_(optimizer_threads) {
  decay_ = offload::DecayGeometry{layout.blocks_begin(), layout.block_stride(), layout.block_decay_elements(),
                                  layout.blocks_end()};
}

void* CpuZeroDevice::allocate(const char* component, const char* /*what*/, std::int64_t elements, CommDtype type) {
  require_f32(type);
  if (elements < 0) throw std::invalid_argument("CPU backend: negative allocation");
  storage_.emplace_back(new float[std::max<std::int64_t>(1, elements)]());
  auto it = std::find_if(bytes_.begin(), bytes_.end(), [&](const auto& e) { return e.first == component; });
  if (it == bytes_.end()) bytes_.emplace_back(component, 0), it = bytes_.end() - 1;
  it->second += 4 * elements;
  return storage_.back().get();
}

void CpuZeroDevice::init_params(void* params, float* master, std::int64_t flat_begin, std::int64_t n) {
  // The layout's initialization of the whole buffer is the reference; copy the asked-for range.
  std::vector<float> all(layout_.total());
  layout_.initialize(seed_, all.data());
  if (params) std::memcpy(params, all.data() + flat_begin, n * sizeof(float));
  if (master) std::memcpy(master, all.data() + flat_begin, n * sizeof(float));
}

void CpuZeroDevice::zero(void* p, std::int64_t elements, CommDtype type, Lane) {
  require_f32(type);
  std::fill(f32(p), f32(p) + elements, 0.0f);
}

void CpuZeroDevice::accumulate(void* dst, const void* src, std::int64_t n, CommDtype type, Lane) {
  require_f32(type);
  float* d = f32(dst);
  const float* s = f32(src);
  for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
}

void CpuZeroDevice::sum_squares(const void* g, std::int64_t n, int slot) {
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
