#include "exec/cuda/nf4.cuh"

#include <algorithm>

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

// One thread per packed byte (two elements of one block of 64: blocks start at even elements).
template <typename T>
__global__ void dequantize_nf4_kernel(T* out, const std::uint8_t* codes, const std::uint8_t* absmax_codes,
                                      const float* absmax_scales, const float* offset, i64 n, Nf4Tables t) {
  __shared__ float nf4[16];
  __shared__ float dynamic_map[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) dynamic_map[i] = t.dynamic_map[i];
  if (threadIdx.x < 16) nf4[threadIdx.x] = t.nf4[threadIdx.x];
  __syncthreads();
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

}  // namespace

template <typename T>
void dequantize_nf4(T* out, const Nf4DeviceTensor& tensor, cudaStream_t stream) {
  if (tensor.elements <= 0) return;
  const i64 pairs = (tensor.elements + 1) / 2;
  const int grid = static_cast<int>(std::min<i64>(ceil_div(pairs, kThreads), 65535));
  dequantize_nf4_kernel<T><<<grid, kThreads, 0, stream>>>(out, tensor.codes, tensor.absmax_codes, tensor.absmax_scales,
                                                          tensor.offset, tensor.elements, tables());
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
