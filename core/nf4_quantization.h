// bitsandbytes' NF4 with double quantisation (QLoRA, Dettmers et al. 2023, arXiv 2305.14314), as
// bitsandbytes 0.50's functional.py quantize_4bit(x, blocksize=64, compress_statistics=True, quant_type="nf4")
// builds it on the GPU, and its dequantize_4bit:
// - 4-bit codes: per block of 64 values the absmax (max |x|, fp32); each value times 1/absmax is mapped to one of
//   the 16 NF4 values by the decision tree of csrc/cuda/blockwise_quantization.cu dQuantizeNF4 (thresholds at the
//   midpoints of the code values); two codes per byte, the first element of the pair in the high nibble
//   (kQuantizeBlockwise: qvals[j] = dQuantizeNF4(vals[2j]) << 4 | dQuantizeNF4(vals[2j+1])).
// - Double quantisation of the absmax constants (compress_statistics): offset = absmax.mean(); absmax - offset is
//   quantised by quantize_blockwise(blocksize=256) against bitsandbytes' 8-bit dynamic map (_create_dynamic_map
//   signed, 7 exponent bits): one fp32 absmax per 256 constants (state2.absmax) and one 8-bit code per constant,
//   the code picked by dQuantize<0>'s binary search with midpoint rounding.
// - Dequantisation: absmax = code[q] * state2.absmax[block] + offset (dequantize_blockwise, then + offset), each
//   value = NF4[nibble] * absmax (kDequantizeBlockwise / dDequantizeNF4), in fp32 here (the executor's dtype).
// No CUDA: the CPU executor holds a frozen base this way (--quantize-base nf4) and dequantises in its matmul path.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace zeroplan {

constexpr std::int64_t kNf4BlockSize = 64;              // quantize_4bit's blocksize (QLoRA's)
constexpr std::int64_t kNf4StatisticsBlockSize = 256;   // the nested quantize_blockwise's blocksize

// The 16 NF4 values (bitsandbytes functional.py get_4bit_type("nf4"), the QLoRA paper's appendix E), code 0..15.
const std::array<float, 16>& nf4_code_values();
// bitsandbytes' 8-bit signed dynamic map (functional.py _create_dynamic_map(signed=True, max_exponent_bits=7,
// total_bits=8)): 256 values, sorted, fp32.
const std::array<float, 256>& bnb_dynamic_map();

// The NF4 code of a value already divided by its block's absmax (dQuantizeNF4's tree; NaN gives 0, as there).
std::uint8_t nf4_quantize_normalized(float x);
// The dynamic-map index of a value already divided by its block's absmax (dQuantize<0>, no stochastic rounding).
std::uint8_t dynamic_quantize_normalized(const std::array<float, 256>& code, float x);

// The sizes of an n-element tensor's quantisation, known before its values: the blocks of 64 (one absmax code each),
// the blocks of 256 constants (one fp32 scale each) and the bytes Nf4Tensor::bytes() counts (packed codes, absmax
// codes, scales and the offset). The executors allocate the device copy from these (exec/activation_accounting.h).
constexpr std::int64_t nf4_blocks(std::int64_t n) { return (n + kNf4BlockSize - 1) / kNf4BlockSize; }
constexpr std::int64_t nf4_statistics_blocks(std::int64_t n) {
  return (nf4_blocks(n) + kNf4StatisticsBlockSize - 1) / kNf4StatisticsBlockSize;
}
constexpr std::int64_t nf4_tensor_bytes(std::int64_t n) {
  return (n + 1) / 2 + nf4_blocks(n) + 4 * nf4_statistics_blocks(n) + 4;
}

// One tensor as bitsandbytes' Params4bit holds it with compress_statistics: the packed codes and the quant_state.
struct Nf4Tensor {
  std::int64_t elements = 0;
  std::vector<std::uint8_t> codes;         // ceil(n / 2) bytes, element 2i in the high nibble
  std::vector<std::uint8_t> absmax_codes;  // one per block of 64 (quant_state.absmax, uint8)
  std::vector<float> absmax_scales;        // one per 256 constants (quant_state.state2.absmax)
  float offset = 0.0f;                     // quant_state.offset

