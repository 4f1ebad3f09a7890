// attention_benchmark: the executor's causal attention (exec/cuda/attention.cuh: FlashAttention-2 tiles on the
// tensor cores, GQA, bf16) timed forward and backward at the shapes of the models the executor trains, one JSON
// line per shape, through the calibrator `zeroplan calibrate` times it with (exec/cuda/device_calibration.h
// attention_seconds with AttentionKernels::executor, since calibrate itself times cuDNN's where the trainer uses
// it: random q, k, v and output gradient, CUDA events on its own stream, the median of --iters after one untimed
// launch). bench/llama/attention_peer.py times cuDNN's fused attention (PyTorch's SDPA, cuDNN backend)
// and FlashAttention-2 (PyTorch's flash backend) at the same shapes in the same device call;
// bench/llama/device_llama.sh `attention` runs both and prints the ratio per shape (issue 35: keep the faster).
// Each line also carries cuDNN's fused flash attention as the executor calls it (exec/cuda/cudnn_attention.cuh: the
// decomposed operation graphs on the system cuDNN, the executor's qkv/out/lse layouts, no copies) timed the same
// way on the same stream (cudnn_forward_seconds, cudnn_backward_seconds; one untimed launch after planning, the
// median of --iters), its engines, and cudnn_output_rel_diff: the relative L2 difference of its output from ours
// on the same inputs; cudnn_refused with cuDNN's reason when it plans nothing for the shape. For cuDNN's own log:
// CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr.
//
//   build-dev/bench/attention_benchmark [--shapes gpt2-1.5b,tinyllama,...] [--iters 20]
//
// FLOPs as FlashAttention-2 counts them (Dao 2023, arXiv 2307.08691, section 4.1's benchmark): forward
// 4 * B * NH * T^2 * HS (two GEMMs of 2 * T^2 * HS per head), halved for the causal mask; backward 2.5 times the
// forward (five GEMMs of the same size, the scores recomputed).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "exec/cuda/attention.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_attention.cuh"
#include "exec/cuda/device_calibration.h"

