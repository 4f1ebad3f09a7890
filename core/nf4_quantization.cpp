#include "core/nf4_quantization.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/parallel_ranges.h"

namespace zeroplan {

const std::array<float, 16>& nf4_code_values() {
  // bitsandbytes functional.py get_4bit_type("nf4") (the values of the QLoRA paper's appendix E, as fp32).
  static const std::array<float, 16> values = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
      0.7229568362236023f, 1.0f};
  return values;
}

namespace {

// torch.linspace(start, end, steps, dtype=float32) on the CPU (aten RangeFactoriesKernel.cpp linspace_kernel):
// the step in fp32, the first half counted from start and the second from end.
std::vector<float> linspace_f32(float start, float end, int steps) {
  std::vector<float> out(static_cast<std::size_t>(steps));
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i)
    out[static_cast<std::size_t>(i)] =
        i < halfway ? start + step * static_cast<float>(i) : end - step * static_cast<float>(steps - i - 1);
  return out;
}

std::array<float, 256> make_dynamic_map() {
  // _create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent i in 0..6, 2^i + 1
  // boundaries linspace(0.1, 1) in fp32, their pairwise means scaled by 10^(i-6), with both signs; no additional
  // items (2^(7-7) - 1 = 0); then 0 and 1; sorted. Tensor x Python float runs in fp32 in torch.
  std::vector<float> data;
  constexpr int max_exponent_bits = 7, non_sign_bits = 7;
  for (int i = 0; i < max_exponent_bits; ++i) {
    const int fraction_items = (1 << (i + non_sign_bits - max_exponent_bits)) + 1;
    const std::vector<float> boundaries = linspace_f32(0.1f, 1.0f, fraction_items);
    const float scale = static_cast<float>(std::pow(10.0, -(max_exponent_bits - 1) + i));
    std::vector<float> means;
    for (int j = 0; j + 1 < fraction_items; ++j)
      means.push_back((boundaries[static_cast<std::size_t>(j)] + boundaries[static_cast<std::size_t>(j + 1)]) / 2.0f);
    for (float m : means) data.push_back(scale * m);
    for (float m : means) data.push_back(-scale * m);
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() != 256) throw std::logic_error("bnb_dynamic_map: expected 256 values");
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

}  // namespace

const std::array<float, 256>& bnb_dynamic_map() {
  static const std::array<float, 256> code = make_dynamic_map();
  return code;
}

std::uint8_t nf4_quantize_normalized(float x) {
  // csrc/cuda/blockwise_quantization.cu dQuantizeNF4: the decision tree over the midpoints of the NF4 values.
  if (x > 0.03979014977812767f) {
    if (x > 0.3893125355243683f) {
      if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 0b1111 : 0b1110;
      return x > 0.5016634166240692f ? 0b1101 : 0b1100;
    }
    if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 0b1011 : 0b1010;
    return x > 0.1202552504837513f ? 0b1001 : 0b1000;
  }
  if (x > -0.33967943489551544f) {
    if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 0b0111 : 0b0110;
    return x > -0.23460740596055984f ? 0b0101 : 0b0100;
  }
  if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 0b0011 : 0b0010;
  return x > -0.8480964004993439f ? 0b0001 : 0b0000;
}

std::uint8_t dynamic_quantize_normalized(const std::array<float, 256>& code, float x) {
  // dQuantize<0> (blockwise_quantization.cu): a 7-step binary search from the middle, then the nearer of the two
  // neighbours by the midpoint (ties to the pivot).
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f;
  float val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = code[static_cast<std::size_t>(pivot)];
  }
  if (upper_pivot == 255) upper = code[255];
  if (lower_pivot == 0) lower = code[0];
  if (x > val) {
    const float midpoint = (upper + val) * 0.5f;
    return static_cast<std::uint8_t>(x > midpoint ? upper_pivot : pivot);
  }
  const float midpoint = (lower + val) * 0.5f;
  return static_cast<std::uint8_t>(x < midpoint ? lower_pivot : pivot);
}

