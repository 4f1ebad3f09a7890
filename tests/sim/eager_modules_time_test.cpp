// transformers' eager Llama-family modules as the DeepSpeed engine times them for `--model-code transformers`
// (sim/compute_time.cpp eager_llama_block_bytes) against the kernels torch.profiler timed in one micro-step of
// LlamaForCausalLM on one H200 (bench/llama/eager_module_profile.py; bench/llama/results/2026-11-29-h200x1-eager/,
// its README gives the command): TinyLlama-1.1B (22 blocks, GQA 32/4, micro-batch 4 x 2048) and four blocks of
// Llama-2-7B (MHA, head dim 128), every weight trained ("full") and every weight frozen as under LoRA ("frozen").
// The profile's elementwise kernels (every operator but the GEMMs, the attention and the loss over the logits) must
// take the model's bytes at the cluster's eager_elementwise_bandwidth within 5%: one rate for both shapes and both
// modes says the byte count of each kernel list scales as the code's does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/cluster_description.h"
#include "core/data_paths.h"
#include "core/json_input.h"
#include "core/model_description.h"
#include "sim/compute_time.h"

namespace zeroplan {
namespace {

constexpr double kRateTolerance = 0.05;

// Operators that are not the blocks' elementwise work: GEMMs, attention, and what runs over the logits (the loss).
bool elementwise_of_the_blocks(const nlohmann::json& op, const std::string& logits_shape) {
  const std::string name = op.at("name").get<std::string>();
  const std::string shapes = op.at("shapes").get<std::string>();
  if (name == "aten::mm" || name == "aten::addmm" || name == "aten::bmm") return false;
  if (name.find("attention") != std::string::npos) return false;
  for (const char* loss : {"aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
                           "aten::nll_loss_backward", "aten::gather", "aten::embedding_dense_backward"})
    if (name == loss) return false;
  return shapes.find(logits_shape) == std::string::npos;
}

TEST(TransformersEagerModules, ElementwiseBytesAtTheMeasuredRate) {
  const std::filesystem::path folder = data_directory() / "bench" / "llama" / "results" / "2026-11-29-h200x1-eager";
  const ClusterDescription cluster = load_cluster("h200x1");
  ASSERT_GT(cluster.eager_elementwise_bandwidth, 0.0);
  int checked = 0;
  for (const char* file : {"tinyllama-1.1b_full.json", "tinyllama-1.1b_frozen.json", "llama2-7b_full_l4.json",
                           "llama2-7b_frozen_l4.json"}) {
    SCOPED_TRACE(file);
    const nlohmann::json profile = read_json_file(folder / file);
    const ModelDescription model =
        load_model((data_directory() / profile.at("config").get<std::string>()).string());
    ASSERT_TRUE(model.transformer.has_value());
    const TransformerShape& shape = *model.transformer;
    const double micro_batch = profile.at("micro_batch").get<double>(), seq = profile.at("seq").get<double>();
    const double tokens = micro_batch * seq, layers = profile.at("layers").get<double>();
    const bool trained = profile.at("mode").get<std::string>() == "full";
    const std::string logits_shape = std::to_string(static_cast<long long>(micro_batch)) + ", " +
                                     std::to_string(static_cast<long long>(seq)) + ", " +
                                     std::to_string(shape.vocab_size);
    const std::string flat_logits_shape =
        std::to_string(static_cast<long long>(tokens)) + ", " + std::to_string(shape.vocab_size);
    double measured_seconds = 0.0;
    for (const nlohmann::json& op : profile.at("ops"))
      if (elementwise_of_the_blocks(op, logits_shape) && elementwise_of_the_blocks(op, flat_logits_shape))
        measured_seconds += op.at("gpu_ms").get<double>() / 1e3;
    const EagerBlockBytes block = eager_llama_block_bytes(shape, tokens, 2.0);
    const EagerBlockBytes final_norm = eager_rms_norm_bytes(tokens * static_cast<double>(shape.hidden), 2.0);
    const double bytes = layers * (block.forward + block.backward_input + (trained ? block.backward_weight : 0.0)) +
                         final_norm.forward + final_norm.backward_input +
                         (trained ? final_norm.backward_weight : 0.0);
    const double predicted_seconds = bytes / cluster.eager_elementwise_bandwidth;
    const double error = predicted_seconds / measured_seconds - 1.0;
    std::printf("%-28s %5.1f GB, measured %7.2f ms (%.3f TB/s), planned %7.2f ms  %+5.1f%%\n", file, bytes / 1e9,
                measured_seconds * 1e3, bytes / measured_seconds / 1e12, predicted_seconds * 1e3, 100.0 * error);
    EXPECT_LE(std::abs(error), kRateTolerance);
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

}  // namespace
}  // namespace zeroplan
