// QLoRA's frozen base on the GPU: bitsandbytes' NF4 codes with double-quantised absmax (core/nf4_quantization.h
// holds the format and the CPU quantiser), dequantised into a scratch weight in the model's precision before each
// GEMM that reads it, as bitsandbytes 0.50's MatMul4Bit does (autograd/_functions.py: dequantize_4bit, then the
// 16-bit GEMM, forward and the input gradient).
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

// One quantised tensor on the device: ceil(n/2) packed codes (element 2i in the high nibble), one absmax code per
// block of 64, one fp32 scale per 256 absmax codes (quant_state.state2.absmax) and the fp32 offset
// (quant_state.offset), each a device pointer.
struct Nf4DeviceTensor {
  const std::uint8_t* codes = nullptr;
  const std::uint8_t* absmax_codes = nullptr;
  const float* absmax_scales = nullptr;
  const float* offset = nullptr;
  std::int64_t elements = 0;
};

// out[0, n) = NF4[code] * (dynamic_map[absmax_code] * scale + offset), each product and the sum rounded in fp32
// (no fused multiply-add: bitsandbytes' dequantize_blockwise multiplies in its kernel and adds the offset as a
// separate torch op; core/nf4_quantization.cpp dequantize_nf4_range computes the same, so the fp32 output equals
// the CPU's bit for bit), then rounded to T (kDequantizeBlockwise's store of the fp32 value in the output dtype).
template <typename T>
void dequantize_nf4(T* out, const Nf4DeviceTensor& tensor, cudaStream_t stream);

// One block weight that fuses several transformers modules (core/nf4_quantization.h Nf4ModuleTensors: Llama's
// q/k/v and gate/up, each its own bitsandbytes tensor with its own blocks, 256-block groups and offset): each
// module's tensor dequantised into its own elements of out (module j after modules 0..j-1), one launch per module,
// so each finds its constants by its own block indices, as dequantize_4bit of that module does.
template <typename T>
void dequantize_nf4(T* out, const std::vector<Nf4DeviceTensor>& modules, cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
