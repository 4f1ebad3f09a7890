// The CPU AdamW of ZeRO-Offload (exec/offload/cpu_adamw.h) against a plain scalar AdamW written here: every
// instruction-set path this CPU runs (the AVX-512 path skips where the CPU lacks AVX-512F), thread counts 1, 2, 3
// and 7, every tail length up to two AVX-512 vectors plus one, misaligned starts, fp32 and bf16 gradients, bf16,
// fp16 and no 16-bit copy, with and without weight decay, over several steps: within 1 ulp per element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exec/cpu/cpu_ops.h"
#include "exec/offload/cpu_adamw.h"

namespace zeroplan::exec::offload {
namespace {

using i64 = std::int64_t;

// ---- the reference: AdamW as torch.optim.AdamW documents it, in the order of exec/cpu/cpu_ops.cpp ----

struct Hyper {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  int step;
};

void reference_adamw(float* p, const float* grads, float* m, float* v, const std::vector<bool>& decays, i64 n,
                     const Hyper& h) {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.step));
  for (i64 i = 0; i < n; ++i) {
    const float g = grads[i] * h.grad_scale;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    const float mhat = m[i] / bc1;
    const float vhat = v[i] / bc2;
    const float wd = decays[static_cast<std::size_t>(i)] ? h.weight_decay : 0.0f;
    p[i] = p[i] - h.lr * (mhat / (std::sqrt(vhat) + h.eps) + wd * p[i]);
  }
}

// Round to nearest, ties to even, found by comparing x with the two 16-bit neighbours around it in double
// precision: `value(bits)` decodes a non-negative 16-bit pattern; patterns are ordered like their values, and the
// pattern after the largest finite one (the infinity) counts as the next power of two, as IEEE 754 rounds.
template <class Decode>
std::uint16_t round_to_16(float x, std::uint16_t max_finite, Decode value) {
  const double a = std::fabs(static_cast<double>(x));
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  std::uint16_t lo = 0, hi = max_finite;  // largest pattern with value <= a, by bisection
  if (value(max_finite) <= a) {
    lo = max_finite;
  } else {
    while (hi - lo > 1) {
      const std::uint16_t mid = static_cast<std::uint16_t>((lo + hi) / 2);
      (value(mid) <= a ? lo : hi) = mid;
    }
  }
  const std::uint16_t up = static_cast<std::uint16_t>(lo + 1);
  const double below = a - value(lo), above = value(up) - a;
  const bool take_up = above < below || (above == below && (up & 1) == 0);
  return static_cast<std::uint16_t>(sign | (take_up ? up : lo));
}

