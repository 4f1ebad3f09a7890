// attention_benchmark: the executor's causal attention (exec/cuda/attention.cuh: FlashAttention-2 tiles on the
// tensor cores, GQA, bf16) timed forward and backward at the shapes of the models the executor trains, one JSON
// line per shape, through the calibrator `zeroplan calibrate` times it with (exec/cuda/device_calibration.h
// attention_seconds: random q, k, v and output gradient, CUDA events on its own stream, the median of --iters after
// one untimed launch). bench/llama/attention_peer.py times cuDNN's fused attention (PyTorch's SDPA, cuDNN backend)
// and FlashAttention-2 (PyTorch's flash backend) at the same shapes in the same device call;
// bench/llama/device_llama.sh `attention` runs both and prints the ratio per shape (issue 35: keep the faster).
//
//   build-dev/bench/attention_benchmark [--shapes gpt2-1.5b,tinyllama,...] [--iters 20]
//
// FLOPs as FlashAttention-2 counts them (Dao 2023, arXiv 2307.08691, section 4.1's benchmark): forward
// 4 * B * NH * T^2 * HS (two GEMMs of 2 * T^2 * HS per head), halved for the causal mask; backward 2.5 times the
// forward (five GEMMs of the same size, the scores recomputed).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "exec/cuda/attention.cuh"
#include "exec/cuda/cuda_check.h"
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

nlohmann::json measure(exec::cuda::DeviceCalibrator& device, const ModelAttention& s, int iters) {
  const exec::cuda::AttentionSeconds t = device.attention_seconds(
      exec::cuda::AttentionShape{s.batch, s.seq, s.heads * s.head_size, s.heads, s.kv_heads}, iters);
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
          {"forward_seconds", t.forward},
          {"backward_seconds", t.backward},
          {"forward_tflops", forward_flops / t.forward * 1e-12},
          {"backward_tflops", 2.5 * forward_flops / t.backward * 1e-12}};
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