namespace zeroplan::bench {
namespace {

struct ModelAttention {
  std::string name;
  int batch, seq, heads, kv_heads, head_size;
};

// The models' shapes at the micro-batches the issues measure them (bench/llama/device_llama.sh, bench/exec).
const std::vector<ModelAttention>& known_shapes() {
  static const std::vector<ModelAttention> shapes = {
      {"gpt2-1.5b", 8, 1024, 25, 25, 64},  // GPT-2 XL, micro-batch 8 x 1024 (issue 36's runs)
      {"gpt2-124m", 16, 1024, 12, 12, 64},
      {"tinyllama", 4, 2048, 32, 4, 64},  // TinyLlama 1.1B, GQA 32/4 (issue 35 (a))
      {"llama2-7b", 2, 2048, 32, 32, 128},  // issue 35 (b)
      {"llama3-8b", 2, 2048, 32, 8, 128},   // GQA 32/8, head_dim 128
      {"qwen2-7b", 2, 2048, 28, 4, 128},
      {"qwen2-0.5b", 4, 2048, 14, 2, 64},
  };
  return shapes;
}

using bf16 = __nv_bfloat16;

// Deterministic pseudo-random bf16 values in about [-2, 2) (a hash of the index): the inputs of both paths.
__global__ void fill_random(bf16* x, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(static_cast<float>(h & 0xFFFF) / 16384.0f - 2.0f);
  }
}

template <typename T>
struct DeviceBuffer {
  T* d = nullptr;
  explicit DeviceBuffer(std::size_t n) { CUDA_CHECK(cudaMalloc(&d, n * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(d); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Seconds of f on `stream`: one untimed launch, then the median of `iters` timed one by one with CUDA events.
template <typename F>
double median_seconds(cudaStream_t stream, int iters, F&& f) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(a, stream));
    f();
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double rel_l2(const std::vector<bf16>& got, const std::vector<bf16>& ref) {
  double d = 0, r = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = __bfloat162float(got[i]), x = __bfloat162float(ref[i]);
    d += (g - x) * (g - x);
    r += x * x;
  }
  return std::sqrt(d / std::max(r, 1e-30));
}

// cuDNN's fused attention at the shape (exec/cuda/cudnn_attention.cuh), on its own stream and buffers, and our
// forward on the same inputs for the output's difference.
void measure_cudnn(const ModelAttention& s, int iters, double forward_flops, nlohmann::json& j) {
  const exec::cuda::CudnnAttentionShape shape{s.batch, s.seq, s.heads, s.kv_heads, s.head_size,
                                              exec::ExecPrecision::bf16};
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  {
    exec::cuda::CudnnAttention cudnn(stream, /*deterministic=*/false);
    std::string why;
    if (!cudnn.supported(shape, &why)) {
      j["cudnn_refused"] = why;
    } else {
      const std::size_t rows = static_cast<std::size_t>(s.batch) * s.seq;
      const std::size_t W = static_cast<std::size_t>(s.heads + 2 * s.kv_heads) * s.head_size,
                        C = static_cast<std::size_t>(s.heads) * s.head_size;
      DeviceBuffer<bf16> qkv(rows * W), out(rows * C), out_ours(rows * C), dout(rows * C), dqkv(rows * W);
      DeviceBuffer<float> lse(rows * s.heads), lse_ours(rows * s.heads);
      const std::int64_t ws_bytes = exec::cuda::CudnnAttention::workspace_bytes(shape, false);
      DeviceBuffer<char> ws(static_cast<std::size_t>(ws_bytes));
      cudnn.set_workspace(ws.d, ws_bytes);
      fill_random<<<1024, 256, 0, stream>>>(qkv.d, rows * W, 1);
      fill_random<<<1024, 256, 0, stream>>>(dout.d, rows * C, 2);
      CUDA_CHECK_LAUNCH();
      const double fwd = median_seconds(stream, iters, [&] { cudnn.forward(shape, out.d, lse.d, qkv.d); });
      const double bwd =
          median_seconds(stream, iters, [&] { cudnn.backward(shape, dqkv.d, dout.d, qkv.d, out.d, lse.d); });
      exec::cuda::attention_forward<bf16>(out_ours.d, lse_ours.d, qkv.d, s.batch, s.seq, s.heads, s.kv_heads,
                                          s.head_size, stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<bf16> a(rows * C), b(rows * C);
      CUDA_CHECK(cudaMemcpy(a.data(), out.d, a.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(b.data(), out_ours.d, b.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
      const exec::cuda::CudnnAttention::PlanInfo info = cudnn.plan_info(shape);
      j["cudnn_forward_seconds"] = fwd;
      j["cudnn_backward_seconds"] = bwd;
      j["cudnn_forward_tflops"] = forward_flops / fwd * 1e-12;
      j["cudnn_backward_tflops"] = 2.5 * forward_flops / bwd * 1e-12;
      j["cudnn_engines"] = {info.forward_engine, info.backward_engine};
      j["cudnn_workspace_bytes"] = ws_bytes;
      j["cudnn_output_rel_diff"] = rel_l2(a, b);
      j["cudnn_over_ours"] = (fwd + bwd) / (j["forward_seconds"].get<double>() + j["backward_seconds"].get<double>());
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

nlohmann::json measure(exec::cuda::DeviceCalibrator& device, const ModelAttention& s, int iters) {
  // Ours explicitly: the calibrator would time cuDNN's where the trainer uses it; cuDNN's is timed below.
  const exec::cuda::AttentionSeconds t = device.attention_seconds(
      exec::cuda::AttentionShape{s.batch, s.seq, s.heads * s.head_size, s.heads, s.kv_heads}, iters,
      exec::cuda::AttentionKernels::executor);
  const double forward_flops = 4.0 * s.batch * s.heads * static_cast<double>(s.seq) * s.seq * s.head_size / 2.0;
  nlohmann::json j = {{"impl", "zeroplan"},
          {"shape", s.name},
          {"batch", s.batch},
          {"seq", s.seq},
          {"heads", s.heads},
          {"kv_heads", s.kv_heads},
          {"head_size", s.head_size},
          {"dtype", "bf16"},
          {"tensor_cores", exec::cuda::attention_uses_tensor_cores<__nv_bfloat16>(s.head_size)},
          {"forward_seconds", t.forward},
          {"backward_seconds", t.backward},
          {"forward_tflops", forward_flops / t.forward * 1e-12},
          {"backward_tflops", 2.5 * forward_flops / t.backward * 1e-12}};
  try {
    measure_cudnn(s, iters, forward_flops, j);
  } catch (const std::exception& e) {  // one shape's failure is reported in its line; the others still run
    j["cudnn_error"] = e.what();
  }
  return j;
}

}  // namespace
}  // namespace zeroplan::bench

int main(int argc, char** argv) {
  using namespace zeroplan::bench;
  CLI::App app{"The executor's causal attention, forward and backward, timed at the models' shapes (bf16)"};
  std::vector<std::string> names;
  int iters = 20;
  app.add_option("--shapes", names, "shapes to time (default: all)")->delimiter(',');
  app.add_option("--iters", iters, "timed launches per direction (the median is printed)")->check(CLI::Range(1, 10000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::vector<ModelAttention> shapes;
  for (const std::string& n : names) {
    const auto& all = known_shapes();
    const auto it = std::find_if(all.begin(), all.end(), [&](const ModelAttention& s) { return s.name == n; });
    if (it == all.end()) {
      std::string known;
      for (const ModelAttention& s : all) known += (known.empty() ? "" : ", ") + s.name;
      std::cerr << "attention_benchmark: --shapes: unknown shape '" << n << "' (known: " << known << ")\n";
      return 2;
    }
    shapes.push_back(*it);
  }
  if (shapes.empty()) shapes = known_shapes();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cerr << "attention_benchmark: no CUDA device\n";
    return 2;
  }
  try {
    zeroplan::exec::cuda::DeviceCalibrator device(0);
    for (const ModelAttention& s : shapes) std::cout << measure(device, s, iters).dump() << std::endl;
  } catch (const zeroplan::exec::CudaError& e) {
    std::cerr << "attention_benchmark: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