double bf16_value(std::uint16_t bits) {  // also 0x7F80 -> 2^128 (past the largest finite)
  if (bits == 0x7F80) return std::ldexp(1.0, 128);
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

double fp16_value(std::uint16_t bits) {  // IEEE binary16: 5 exponent bits (bias 15), 10 fraction bits
  const int exponent = bits >> 10, fraction = bits & 0x3FF;
  if (exponent == 0) return std::ldexp(fraction, -24);
  return std::ldexp(1024 + fraction, exponent - 25);  // 0x7C00 -> 2^16 (past 65504)
}

std::uint16_t reference_bf16(float x) { return round_to_16(x, 0x7F7F, bf16_value); }
std::uint16_t reference_fp16(float x) { return round_to_16(x, 0x7BFF, fp16_value); }

float bf16_to_float(std::uint16_t bits) { return static_cast<float>(bf16_value(bits)); }
float fp16_to_float(std::uint16_t bits) {  // fp16_value reads magnitudes; the sign is bit 15
  const float magnitude = static_cast<float>(fp16_value(bits & 0x7FFF));
  return bits & 0x8000 ? -magnitude : magnitude;
}

// Distance in units in the last place between two values of one sign-magnitude format (+0 and -0 are 0 apart).
i64 ulps_apart(std::uint64_t a, std::uint64_t b, int bits) {
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  auto ordered = [&](std::uint64_t x) { return x & sign ? -static_cast<i64>(x & ~sign) : static_cast<i64>(x); };
  return std::llabs(ordered(a) - ordered(b));
}
i64 ulps_apart(float a, float b) {
  std::uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ulps_apart(ua, ub, 32);
}

// ---- buffers with a chosen misalignment ----

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <class T>
struct Buffer {  // n elements starting `offset` elements past a 64-byte boundary
  std::unique_ptr<T, FreeDeleter> storage;
  T* data;
  Buffer(i64 n, i64 offset) {
    const std::size_t bytes = (static_cast<std::size_t>(n + offset) * sizeof(T) + 127) / 64 * 64;
    storage.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (!storage) throw std::bad_alloc();
    data = storage.get() + offset;
  }
};

// ---- one case: the library and the reference on the same random inputs, `steps` updates ----

enum class Grads { fp32, bf16, fp16 };
enum class Copy { none, bf16, fp16 };

struct Case {
  CpuIsa isa;
  int threads;
  i64 n, offset;
  Grads grads;
  Copy copy;
  float weight_decay;
  int steps;
  DecayGeometry decay{};
  i64 flat_base = 0;
};

std::string describe(const Case& c) {
  return std::string(cpu_isa_name(c.isa)) + " threads=" + std::to_string(c.threads) + " n=" + std::to_string(c.n) +
         " offset=" + std::to_string(c.offset) + " grads=" + (c.grads == Grads::fp32 ? "fp32" : c.grads == Grads::bf16 ? "bf16" : "fp16") +
         " copy=" + (c.copy == Copy::none ? "none" : c.copy == Copy::bf16 ? "bf16" : "fp16") +
         " wd=" + std::to_string(c.weight_decay);
}

// Values over many binades: p from 2^-20 (fp16 subnormal) to 2^17 (past fp16's largest), both signs.
float spread(std::mt19937& rng, int lo_exp, int hi_exp) {
  std::uniform_int_distribution<int> exponent(lo_exp, hi_exp);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::bernoulli_distribution negative(0.5);
  const float x = std::ldexp(mantissa(rng), exponent(rng));
  return negative(rng) ? -x : x;
}

// Which elements decay under d, built block by block (not by the library's index arithmetic).
std::vector<bool> decay_mask(const DecayGeometry& d, i64 flat_base, i64 n) {
  std::vector<bool> flat;
  const i64 total = flat_base + n;
  while (static_cast<i64>(flat.size()) < std::min(total, d.blocks_begin)) flat.push_back(true);
  while (static_cast<i64>(flat.size()) < std::min(total, d.blocks_end)) {
    for (i64 j = 0; j < d.block_stride && static_cast<i64>(flat.size()) < d.blocks_end; ++j)
      flat.push_back(j < d.block_decay);
  }
  while (static_cast<i64>(flat.size()) < total) flat.push_back(false);
  return std::vector<bool>(flat.begin() + flat_base, flat.begin() + total);
}

void run_case(CpuAdamw& adamw, const Case& c, std::uint32_t seed) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Buffer<float> p(c.n, c.offset), m(c.n, c.offset), v(c.n, c.offset), g(c.n, c.offset);
  Buffer<std::uint16_t> g16(c.n, c.offset), half(c.n, c.offset);
  std::vector<float> ref_p(c.n), ref_m(c.n), ref_v(c.n), ref_g(c.n);
  for (i64 i = 0; i < c.n; ++i) {
    p.data[i] = ref_p[i] = spread(rng, -20, 17);
    m.data[i] = ref_m[i] = 0.1f * normal(rng);
    v.data[i] = ref_v[i] = std::fabs(spread(rng, -12, 2));
  }
  const std::vector<bool> decays = decay_mask(c.decay, c.flat_base, c.n);
  for (int step = 1; step <= c.steps; ++step) {
    for (i64 i = 0; i < c.n; ++i) {
      const float grad = spread(rng, -10, 5);
      if (c.grads == Grads::fp32) {
        g.data[i] = ref_g[i] = grad;
      } else if (c.grads == Grads::bf16) {
        g16.data[i] = reference_bf16(grad);
        ref_g[i] = bf16_to_float(g16.data[i]);
      } else {  // fp16 gradients (loss-scaled, so within fp16's range)
        g16.data[i] = reference_fp16(grad);
        ref_g[i] = fp16_to_float(g16.data[i]);
      }
    }
    const Hyper h{1e-3f * static_cast<float>(step), 0.9f, 0.95f, 1e-8f, c.weight_decay, 1.0f / 1024.0f, step};
    reference_adamw(ref_p.data(), ref_g.data(), ref_m.data(), ref_v.data(), decays, c.n, h);

    AdamwTensors t;
    t.params = p.data;
    if (c.grads == Grads::fp32) {
      t.grads = g.data;
    } else if (c.grads == Grads::bf16) {
      t.grads_bf16 = g16.data;
    } else {
      t.grads_fp16 = g16.data;
    }
    t.exp_avg = m.data;
    t.exp_avg_sq = v.data;
    t.params_half = c.copy == Copy::none ? nullptr : half.data;
    t.half_format = c.copy == Copy::fp16 ? HalfFormat::fp16 : HalfFormat::bf16;
    t.count = c.n;
    t.flat_base = c.flat_base;
    AdamwHyper hyper;
    hyper.lr = h.lr;
    hyper.beta1 = h.beta1;
    hyper.beta2 = h.beta2;
    hyper.eps = h.eps;
    hyper.weight_decay = h.weight_decay;
    hyper.grad_scale = h.grad_scale;
    hyper.step = step;
    adamw.update(t, hyper, c.decay);

    for (i64 i = 0; i < c.n; ++i) {
      ASSERT_LE(ulps_apart(p.data[i], ref_p[i]), 1) << "p[" << i << "] step " << step << ": " << p.data[i]
                                                     << " vs " << ref_p[i];
      ASSERT_LE(ulps_apart(m.data[i], ref_m[i]), 1) << "m[" << i << "] step " << step;
      ASSERT_LE(ulps_apart(v.data[i], ref_v[i]), 1) << "v[" << i << "] step " << step;
      if (c.copy != Copy::none) {
        const std::uint16_t want = c.copy == Copy::bf16 ? reference_bf16(ref_p[i]) : reference_fp16(ref_p[i]);
        ASSERT_LE(ulps_apart(half.data[i], want, 16), 1)
            << "16-bit copy [" << i << "] step " << step << " of " << p.data[i] << ": 0x" << std::hex
            << half.data[i] << " vs 0x" << want;
      }
    }
  }
}