namespace {

// max |x| over x[lo, hi): one block's first-level constant.
float block_absmax(const float* x, std::int64_t lo, std::int64_t hi) {
  float m = 0.0f;
  for (std::int64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Blocks of 64 a thread quantises at the least (1M values): below that, starting a thread costs more than it saves.
constexpr std::int64_t kMinBlocksPerThread = std::int64_t{1} << 14;

// Blocks [first_block, last_block) of x[0, n): each block's absmax, and its values' 4-bit codes. A block of 64
// starts at an even element, so it owns whole bytes of `codes`: blocks quantised on different threads never write
// the same byte.
void quantize_nf4_blocks(const float* x, std::int64_t n, std::int64_t first_block, std::int64_t last_block,
                         std::uint8_t* codes, float* absmax) {
  for (std::int64_t b = first_block; b < last_block; ++b) {
    const std::int64_t lo = b * kNf4BlockSize, hi = std::min(n, (b + 1) * kNf4BlockSize);
    const float m = block_absmax(x, lo, hi);
    absmax[b] = m;
    // kQuantizeBlockwise: one reciprocal per block, each value multiplied by it.
    const float inv = 1.0f / m;
    for (std::int64_t i = lo; i < hi; ++i) {
      const std::uint8_t q = nf4_quantize_normalized(x[i] * inv);
      std::uint8_t& byte = codes[i / 2];
      byte = static_cast<std::uint8_t>(i % 2 == 0 ? (q << 4) | (byte & 0x0f) : (byte & 0xf0) | q);
    }
  }
}

}  // namespace

std::vector<float> nf4_block_absmax(const float* x, std::int64_t n) {
  std::vector<float> absmax(static_cast<std::size_t>(nf4_blocks(n)));
  for (std::int64_t b = 0; b < nf4_blocks(n); ++b)
    absmax[static_cast<std::size_t>(b)] = block_absmax(x, b * kNf4BlockSize, std::min(n, (b + 1) * kNf4BlockSize));
  return absmax;
}

Nf4Tensor quantize_nf4(const float* x, std::int64_t n, int threads) {
  if (n < 1) throw std::invalid_argument("quantize_nf4: expected at least one element");
  Nf4Tensor t;
  t.elements = n;
  std::vector<float> absmax(static_cast<std::size_t>(nf4_blocks(n)));
  t.codes.assign(static_cast<std::size_t>((n + 1) / 2), 0);
  for_each_range(nf4_blocks(n), threads, kMinBlocksPerThread, [&](std::int64_t first, std::int64_t last) {
    quantize_nf4_blocks(x, n, first, last, t.codes.data(), absmax.data());
  });
  // compress_statistics: offset = absmax.mean(), then quantize_blockwise(absmax - offset, blocksize=256). One
  // sixty-fourth of the values, on one thread: the mean's summation order stays the same for any thread count.
  double sum = 0.0;
  for (float a : absmax) sum += a;
  t.offset = static_cast<float>(sum / static_cast<double>(absmax.size()));
  const std::array<float, 256>& code = bnb_dynamic_map();
  const std::int64_t m = static_cast<std::int64_t>(absmax.size());
  t.absmax_codes.resize(absmax.size());
  for (std::int64_t b = 0; b * kNf4StatisticsBlockSize < m; ++b) {
    const std::int64_t lo = b * kNf4StatisticsBlockSize, hi = std::min(m, lo + kNf4StatisticsBlockSize);
    float scale = 0.0f;
    for (std::int64_t i = lo; i < hi; ++i) scale = std::max(scale, std::fabs(absmax[static_cast<std::size_t>(i)] - t.offset));
    t.absmax_scales.push_back(scale);
    const float inv = 1.0f / scale;
    for (std::int64_t i = lo; i < hi; ++i)
      t.absmax_codes[static_cast<std::size_t>(i)] =
          dynamic_quantize_normalized(code, (absmax[static_cast<std::size_t>(i)] - t.offset) * inv);
  }
  return t;
}

std::vector<float> Nf4Tensor::block_absmax() const {
  const std::array<float, 256>& code = bnb_dynamic_map();
  std::vector<float> out(absmax_codes.size());
  for (std::size_t i = 0; i < absmax_codes.size(); ++i)
    out[i] = code[absmax_codes[i]] * absmax_scales[i / static_cast<std::size_t>(kNf4StatisticsBlockSize)] + offset;
  return out;
}

void dequantize_nf4_range(const Nf4Tensor& tensor, std::int64_t first, std::int64_t count, float* out) {
  if (first < 0 || count < 0 || first + count > tensor.elements)
    throw std::out_of_range("dequantize_nf4_range: elements outside the tensor");
  const std::array<float, 16>& nf4 = nf4_code_values();
  const std::array<float, 256>& code = bnb_dynamic_map();
  std::int64_t block = -1;
  float absmax = 0.0f;
  for (std::int64_t i = first; i < first + count; ++i) {
    if (i / kNf4BlockSize != block) {
      block = i / kNf4BlockSize;
      const auto b = static_cast<std::size_t>(block);
      absmax = code[tensor.absmax_codes[b]] * tensor.absmax_scales[b / static_cast<std::size_t>(kNf4StatisticsBlockSize)] +
               tensor.offset;
    }
    out[i - first] = nf4[tensor.code(i)] * absmax;
  }
}

void dequantize_nf4(const Nf4Tensor& tensor, float* out) { dequantize_nf4_range(tensor, 0, tensor.elements, out); }

std::int64_t nf4_module_tensors_bytes(const std::vector<std::int64_t>& module_elements) {
  std::int64_t b = 0;
  for (std::int64_t n : module_elements) b += nf4_tensor_bytes(n);
  return b;
}

Nf4ModuleTensors quantize_nf4_modules(const float* x, const std::vector<std::int64_t>& module_elements, int threads) {
  if (module_elements.empty()) throw std::invalid_argument("quantize_nf4_modules: expected at least one module");
  // Each module is its own quantize_4bit call (own blocks, own offset and 256-block groups), so a module boundary
  // needs no alignment to 64: a module whose size is not a multiple of 64 ends in a partial block of its own, as
  // bitsandbytes' kQuantizeBlockwise ends a tensor.
  Nf4ModuleTensors t;
  std::int64_t first = 0;
  for (std::int64_t n : module_elements) {
    t.modules.push_back(quantize_nf4(x + first, n, threads));
    first += n;
  }
  return t;
}

void dequantize_nf4(const Nf4ModuleTensors& tensors, float* out) {
  for (const Nf4Tensor& m : tensors.modules) {
    dequantize_nf4(m, out);
    out += m.elements;
  }
}

}  // namespace zeroplan
