// attention_benchmark: the executor's causal attention (exec/cuda/attention.cuh: FlashAttention-2 tiles on the
// tensor cores, GQA, bf16) timed forward and backward at the shapes of the models the executor trains, one JSON
// line per shape. bench/llama/attention_peer.py times cuDNN's fused attention (PyTorch's SDPA, cuDNN backend) and
// FlashAttention-2 (PyTorch's flash backend) at the same shapes in the same device call; bench/llama/device_llama.sh
// `attention` runs both and prints the ratio per shape (issue 35: keep the faster per shape).
//
//   build-dev/bench/attention_benchmark [--shapes gpt2-1.5b,tinyllama,...] [--iters 20] [--warmup 3]
//
// FLOPs as FlashAttention-2 counts them (Dao 2023, arXiv 2307.08691, section 4.1's benchmark): forward
// 4 * B * NH * T^2 * HS (two GEMMs of 2 * T^2 * HS per head), halved for the causal mask; backward 2.5 times the
// forward (five GEMMs of the same size, the scores recomputed). Times are the median of --iters launches, each
// timed with CUDA events on one stream after --warmup untimed launches.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "exec/cuda/attention.cuh"
#include "exec/cuda/cuda_check.h"

namespace zeroplan::bench {
namespace {

struct AttentionShape {
  std::string name;
  int batch, seq, heads, kv_heads, head_size;
};

// The models' shapes at the micro-batches the issues measure them (bench/llama/device_llama.sh, bench/exec).
const std::vector<AttentionShape>& known_shapes() {
  static const std::vector<AttentionShape> shapes = {
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Launch>
double median_seconds(Launch&& launch, int warmup, int iters, cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) launch();
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    launch();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e-3);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return median(std::move(times));
}

template <typename T>
T* device_array(std::size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T*>(p);
}

nlohmann::json measure(const AttentionShape& s, int warmup, int iters, cudaStream_t stream) {
  const std::size_t rows = static_cast<std::size_t>(s.batch) * s.seq;
  const std::size_t qkv_cols = static_cast<std::size_t>(s.heads + 2 * s.kv_heads) * s.head_size;
  const std::size_t out_cols = static_cast<std::size_t>(s.heads) * s.head_size;
  const std::size_t lse_n = static_cast<std::size_t>(s.batch) * s.heads * s.seq;
  // Inputs of the scale a trained model's activations have (unit normal q, k, v and dO).
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<__nv_bfloat16> host(rows * qkv_cols);
  for (auto& x : host) x = __float2bfloat16(normal(rng));
  auto* qkv = device_array<__nv_bfloat16>(rows * qkv_cols);
  auto* dqkv = device_array<__nv_bfloat16>(rows * qkv_cols);
  auto* out = device_array<__nv_bfloat16>(rows * out_cols);
  auto* dout = device_array<__nv_bfloat16>(rows * out_cols);
  auto* lse = device_array<float>(lse_n);
  auto* rowsum = device_array<float>(lse_n);
  CUDA_CHECK(cudaMemcpy(qkv, host.data(), host.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dout, host.data(), rows * out_cols * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));

  const double forward = median_seconds(
      [&] {
        exec::cuda::attention_forward(out, lse, qkv, s.batch, s.seq, s.heads, s.kv_heads, s.head_size, stream);
      },
      warmup, iters, stream);
  const double backward = median_seconds(
      [&] {
        exec::cuda::attention_backward(dqkv, rowsum, dout, qkv, out, lse, s.batch, s.seq, s.heads, s.kv_heads,
                                       s.head_size, stream);
      },
      warmup, iters, stream);
  for (void* p : {static_cast<void*>(qkv), static_cast<void*>(dqkv), static_cast<void*>(out),
                  static_cast<void*>(dout), static_cast<void*>(lse), static_cast<void*>(rowsum)})
    CUDA_CHECK(cudaFree(p));

  const double forward_flops = 4.0 * s.batch * s.heads * static_cast<double>(s.seq) * s.seq * s.head_size / 2.0;
  return {{"impl", "zeroplan"},
          {"shape", s.name},
          {"batch", s.batch},
          {"seq", s.seq},
          {"heads", s.heads},
          {"kv_heads", s.kv_heads},
          {"head_size", s.head_size},
          {"dtype", "bf16"},
          {"tensor_cores", exec::cuda::attention_uses_tensor_cores<__nv_bfloat16>(s.head_size)},
          {"forward_seconds", forward},
          {"backward_seconds", backward},
          {"forward_tflops", forward_flops / forward * 1e-12},
          {"backward_tflops", 2.5 * forward_flops / backward * 1e-12}};
}

}  // namespace
}  // namespace zeroplan::bench

int main(int argc, char** argv) {
  using namespace zeroplan::bench;
  CLI::App app{"The executor's causal attention, forward and backward, timed at the models' shapes (bf16)"};
  std::vector<std::string> names;
  int iters = 20, warmup = 3;
  app.add_option("--shapes", names, "shapes to time (default: all)")->delimiter(',');
  app.add_option("--iters", iters, "timed launches per direction (the median is printed)")->check(CLI::Range(1, 10000));
  app.add_option("--warmup", warmup, "untimed launches first")->check(CLI::Range(0, 1000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::vector<AttentionShape> shapes;
  for (const std::string& n : names) {
    const auto& all = known_shapes();
    const auto it = std::find_if(all.begin(), all.end(), [&](const AttentionShape& s) { return s.name == n; });
    if (it == all.end()) {
      std::string known;
      for (const AttentionShape& s : all) known += (known.empty() ? "" : ", ") + s.name;
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
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreate(&stream));
    for (const AttentionShape& s : shapes) std::cout << measure(s, warmup, iters, stream).dump() << std::endl;
    CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const zeroplan::exec::CudaError& e) {
    std::cerr << "attention_benchmark: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