std::vector<CpuIsa> runnable_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512})
    if (cpu_supports(isa)) isas.push_back(isa);
  return isas;
}

// ---- the tests ----

class CpuAdamwPath : public ::testing::TestWithParam<std::tuple<CpuIsa, int>> {
 protected:
  void SetUp() override {
    if (!cpu_supports(std::get<0>(GetParam())))
      GTEST_SKIP() << "this CPU cannot run the " << cpu_isa_name(std::get<0>(GetParam())) << " path";
  }
};

// Every length 0..33 (two AVX-512 vectors and one) at four starting offsets, each gradient type, copy format
// and weight decay somewhere in the sweep, three steps each.
TEST_P(CpuAdamwPath, EveryTailLengthAndOffsetMatchesTheScalarReference) {
  const auto [isa, threads] = GetParam();
  CpuAdamw adamw(threads, isa);
  std::uint32_t seed = 1;
  for (i64 offset : {0, 1, 5, 13}) {
    for (i64 n = 0; n <= 2 * 16 + 1; ++n) {
      const Grads grads = static_cast<Grads>((n + offset) % 3);
      const Copy copy = static_cast<Copy>(n % 3);
      const float weight_decay = (n + offset) % 2 ? 0.1f : 0.0f;
      run_case(adamw, {isa, threads, n, offset, grads, copy, weight_decay, 3}, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

// Lengths that give each thread a share and leave ragged ends: the results do not depend on the split.
TEST_P(CpuAdamwPath, LongArraysSplitAcrossThreadsMatchTheScalarReference) {
  const auto [isa, threads] = GetParam();
  CpuAdamw adamw(threads, isa);
  std::uint32_t seed = 100;
  for (i64 n : {i64{64} * 7 + 5, i64{4099}, i64{100003}}) {
    for (Copy copy : {Copy::bf16, Copy::fp16}) {
      for (float weight_decay : {0.0f, 0.01f}) {
        run_case(adamw, {isa, threads, n, 3, Grads::fp32, copy, weight_decay, 2}, seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Weight decay by position (the layout's embeddings / blocks / final LayerNorm geometry), on a piece of the flat
// buffer that starts inside a block.
TEST_P(CpuAdamwPath, WeightDecayFollowsTheLayoutGeometry) {
  const auto [isa, threads] = GetParam();
  CpuAdamw adamw(threads, isa);
  DecayGeometry decay;
  decay.blocks_begin = 100;
  decay.block_stride = 300;
  decay.block_decay = 203;
  decay.blocks_end = 100 + 13 * 300;
  Case c{isa, threads, 5000, 0, Grads::fp32, Copy::bf16, 0.1f, 2, decay, 37};
  run_case(adamw, c, 7);
}

INSTANTIATE_TEST_SUITE_P(IsaAndThreads, CpuAdamwPath,
                         ::testing::Combine(::testing::Values(CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512),
                                            ::testing::Values(1, 2, 3, 7)),
                         [](const auto& info) {
                           return std::string(cpu_isa_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "threads";
                         });

// Rounding of the 16-bit copy at its edges: ties to even, the largest finite values, the overflow threshold,
// fp16 subnormals and signed zero. lr = 0 keeps p as given, so the copy is the rounding of these exact values.
TEST(CpuAdamw, SixteenBitCopyRoundsToNearestEven) {
  const std::vector<float> values = {
      0.0f, -0.0f, 1.0f, 1.0f + 0x1p-8f /* bf16 tie, to even (down) */, 1.0f + 3 * 0x1p-8f /* tie, up */,
      1.0f + 0x1p-11f /* fp16 tie */, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f /* fp16 -> inf */,
      -65520.0f, 0x1p-24f /* fp16 smallest subnormal */, 0x1p-25f /* tie to 0 */, 3 * 0x1p-25f /* tie, up */,
      0x1p-14f, 3.3895314e38f /* bf16 largest finite */, 3.4028235e38f /* rounds to bf16 inf */, -1.5e-40f};
  const i64 n = static_cast<i64>(values.size());
  for (CpuIsa isa : runnable_isas()) {
    for (HalfFormat format : {HalfFormat::bf16, HalfFormat::fp16}) {
      SCOPED_TRACE(cpu_isa_name(isa));
      CpuAdamw adamw(2, isa);
      std::vector<float> p = values, g(values.size(), 0.5f), m(values.size(), 0.0f), v(values.size(), 1.0f);
      std::vector<std::uint16_t> half(values.size());
      AdamwTensors t;
      t.params = p.data();
      t.grads = g.data();
      t.exp_avg = m.data();
      t.exp_avg_sq = v.data();
      t.params_half = half.data();
      t.half_format = format;
      t.count = n;
      AdamwHyper hyper;
      hyper.lr = 0.0f;
      adamw.update(t, hyper);
      for (i64 i = 0; i < n; ++i) {
        const std::uint16_t want = format == HalfFormat::bf16 ? reference_bf16(values[i]) : reference_fp16(values[i]);
        EXPECT_EQ(half[i], want) << (format == HalfFormat::bf16 ? "bf16" : "fp16") << " of " << values[i];
        EXPECT_EQ(std::memcmp(&p[i], &values[i], 4), 0) << "lr = 0 changed p[" << i << "]";
      }
    }
  }
}

// The offloaded update reproduces the CPU backend's AdamW (exec/cpu/cpu_ops.cpp) bit for bit, so a run with
// the optimizer on the host gives the same parameters as the same run without offload on the CPU backend.
TEST(CpuAdamw, MatchesTheCpuBackendBitForBit) {
  const i64 n = 10007;
  std::mt19937 rng(3);
  std::vector<float> p(n), g(n), m(n), v(n);
  for (i64 i = 0; i < n; ++i) {
    p[i] = spread(rng, -8, 2);
    g[i] = spread(rng, -8, 4);
    m[i] = spread(rng, -12, -2);
    v[i] = std::fabs(spread(rng, -16, -2));
  }
  std::vector<float> p2 = p, m2 = m, v2 = v;
  std::unique_ptr<bool[]> decays(new bool[n]);
  for (i64 i = 0; i < n; ++i) decays[i] = true;
  for (CpuIsa isa : runnable_isas()) {
    CpuAdamw adamw(3, isa);
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> p1 = p, m1 = m, v1 = v;
      AdamwTensors t;
      t.params = p1.data();
      t.grads = g.data();
      t.exp_avg = m1.data();
      t.exp_avg_sq = v1.data();
      t.count = n;
      AdamwHyper hyper;
      hyper.lr = 3e-4f;
      hyper.weight_decay = 0.1f;
      hyper.grad_scale = 0.25f;
      hyper.step = step;
      adamw.update(t, hyper);
      std::vector<float> p0 = p, m0 = m, v0 = v;
      cpu::adamw(p0.data(), g.data(), m0.data(), v0.data(), decays.get(), n, hyper.lr, hyper.beta1, hyper.beta2,
                 hyper.eps, hyper.weight_decay, hyper.grad_scale, step);
      EXPECT_EQ(std::memcmp(p0.data(), p1.data(), n * 4), 0) << cpu_isa_name(isa) << " step " << step;
      EXPECT_EQ(std::memcmp(m0.data(), m1.data(), n * 4), 0) << cpu_isa_name(isa) << " step " << step;
      EXPECT_EQ(std::memcmp(v0.data(), v1.data(), n * 4), 0) << cpu_isa_name(isa) << " step " << step;
    }
  }
}

// Updating pieces as they arrive (each with its flat_base) gives the bits of one update over the whole range.
TEST(CpuAdamw, PiecesGiveTheWholeRangesResult) {
  const i64 n = 3000;
  DecayGeometry decay;
  decay.blocks_begin = 50;
  decay.block_stride = 700;
  decay.block_decay = 500;
  decay.blocks_end = 50 + 4 * 700;
  std::mt19937 rng(11);
  std::vector<float> p(n), g(n), m(n), v(n);
  for (i64 i = 0; i < n; ++i) {
    p[i] = spread(rng, -6, 1);
    g[i] = spread(rng, -6, 1);
    v[i] = std::fabs(spread(rng, -10, -2));
  }
  std::vector<float> p_whole = p, m_whole = m, v_whole = v, p_pieces = p, m_pieces = m, v_pieces = v;
  std::vector<std::uint16_t> h_whole(n), h_pieces(n);
  CpuAdamw adamw(2);
  AdamwHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.05f;
  auto update = [&](float* pp, float* mm, float* vv, std::uint16_t* hh, i64 begin, i64 count) {
    AdamwTensors t;
    t.params = pp + begin;
    t.grads = g.data() + begin;
    t.exp_avg = mm + begin;
    t.exp_avg_sq = vv + begin;
    t.params_half = hh + begin;
    t.count = count;
    t.flat_base = begin;
    adamw.update(t, hyper, decay);
  };
  update(p_whole.data(), m_whole.data(), v_whole.data(), h_whole.data(), 0, n);
  const std::vector<i64> bounds = {0, 333, 1000, 2001, 2999, n};
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k)
    update(p_pieces.data(), m_pieces.data(), v_pieces.data(), h_pieces.data(), bounds[k], bounds[k + 1] - bounds[k]);
  EXPECT_EQ(p_whole, p_pieces);
  EXPECT_EQ(m_whole, m_pieces);
  EXPECT_EQ(v_whole, v_pieces);
  EXPECT_EQ(h_whole, h_pieces);
}

// One call over several pieces (a stage-3 partition's chunks: separate arrays, flat bases that jump, one empty,
// lengths that leave threads' shares straddling pieces) equals one call per piece, bit for bit, on every path and
// thread count.
TEST(CpuAdamw, OneCallOverSeveralPiecesEqualsOneCallEach) {
  DecayGeometry decay;
  decay.blocks_begin = 40;
  decay.block_stride = 900;
  decay.block_decay = 610;
  decay.blocks_end = 40 + 20 * 900;
  const std::vector<i64> counts = {1, 700, 0, 64, 4099, 13, 2500};
  const std::vector<i64> flat = {0, 37, 1000, 1000, 5000, 9999, 12000};
  std::mt19937 rng(21);
  struct Arrays {
    std::vector<float> p, g, m, v;
    std::vector<std::uint16_t> h;
  };
  std::vector<Arrays> start(counts.size());
  for (std::size_t k = 0; k < counts.size(); ++k) {
    Arrays& a = start[k];
    for (i64 i = 0; i < counts[k]; ++i) {
      a.p.push_back(spread(rng, -6, 1));
      a.g.push_back(spread(rng, -6, 1));
      a.m.push_back(spread(rng, -8, -1));
      a.v.push_back(std::fabs(spread(rng, -10, -2)));
    }
    a.h.assign(static_cast<std::size_t>(counts[k]), 0);
  }
  AdamwHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.05f;
  hyper.step = 3;
  float empty[1] = {0.0f};  // the empty piece's arrays: set, not null
  std::uint16_t empty16[1] = {0};
  auto tensors = [&](Arrays& a, std::size_t k) {
    AdamwTensors t;
    const bool none = counts[k] == 0;
    t.params = none ? empty : a.p.data();
    t.grads = none ? empty : a.g.data();
    t.exp_avg = none ? empty : a.m.data();
    t.exp_avg_sq = none ? empty : a.v.data();
    t.params_half = none ? empty16 : a.h.data();
    t.half_format = HalfFormat::fp16;
    t.count = counts[k];
    t.flat_base = flat[k];
    return t;
  };
  for (CpuIsa isa : runnable_isas())
    for (int threads : {1, 3, 7}) {
      CpuAdamw adamw(threads, isa);
      std::vector<Arrays> each = start, together = start;
      std::vector<AdamwTensors> batch;
      for (std::size_t k = 0; k < counts.size(); ++k) {
        adamw.update(tensors(each[k], k), hyper, decay);
        batch.push_back(tensors(together[k], k));
      }
      adamw.update(batch.data(), batch.size(), hyper, decay);
      for (std::size_t k = 0; k < counts.size(); ++k) {
        const std::string where = std::string(cpu_isa_name(isa)) + ", " + std::to_string(threads) + " threads, piece " +
                                  std::to_string(k);
        EXPECT_EQ(each[k].p, together[k].p) << where;
        EXPECT_EQ(each[k].m, together[k].m) << where;
        EXPECT_EQ(each[k].v, together[k].v) << where;
        EXPECT_EQ(each[k].h, together[k].h) << where;
      }
    }
}

TEST(CpuAdamw, RefusesBadArguments) {
  EXPECT_THROW(CpuAdamw(0), std::invalid_argument);
  if (!cpu_supports(CpuIsa::avx512)) {
    try {
      CpuAdamw adamw(1, CpuIsa::avx512);
      FAIL() << "an AVX-512 path on a CPU without AVX-512F was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("avx512"), std::string::npos) << e.what();
    }
  }
  CpuAdamw adamw(1, CpuIsa::scalar);
  float p[4] = {}, g[4] = {}, m[4] = {}, v[4] = {};
  std::uint16_t g16[4] = {};
  AdamwTensors t;
  t.params = p;
  t.grads = g;
  t.exp_avg = m;
  t.exp_avg_sq = v;
  t.count = 4;
  AdamwHyper hyper;
  EXPECT_NO_THROW(adamw.update(t, hyper));
  AdamwTensors both = t;
  both.grads_bf16 = g16;
  EXPECT_THROW(adamw.update(both, hyper), std::invalid_argument);
  AdamwTensors neither = t;
  neither.grads = nullptr;
  EXPECT_THROW(adamw.update(neither, hyper), std::invalid_argument);
  AdamwTensors no_moment = t;
  no_moment.exp_avg_sq = nullptr;
  EXPECT_THROW(adamw.update(no_moment, hyper), std::invalid_argument);
  AdamwTensors negative = t;
  negative.count = -1;
  EXPECT_THROW(adamw.update(negative, hyper), std::invalid_argument);
  AdamwHyper step0 = hyper;
  step0.step = 0;
  EXPECT_THROW(adamw.update(t, step0), std::invalid_argument);
  DecayGeometry no_stride;
  no_stride.blocks_begin = 0;
  no_stride.blocks_end = 10;
  EXPECT_THROW(adamw.update(t, hyper, no_stride), std::invalid_argument);
}

TEST(CpuAdamw, DefaultThreadsDivideTheNodesCoresAmongItsRanks) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  ASSERT_GT(cores, 0);
  EXPECT_EQ(default_optimizer_threads(1), cores);
  EXPECT_EQ(default_optimizer_threads(2), std::max(1, cores / 2));
  EXPECT_EQ(default_optimizer_threads(cores + 1), 1);
  EXPECT_THROW(default_optimizer_threads(0), std::invalid_argument);
}

}  // namespace
}  // namespace zeroplan::exec::offload