  std::int64_t blocks() const { return static_cast<std::int64_t>(absmax_codes.size()); }
  // The code of element i (0..15).
  std::uint8_t code(std::int64_t i) const {
    const std::uint8_t byte = codes[static_cast<std::size_t>(i / 2)];
    return i % 2 == 0 ? static_cast<std::uint8_t>(byte >> 4) : static_cast<std::uint8_t>(byte & 0x0f);
  }
  // The absmax constants as dequantisation reads them: code[q] * state2.absmax + offset.
  std::vector<float> block_absmax() const;
  // bytes bitsandbytes stores (sim/lora_model.h nf4_double_quant_bytes counts the same).
  std::int64_t bytes() const {
    return static_cast<std::int64_t>(codes.size() + absmax_codes.size() + 4 * absmax_scales.size() + 4);
  }
};

// One executor weight that fuses several transformers modules back to back (Llama's q_proj, k_proj and v_proj rows
// in the qkv weight; gate_proj and up_proj in gate_up), quantised as bitsandbytes quantises the model: transformers'
// replace_with_bnb_linear makes each nn.Linear a Linear4bit whose Params4bit is its own quantize_4bit call, so every
// module has its own blocks of 64 (the first block starts at the module's first element, the last may be partial)
// AND its own double quantisation (offset = that module's absmax.mean(), and its absmax in groups of 256 blocks
// counted from that module's first block: compress_statistics' quantize_blockwise(absmax - offset, blocksize=256)).
// Quantising the fused tensor as one would share blocks and the offset across modules and give other codes. A
// weight of one module (GPT-2's c_attn / c_fc Conv1D, Llama's o_proj / down_proj) holds one tensor.
struct Nf4ModuleTensors {
  std::vector<Nf4Tensor> modules;  // in element order: module j covers the elements after modules 0..j-1

  std::int64_t elements() const {
    std::int64_t n = 0;
    for (const Nf4Tensor& m : modules) n += m.elements;
    return n;
  }
  std::int64_t bytes() const {
    std::int64_t b = 0;
    for (const Nf4Tensor& m : modules) b += m.bytes();
    return b;
  }
};

// The bytes of a weight of these modules (element counts, in order): each module's nf4_tensor_bytes.
std::int64_t nf4_module_tensors_bytes(const std::vector<std::int64_t>& module_elements);

// Per block of 64: max |x| (fp32), the first-level constants before double quantisation.
std::vector<float> nf4_block_absmax(const float* x, std::int64_t n);
// quantize_4bit(x, blocksize=64, compress_statistics=True, quant_type="nf4") of n values (fp32 here; bitsandbytes
// reads fp16/bf16/fp32 and converts each value to fp32 first, so 16-bit inputs widened exactly give its codes).
// The blocks of 64 are shared among up to `threads` threads (core/parallel_ranges.h); the result is the same for any
// thread count.
Nf4Tensor quantize_nf4(const float* x, std::int64_t n, int threads = 1);
// x[0, sum module_elements) quantised module by module: module j is quantize_nf4 of its own elements alone. Throws
// std::invalid_argument on an empty module list or a module of fewer than one element.
Nf4ModuleTensors quantize_nf4_modules(const float* x, const std::vector<std::int64_t>& module_elements,
                                      int threads = 1);
// dequantize_4bit into out[0, n) (fp32).
void dequantize_nf4(const Nf4Tensor& tensor, float* out);
// Each module's dequantize_4bit into its own elements of out[0, elements()).
void dequantize_nf4(const Nf4ModuleTensors& tensors, float* out);
// Elements [first, first + count) only (the matmul path dequantises a weight's rows as it needs them).
void dequantize_nf4_range(const Nf4Tensor& tensor, std::int64_t first, std::int64_t count, float* out);

}  // namespace zeroplan
