// The CPU AdamW's AVX2 path (8 fp32 lanes), compiled with -mavx2 -mf16c (exec/offload/CMakeLists.txt) and
// called only when cpu_supports(CpuIsa::avx2). The fp16 copy uses F16C's conversion with round-to-nearest-even.
#include <immintrin.h>

#include <cstdint>

#include "exec/offload/cpu_adamw_simd.h"

namespace zeroplan::exec::offload::detail {
namespace {

struct Avx2 {
  using F = __m256;
  static constexpr int kWidth = 8;
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  // bf16 is the upper half of fp32: widen to 32 bits and shift into place.
  static F load_bf16(const std::uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // fp16 to fp32 is exact (F16C's VCVTPH2PS), as Eigen::half's conversion on the scalar path.
  static F load_fp16(const std::uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // Round to nearest even on the upper 16 bits (add 0x7FFF plus the kept lsb); a NaN is truncated and made quiet.
  static void store_bf16(std::uint16_t* p, F x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i upper = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(upper, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i quiet_nan = _mm256_or_si256(upper, _mm256_set1_epi32(0x0040));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i bits = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
    // Values are in [0, 0xFFFF], so the unsigned-saturating pack keeps them; it packs per 128-bit lane, and the
    // permute gathers lane 0's and lane 1's four results into the low 128 bits.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0b1000);
    store_half(p, _mm256_castsi256_si128(packed));
  }
  static void store_fp16(std::uint16_t* p, F x) {
    store_half(p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // As Avx512::store_half: non-temporal where aligned.
  static void store_half(std::uint16_t* p, __m128i bits) {
    if ((reinterpret_cast<std::uintptr_t>(p) & 15) == 0) _mm_stream_si128(reinterpret_cast<__m128i*>(p), bits);
    else _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bits);
  }
  static void fence() { _mm_sfence(); }
};

}  // namespace

void adamw_span_avx2(const AdamwSpan& span, const AdamwCoefficients& c) { adamw_span_vectorized<Avx2>(span, c); }

}  // namespace zeroplan::exec::offload::detail
