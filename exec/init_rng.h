// Counter-based parameter initialization shared by the CPU reference and the CUDA backend: element i of the
// flat buffer gets the same value on both, with no sequential RNG state (so the GPU fills 1.5B parameters in
// one kernel). splitmix64 (Steele, Lea, Flood 2014) hashes (seed, index); Box-Muller turns two uniforms into a
// standard normal.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ZEROPLAN_HD __host__ __device__
#else
#define ZEROPLAN_HD
#endif

namespace zeroplan::exec {

ZEROPLAN_HD inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A standard normal from (seed, index).
ZEROPLAN_HD inline float hash_normal(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t r = splitmix64(seed * 0x632BE59BD9B4E019ull ^ splitmix64(index));
  // two 24-bit uniforms in (0, 1]
  const float u1 = (static_cast<float>((r >> 40) & 0xFFFFFF) + 1.0f) * (1.0f / 16777216.0f);
  const float u2 = static_cast<float>((r >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// A uniform in [-1, 1) from (seed, index).
ZEROPLAN_HD inline float hash_uniform(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t r = splitmix64(seed * 0x632BE59BD9B4E019ull ^ splitmix64(index));
  return static_cast<float>((r >> 40) & 0xFFFFFF) * (2.0f / 16777216.0f) - 1.0f;
}

// Initializations, each with the tensor's spread (ParamTensor::init_std). GPT-2 (Radford et al. 2019; nanoGPT's
// _init_weights): weights N(0, 0.02), the two residual output projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm
// weights 1; transformers' Llama: every matrix N(0, 0.02); torchvision's ResNet: convolutions N(0, sqrt(2/fan_out))
// (kaiming_normal_, mode fan_out), BatchNorm weight 1 and bias 0, the fc layer U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// for weight and bias (nn.Linear's reset_parameters). The padded vocabulary rows are 0.
enum class InitKind : int { normal = 0, residual_normal = 1, zeros = 2, ones = 3, uniform = 4 };

ZEROPLAN_HD inline float init_value(InitKind kind, std::uint64_t seed, std::uint64_t index, float spread) {
  switch (kind) {
    case InitKind::normal:
    case InitKind::residual_normal: return spread * hash_normal(seed, index);
    case InitKind::zeros: return 0.0f;
    case InitKind::ones: return 1.0f;
    case InitKind::uniform: return spread * hash_uniform(seed, index);
  }
  return 0.0f;
}

}  // namespace zeroplan::exec
