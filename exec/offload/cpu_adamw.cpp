#include "exec/offload/cpu_adamw.h"

#include <cpuid.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exec/offload/cpu_adamw_kernels.h"

namespace zeroplan::exec::offload {

namespace {

using detail::AdamwCoefficients;
using detail::AdamwSpan;

// Thread shares start at multiples of this many elements: a multiple of every vector width (16 fp32 for AVX-512)
// and of a 64-byte cache line of the 16-bit copy (32 elements), so threads never write one line.
constexpr std::int64_t kShareAlignment = 64;

float bf16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The update of element i; the vector kernels (cpu_adamw_simd.h) repeat it operation by operation. The 16-bit
// copy rounds to nearest even through Eigen's conversions (Eigen/src/Core/arch/Default/{Half,BFloat16}.h).
void adamw_element(const AdamwSpan& s, const AdamwCoefficients& c, std::int64_t i) {
  const float grad = s.grads        ? s.grads[i]
                     : s.grads_bf16 ? bf16_bits_to_float(s.grads_bf16[i])
                                    : static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(s.grads_fp16[i]));
  const float g = grad * c.grad_scale;
  const float m = c.beta1 * s.exp_avg[i] + c.one_minus_beta1 * g;
  const float v = c.beta2 * s.exp_avg_sq[i] + c.one_minus_beta2 * g * g;
  const float mhat = m / c.bias_correction1;
  const float vhat = v / c.bias_correction2;
  const float p = s.params[i] - c.lr * (mhat / (std::sqrt(vhat) + c.eps) + s.weight_decay * s.params[i]);
  s.exp_avg[i] = m;
  s.exp_avg_sq[i] = v;
  s.params[i] = p;
  if (s.params_half) {
    s.params_half[i] = s.half_format == HalfFormat::bf16 ? Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(p))
                                                         : Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(p));
  }
}

// Whether flat index f decays, and the end (exclusive) of the run of indices around it that share its decay.
struct DecayRun {
  bool decays;
  std::int64_t end;
};
DecayRun decay_run(const DecayGeometry& d, std::int64_t f) {
  constexpr std::int64_t kNoEnd = std::numeric_limits<std::int64_t>::max();
  if (f < d.blocks_begin) return {true, d.blocks_begin};
  if (f >= d.blocks_end) return f < d.tail_decay_end ? DecayRun{true, d.tail_decay_end} : DecayRun{false, kNoEnd};
  const std::int64_t block_start = f - (f - d.blocks_begin) % d.block_stride;
  if (f - block_start < d.block_decay) return {true, std::min(block_start + d.block_decay, d.blocks_end)};
  return {false, std::min(block_start + d.block_stride, d.blocks_end)};
}

void check_geometry(const DecayGeometry& d) {
  const bool blocks = d.blocks_end > d.blocks_begin;
  if (d.blocks_begin < 0 || d.blocks_end < d.blocks_begin ||
      (blocks && (d.block_stride <= 0 || d.block_decay < 0 || d.block_decay > d.block_stride)))
    throw std::invalid_argument("CpuAdamw: weight-decay geometry blocks_begin " + std::to_string(d.blocks_begin) +
                                ", blocks_end " + std::to_string(d.blocks_end) + ", block_stride " +
                                std::to_string(d.block_stride) + ", block_decay " + std::to_string(d.block_decay) +
                                "; expected 0 <= blocks_begin <= blocks_end and, when blocks_end > blocks_begin, "
                                "0 <= block_decay <= block_stride with block_stride > 0");
}

void check_tensors(const AdamwTensors& t, const AdamwHyper& h) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("CpuAdamw::update: " + what); };
  if (t.count < 0) fail("count is " + std::to_string(t.count) + "; expected >= 0");
  if (t.flat_base < 0) fail("flat_base is " + std::to_string(t.flat_base) + "; expected >= 0");
  if (!t.params || !t.exp_avg || !t.exp_avg_sq) fail("params, exp_avg and exp_avg_sq must all be set");
  if ((t.grads != nullptr) + (t.grads_bf16 != nullptr) + (t.grads_fp16 != nullptr) != 1)
    fail("exactly one of grads, grads_bf16 and grads_fp16 must be set");
  if (h.step < 1) fail("step is " + std::to_string(h.step) + "; expected >= 1 (the first update is step 1)");
}

}  // namespace

namespace detail {

void adamw_span_scalar(const AdamwSpan& span, const AdamwCoefficients& c) {
  for (std::int64_t i = 0; i < span.count; ++i) adamw_element(span, c, i);
}

}  // namespace detail

bool cpu_supports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return true;
    case CpuIsa::avx2: {
      // __builtin_cpu_supports checks that the OS saves the AVX registers (XCR0); F16C (the fp16 copy) has no
      // name there in clang 14, so it is read from CPUID leaf 1, ECX bit 29 (Intel SDM vol. 2A, CPUID).
      unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
      const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
      return __builtin_cpu_supports("avx2") && f16c;
    }
    case CpuIsa::avx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
}

CpuIsa detect_cpu_isa() {
  if (cpu_supports(CpuIsa::avx512)) return CpuIsa::avx512;
  if (cpu_supports(CpuIsa::avx2)) return CpuIsa::avx2;
  return CpuIsa::scalar;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return "scalar";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
  }
  return "unknown";
}

