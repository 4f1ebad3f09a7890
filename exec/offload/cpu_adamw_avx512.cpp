// The CPU AdamW's AVX-512 path (16 fp32 lanes, AVX-512F only), compiled with -mavx512f
// (exec/offload/CMakeLists.txt) and called only when cpu_supports(CpuIsa::avx512). The fp16 copy uses
// AVX-512F's vcvtps2ph with round-to-nearest-even.
#include <immintrin.h>

#include <cstdint>

#include "exec/offload/cpu_adamw_simd.h"

namespace zeroplan::exec::offload::detail {
namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kWidth = 16;
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F load_bf16(const std::uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  // fp16 to fp32 is exact (AVX-512F's VCVTPH2PS), as Eigen::half's conversion on the scalar path.
  static F load_fp16(const std::uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // As Avx2::store_bf16; vpmovdw (AVX-512F) narrows the 32-bit results, all in [0, 0xFFFF], to 16 bits.
  static void store_bf16(std::uint16_t* p, F x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i upper = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(upper, _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __m512i quiet_nan = _mm512_or_si512(upper, _mm512_set1_epi32(0x0040));
    const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i bits = _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
    store_half(p, _mm512_cvtepi32_epi16(bits));
  }
  static void store_fp16(std::uint16_t* p, F x) {
    store_half(p, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // The 16-bit copy is written and not read again here (the host-to-device copy reads it): a non-temporal store
  // skips the read of the line a cached store would make first (cpu_adamw_simd.h says what it saves).
  static void store_half(std::uint16_t* p, __m256i bits) {
    if ((reinterpret_cast<std::uintptr_t>(p) & 31) == 0) _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bits);
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits);
  }
  static void fence() { _mm_sfence(); }
};

}  // namespace

void adamw_span_avx512(const AdamwSpan& span, const AdamwCoefficients& c) { adamw_span_vectorized<Avx512>(span, c); }

}  // namespace zeroplan::exec::offload::detail
