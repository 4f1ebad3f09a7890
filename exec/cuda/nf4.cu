#include "exec/cuda/nf4.cuh"

#include <algorithm>
#include <cstdint>

#include "core/nf4_quantization.h"
#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {

using i64 = std::int64_t;

// The two code tables, passed by value (1,088 bytes of kernel parameters) from the CPU quantiser's own tables, so
// that both backends read the same fp32 values and no device state needs setting up per GPU.
struct Nf4Tables {
  float nf4[16];
  float dynamic_map[256];
};

const Nf4Tables& tables() {
  static const Nf4Tables t = [] {
    Nf4Tables x{};
    std::copy(nf4_code_values().begin(), nf4_code_values().end(), x.nf4);
    std::copy(bnb_dynamic_map().begin(), bnb_dynamic_map().end(), x.dynamic_map);
    return x;
  }();
  return t;
}

constexpr int kThreads = 256;

// The two tables into the block's shared memory (every thread of the block calls it).
__device__ void load_tables(Nf4Tables& shared, const Nf4Tables& t) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) shared.dynamic_map[i] = t.dynamic_map[i];
  if (threadIdx.x < 16) shared.nf4[threadIdx.x] = t.nf4[threadIdx.x];
  __syncthreads();
}

// One thread per packed byte (two elements of one block of 64: blocks start at even elements).
template <typename T>
__global__ void dequantize_nf4_kernel(T* out, const std::uint8_t* codes, const std::uint8_t* absmax_codes,
                                      const float* absmax_scales, const float* offset, i64 n, Nf4Tables t) {
  __shared__ Nf4Tables tables;
  load_tables(tables, t);
  const float* nf4 = tables.nf4;
  const float* dynamic_map = tables.dynamic_map;
  const float off = *offset;
  const i64 pairs = (n + 1) / 2;
  for (i64 p = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 i = 2 * p, block = i / kNf4BlockSize;
    const float absmax =
        __fadd_rn(__fmul_rn(dynamic_map[absmax_codes[block]], absmax_scales[block / kNf4StatisticsBlockSize]), off);
    const std::uint8_t byte = codes[p];
    out[i] = from_f<T>(__fmul_rn(nf4[byte >> 4], absmax));
    if (i + 1 < n) out[i + 1] = from_f<T>(__fmul_rn(nf4[byte & 0x0f], absmax));
  }
}

// The same values, 16 elements per thread: one 8-byte load of codes and 16-byte stores, so that a warp reads 256
// contiguous bytes and writes 512 (bf16) to 1,024 (fp32). With the one-byte-per-thread kernel above alone, Llama-2
// 7B QLoRA's forward was 25.6 ms longer than LoRA's on an H200 (bench/lora/results, 2026-11-29): about 0.65 TB/s
// over the base's codes and bf16 weights, a sixth of the device's bandwidth. Needs n a multiple of 16, codes
// 8-byte and out 16-byte aligned (dequantize_nf4 checks; the other kernel takes the rest); a block of 64 is four
// threads' chunks, so each chunk has one absmax.
constexpr int kChunk = 16;

template <typename T>
__global__ void dequantize_nf4_chunks_kernel(T* out, const std::uint8_t* codes, const std::uint8_t* absmax_codes,
                                             const float* absmax_scales, const float* offset, i64 chunks, Nf4Tables t) {
  __shared__ Nf4Tables tables;
  load_tables(tables, t);
  const float* nf4 = tables.nf4;
  const float* dynamic_map = tables.dynamic_map;
  const float off = *offset;
  static_assert(kNf4BlockSize % kChunk == 0, "a chunk lies in one block of 64");
  constexpr int kVectors = kChunk * static_cast<int>(sizeof(T)) / 16;  // 16-byte stores per chunk
  for (i64 c = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += static_cast<i64>(gridDim.x) * blockDim.x) {
    const i64 block = c * kChunk / kNf4BlockSize;
    const float absmax =
        __fadd_rn(__fmul_rn(dynamic_map[absmax_codes[block]], absmax_scales[block / kNf4StatisticsBlockSize]), off);
    const uint2 packed = reinterpret_cast<const uint2*>(codes)[c];
    const std::uint32_t words[2] = {packed.x, packed.y};
    union {
      T values[kChunk];
      uint4 vectors[kVectors];
    } chunk;
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      const std::uint32_t byte = (words[b / 4] >> (8 * (b % 4))) & 0xffu;  // little-endian: byte b of the chunk
      chunk.values[2 * b] = from_f<T>(__fmul_rn(nf4[byte >> 4], absmax));
      chunk.values[2 * b + 1] = from_f<T>(__fmul_rn(nf4[byte & 0x0f], absmax));
    }
    uint4* dst = reinterpret_cast<uint4*>(out + c * kChunk);
#pragma unroll
    for (int v = 0; v < kVectors; ++v) dst[v] = chunk.vectors[v];
  }
}

bool aligned_to(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace

template <typename T>
void dequantize_nf4(T* out, const Nf4DeviceTensor& tensor, cudaStream_t stream) {
  if (tensor.elements <= 0) return;
  if (tensor.elements % kChunk == 0 && aligned_to(tensor.codes, 8) && aligned_to(out, 16)) {
    const i64 chunks = tensor.elements / kChunk;
    const int grid = static_cast<int>(std::min<i64>(ceil_div(chunks, kThreads), 65535));
    dequantize_nf4_chunks_kernel<T><<<grid, kThreads, 0, stream>>>(out, tensor.codes, tensor.absmax_codes,
                                                                   tensor.absmax_scales, tensor.offset, chunks, tables());
  } else {
    const i64 pairs = (tensor.elements + 1) / 2;
    const int grid = static_cast<int>(std::min<i64>(ceil_div(pairs, kThreads), 65535));
    dequantize_nf4_kernel<T><<<grid, kThreads, 0, stream>>>(out, tensor.codes, tensor.absmax_codes,
                                                            tensor.absmax_scales, tensor.offset, tensor.elements,
                                                            tables());
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void dequantize_nf4(T* out, const std::vector<Nf4DeviceTensor>& modules, cudaStream_t stream) {
  for (const Nf4DeviceTensor& m : modules) {
    dequantize_nf4<T>(out, m, stream);
    out += m.elements;
  }
}

template void dequantize_nf4<float>(float*, const Nf4DeviceTensor&, cudaStream_t);
template void dequantize_nf4<__half>(__half*, const Nf4DeviceTensor&, cudaStream_t);
template void dequantize_nf4<__nv_bfloat16>(__nv_bfloat16*, const Nf4DeviceTensor&, cudaStream_t);
template void dequantize_nf4<float>(float*, const std::vector<Nf4DeviceTensor>&, cudaStream_t);
template void dequantize_nf4<__half>(__half*, const std::vector<Nf4DeviceTensor>&, cudaStream_t);
template void dequantize_nf4<__nv_bfloat16>(__nv_bfloat16*, const std::vector<Nf4DeviceTensor>&, cudaStream_t);

}  // namespace zeroplan::exec::cuda