int default_optimizer_threads(int local_ranks) {
  if (local_ranks < 1)
    throw std::invalid_argument("default_optimizer_threads: local_ranks is " + std::to_string(local_ranks) +
                                "; expected at least 1");
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores == 0)
    throw std::runtime_error("default_optimizer_threads: the number of cores of this node is unknown "
                             "(std::thread::hardware_concurrency() is 0); give the optimizer threads explicitly");
  return std::max(1, static_cast<int>(cores) / local_ranks);
}

int optimizer_threads(int configured, int local_ranks) {
  return configured > 0 ? configured : default_optimizer_threads(local_ranks);
}

CpuAdamw::CpuAdamw(int threads, CpuIsa isa) : pool_(threads), isa_(isa) {
  if (!cpu_supports(isa))
    throw std::invalid_argument(std::string("CpuAdamw: this CPU cannot run the ") + cpu_isa_name(isa) +
                                " path (detected: " + cpu_isa_name(detect_cpu_isa()) + ")");
}

void CpuAdamw::update(const AdamwTensors& t, const AdamwHyper& h, const DecayGeometry& decay) {
  update(&t, 1, h, decay);
}

void CpuAdamw::update(const AdamwTensors* pieces, std::size_t count, const AdamwHyper& h, const DecayGeometry& decay) {
  check_geometry(decay);
  // Where each piece starts in the pieces' concatenation.
  std::vector<std::int64_t> starts;
  starts.reserve(count + 1);
  std::int64_t total = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const AdamwTensors& t = pieces[i];
    check_tensors(t, h);
    starts.push_back(total);
    total += t.count;
  }
  starts.push_back(total);
  if (total == 0) return;
  // The coefficients in fp32, as the CPU reference (exec/cpu/cpu_ops.cpp) computes them.
  const AdamwCoefficients c{h.lr,
                            h.beta1,
                            1.0f - h.beta1,
                            h.beta2,
                            1.0f - h.beta2,
                            1.0f - std::pow(h.beta1, static_cast<float>(h.step)),
                            1.0f - std::pow(h.beta2, static_cast<float>(h.step)),
                            h.eps,
                            h.grad_scale};
  void (*kernel)(const AdamwSpan&, const AdamwCoefficients&) = detail::adamw_span_scalar;
  if (isa_ == CpuIsa::avx2) kernel = detail::adamw_span_avx2;
  if (isa_ == CpuIsa::avx512) kernel = detail::adamw_span_avx512;

  // Elements [i, end) of the pieces' concatenation.
  auto step_range = [&](std::int64_t i, std::int64_t end) {
    auto piece = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin()) - 1;
    while (i < end) {
      const AdamwTensors& t = pieces[piece];
      const std::int64_t piece_end = std::min(end, starts[piece + 1]);
      const AdamwSpan all{t.params,      t.grads,       t.grads_bf16, t.grads_fp16, t.exp_avg, t.exp_avg_sq,
                          t.params_half, t.half_format, t.count,      0.0f};
      std::int64_t k = i - starts[piece];  // within the piece
      const std::int64_t k_end = piece_end - starts[piece];
      while (k < k_end) {
        const DecayRun run = decay_run(decay, t.flat_base + k);
        const std::int64_t run_end = std::min(k_end, run.end - t.flat_base);
        AdamwSpan span = detail::sub_span(all, k, run_end - k);
        span.weight_decay = run.decays ? h.weight_decay : 0.0f;
        kernel(span, c);
        k = run_end;
      }
      i = piece_end;
      ++piece;
    }
  };
  // Chunks of the concatenation (eight a thread, whole multiples of kShareAlignment) that the threads take in turn
  // from a shared counter, not one fixed share each: the two ranks' AdamW threads, their main threads and NCCL's
  // proxy threads share the host, and a fixed share waits for its slowest thread. ResNet-101 at stage 3 with the
  // optimizer on the CPU, 2x H200, two runs of each in one call (bench/resnet/results/2026-11-29-h200x2/call19):
  // step 20.8 / 20.0 ms with fixed shares (CPU AdamW busy 9.4 / 8.4 ms), 18.3 / 17.6 ms with chunks (7.7 / 7.5 ms).
  // A chunk of 64-element multiples keeps each thread's streams long enough for the hardware prefetchers; the
  // update is elementwise, so the result is the same bit for bit however the chunks fall.
  const int threads = pool_.threads();
  const std::int64_t aligned_units = (total + kShareAlignment - 1) / kShareAlignment;
  const std::int64_t chunk =
      std::max<std::int64_t>(1, (aligned_units + 8 * threads - 1) / (8 * threads)) * kShareAlignment;
  const std::int64_t chunks = (total + chunk - 1) / chunk;
  std::atomic<std::int64_t> next{0};
  pool_.run([&](int) {
    for (std::int64_t j = next.fetch_add(1); j < chunks; j = next.fetch_add(1))
      step_range(j * chunk, std::min(total, (j + 1) * chunk));
  });
}

}  // namespace zeroplan::exec::offload
