// `zeroplan run` on the Llama family with Hugging Face checkpoints (CPU backend): the tiny Llama of
// bench/llama/configs/tiny-ci.json (a transformers config.json) trains; --init-from a checkpoint written here
// under transformers' LlamaForCausalLM names gives the same first loss at stages 0 and 3 (and over 2 MPI ranks at
// stage 3, where each rank reads its own partition); --save-grads writes the transformers names; and every bad
// input (checkpoint, config, token file) is one line naming the file, exit status 2, with nothing written.
//
// The checkpoints are written byte by byte here (the safetensors format: an 8-byte little-endian header length,
// the JSON header, the data), the names spelled out as transformers' modeling_llama.py has them, so that nothing
// here depends on the executor's own name table.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"

using namespace zeroplan_test;

namespace {

namespace fs = std::filesystem;

const std::string kTinyLlama = std::string(ZEROPLAN_SOURCE_DIR) + "/bench/llama/configs/tiny-ci.json";
const std::string kTrain = "run --model " + kTinyLlama + " --backend cpu --micro-batch 2 --seq 32 --precision fp32";

// LlamaForCausalLM's tensors of tiny-ci.json (vocab 256, hidden 64, 4 heads of 16, 2 kv heads, 2 layers,
// intermediate 160, untied head, no biases): name -> shape.
std::map<std::string, std::vector<std::int64_t>> tiny_llama_tensors() {
  std::map<std::string, std::vector<std::int64_t>> t;
  t["model.embed_tokens.weight"] = {256, 64};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t[p + "self_attn.q_proj.weight"] = {64, 64};
    t[p + "self_attn.k_proj.weight"] = {32, 64};
    t[p + "self_attn.v_proj.weight"] = {32, 64};
    t[p + "self_attn.o_proj.weight"] = {64, 64};
    t[p + "mlp.gate_proj.weight"] = {160, 64};
    t[p + "mlp.up_proj.weight"] = {160, 64};
    t[p + "mlp.down_proj.weight"] = {64, 160};
    t[p + "input_layernorm.weight"] = {64};
    t[p + "post_attention_layernorm.weight"] = {64};
  }
  t["model.norm.weight"] = {64};
  t["lm_head.weight"] = {256, 64};
  return t;
}

// A safetensors file of F32 tensors with seeded values (norm weights near 1, matrices N(0, 0.05)).
void write_checkpoint(const fs::path& path, const std::map<std::string, std::vector<std::int64_t>>& tensors,
                      std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, shape] : tensors) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    const bool norm = name.find("norm") != std::string::npos;
    const std::size_t at = data.size();
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {at, at + n * 4}}};
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = norm ? 1.0f + 0.1f * normal(rng) : 0.05f * normal(rng);
      char b[4];
      std::memcpy(b, &v, 4);
      data.append(b, 4);
    }
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xFF);
  std::ofstream(path, std::ios::binary) << out << text << data;
}

// The header of a safetensors file.
nlohmann::json header_of(const fs::path& path) {
  const std::string bytes = bytes_of(path);
  if (bytes.size() < 8) return nullptr;
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (8 + n > bytes.size()) return nullptr;
  return nlohmann::json::parse(bytes.substr(8, n));
}

// "step    1/3 | loss 5.5452 | ..." -> "5.5452" (empty when absent).
std::string printed_loss(const std::string& output, int step, int steps) {
  const std::regex line("step +" + std::to_string(step) + "/" + std::to_string(steps) + R"( \| loss ([0-9.eE+-]+))");
  std::smatch m;
  return std::regex_search(output, m, line) ? m[1].str() : std::string();
}

std::vector<double> report_losses(const fs::path& report) {
  const nlohmann::json doc = nlohmann::json::parse(read_file(report));
  return doc.at("measured").at("loss").get<std::vector<double>>();
}

fs::path init_checkpoint() {
  static const fs::path path = [] {
    const fs::path p = temp_dir() / "tiny-llama-init.safetensors";
    write_checkpoint(p, tiny_llama_tensors(), 20260527);
    return p;
  }();
  return path;
}

// A copy of tiny-ci.json with `change` applied.
fs::path config_with(const std::string& name, const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json config = nlohmann::json::parse(read_file(kTinyLlama));
  change(config);
  return write_temp(name, config.dump(2));
}

TEST(LlamaRun, TinyLlamaTrainsOnTheCpuBackend) {
  const CommandResult result = run(kTrain + " --steps 3");
  ASSERT_EQ(result.status, 0) << result.output << result.errors;
  for (int s = 1; s <= 3; ++s) {
    const std::string loss = printed_loss(result.output, s, 3);
    ASSERT_FALSE(loss.empty()) << "no loss for step " << s << " in:\n" << result.output;
    const double value = std::stod(loss);
    EXPECT_TRUE(std::isfinite(value));
    // Uniform tokens over 256: near ln(256) = 5.545 from a small initialization.
    EXPECT_GT(value, 4.5);
    EXPECT_LT(value, 6.5);
  }
}

TEST(LlamaRun, InitFromGivesTheSameFirstLossAtStages0And3AndSaveGradsWritesTransformersNames) {
  const fs::path init = init_checkpoint();
  std::map<int, std::string> printed;
  std::map<int, double> reported;
  for (const int stage : {0, 3}) {
    const fs::path report = fresh("init_report_" + std::to_string(stage) + ".json");
    const fs::path grads = fresh("init_grads_" + std::to_string(stage) + ".safetensors");
    const CommandResult result = run(kTrain + " --steps 3 --stage " + std::to_string(stage) + " --init-from " +
                                     init.string() + " --report " + report.string() + " --save-grads " +
                                     grads.string());
    ASSERT_EQ(result.status, 0) << result.output << result.errors;
    EXPECT_NE(result.output.find("initialized from " + init.string()), std::string::npos) << result.output;
    printed[stage] = printed_loss(result.output, 1, 3);
    ASSERT_FALSE(printed[stage].empty()) << result.output;
    const std::vector<double> losses = report_losses(report);
    ASSERT_EQ(losses.size(), 3u);
    reported[stage] = losses[0];

    // The gradients under transformers' names, the same shapes as the checkpoint's, F32.
    const nlohmann::json header = header_of(grads);
    ASSERT_TRUE(header.is_object()) << grads;
    std::set<std::string> names;
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      names.insert(name);
      EXPECT_EQ(info.at("dtype"), "F32") << name;
    }
    std::set<std::string> expected;
    for (const auto& [name, shape] : tiny_llama_tensors()) {
      expected.insert(name);
      if (header.contains(name)) EXPECT_EQ(header.at(name).at("shape").get<std::vector<std::int64_t>>(), shape) << name;
    }
    EXPECT_EQ(names, expected);
    EXPECT_EQ(header.at("__metadata__").at("format"), "pt");
    // The file's recorded loss is the step's (printed with 9 digits).
    EXPECT_NEAR(std::stod(header.at("__metadata__").at("loss").get<std::string>()), losses[0], 1e-6 * losses[0]);
  }
  EXPECT_EQ(printed[0], printed[3]);
  EXPECT_EQ(reported[0], reported[3]) << "one rank: the same parameters, the same forward";
  // The checkpoint is what the run starts from: not the seeded initialization.
  const fs::path plain = fresh("plain_report.json");
  const CommandResult without = run(kTrain + " --steps 3 --stage 0 --report " + plain.string());
  ASSERT_EQ(without.status, 0) << without.errors;
  EXPECT_NE(report_losses(plain)[0], reported[0]);
}

// Every failed run below is given these outputs; none may appear.
struct Outputs {
  fs::path save_dir, grads, report;
  std::string flags() const {
    return " --save-dir " + save_dir.string() + " --save-grads " + grads.string() + " --report " + report.string();
  }
};

Outputs fresh_outputs(const std::string& tag) {
  return {fresh("failed_" + tag + "_save"), fresh("failed_" + tag + "_grads.safetensors"),
          fresh("failed_" + tag + "_report.json")};
}

void expect_nothing_written(const Outputs& o) {
  EXPECT_TRUE(!fs::exists(o.save_dir) || fs::is_empty(o.save_dir)) << o.save_dir;
  EXPECT_FALSE(fs::exists(o.grads)) << o.grads;
  EXPECT_FALSE(fs::exists(fs::path(o.grads.string() + ".tmp"))) << o.grads;
  EXPECT_FALSE(fs::exists(o.report)) << o.report;
}

TEST(LlamaRunBadInput, InitFromAMissingPath) {
  const Outputs o = fresh_outputs("missing");
  const fs::path missing = temp_dir() / "no-such-checkpoint.safetensors";
  expect_one_line_error(run(kTrain + " --steps 2 --init-from " + missing.string() + o.flags()), {missing.string()});
  expect_nothing_written(o);
}

TEST(LlamaRunBadInput, InitFromATruncatedFile) {
  const std::string bytes = bytes_of(init_checkpoint());
  ASSERT_GT(bytes.size(), 1000u);
  for (const std::size_t keep : {bytes.size() - 100, std::size_t{200}}) {
    const Outputs o = fresh_outputs("truncated" + std::to_string(keep));
    const fs::path cut = temp_dir() / ("truncated-" + std::to_string(keep) + ".safetensors");
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, keep);
    expect_one_line_error(run(kTrain + " --steps 2 --init-from " + cut.string() + o.flags()), {cut.string()});
    expect_nothing_written(o);
  }
}

TEST(LlamaRunBadInput, InitFromACheckpointOfAnotherArchitecture) {
  // A GPT-2 checkpoint (transformers' GPT2Model names), written by zeroplan itself for the tiny GPT-2.
  const fs::path gpt2 = fresh("gpt2-grads.safetensors");
  const CommandResult made = run("run --model " + kTinyGpt2 + " --backend cpu --micro-batch 2 --seq 32 --steps 1 "
                                 "--precision fp32 --save-grads " + gpt2.string());
  ASSERT_EQ(made.status, 0) << made.errors;
  ASSERT_TRUE(header_of(gpt2).contains("wte.weight"));
  const Outputs o = fresh_outputs("gpt2");
  expect_one_line_error(run(kTrain + " --steps 2 --init-from " + gpt2.string() + o.flags()),
                        {gpt2.string(), "--init-from", "model.embed_tokens.weight", "another architecture"});
  expect_nothing_written(o);
}

TEST(LlamaRunBadInput, InitFromAMisShapedCheckpoint) {
  auto tensors = tiny_llama_tensors();
  tensors["model.layers.1.self_attn.k_proj.weight"] = {64, 64};
  const fs::path file = fresh("misshaped.safetensors");
  write_checkpoint(file, tensors, 3);
  const Outputs o = fresh_outputs("misshaped");
  expect_one_line_error(run(kTrain + " --steps 2 --init-from " + file.string() + o.flags()),
                        {file.string(), "model.layers.1.self_attn.k_proj.weight", "[32, 64]"});
  expect_nothing_written(o);
}

TEST(LlamaRunBadInput, MixtureOfExpertsConfig) {
  const fs::path config = config_with("moe-config.json", [](nlohmann::json& c) { c["num_local_experts"] = 8; });
  const Outputs o = fresh_outputs("moe");
  expect_one_line_error(run("run --model " + config.string() +
                            " --backend cpu --micro-batch 2 --seq 32 --precision fp32 --steps 2" + o.flags()),
                        {config.string(), "num_local_experts"});
  expect_nothing_written(o);
}

TEST(LlamaRunBadInput, LinearRopeScalingIsRefusedByRunButPlanned) {
  const fs::path config = config_with("rope-linear-config.json", [](nlohmann::json& c) {
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  });
  const Outputs o = fresh_outputs("rope");
  expect_one_line_error(run("run --model " + config.string() +
                            " --backend cpu --micro-batch 2 --seq 32 --precision fp32 --steps 2" + o.flags()),
                        {config.string(), "rope_scaling", "linear"});
  expect_nothing_written(o);
  const CommandResult plan = run("plan --model " + config.string() + " --gpus 1 --micro-batch 2 --seq 32");
  EXPECT_EQ(plan.status, 0) << plan.output << plan.errors;
}

TEST(LlamaRunBadInput, SlidingWindowShorterThanTheSequence) {
  const fs::path config = config_with("mistral-config.json", [](nlohmann::json& c) {
    c["model_type"] = "mistral";
    c["architectures"] = {"MistralForCausalLM"};
    c["sliding_window"] = 16;
  });
  const Outputs o = fresh_outputs("window");
  expect_one_line_error(run("run --model " + config.string() +
                            " --backend cpu --micro-batch 2 --seq 32 --precision fp32 --steps 2" + o.flags()),
                        {"sliding_window", "--seq", "16"});
  expect_nothing_written(o);
  // Within the window it trains.
  const CommandResult within = run("run --model " + config.string() +
                                   " --backend cpu --micro-batch 2 --seq 16 --precision fp32 --steps 1");
  EXPECT_EQ(within.status, 0) << within.output << within.errors;
}

// An llm.c token file (tokens v1: uint16) with `tokens` and `extra_bytes` after them.
fs::path llmc_file(const std::string& name, const std::vector<std::uint16_t>& tokens, int extra_bytes) {
  std::int32_t header[256] = {};
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header), sizeof header);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  bytes.append(static_cast<std::size_t>(extra_bytes), '\x01');
  const fs::path path = temp_dir() / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(LlamaRunBadInput, TokenFileWithAnOddByteCount) {
  std::vector<std::uint16_t> tokens(200);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i % 256);
  const fs::path odd = llmc_file("odd-tokens.bin", tokens, 1);
  const Outputs o = fresh_outputs("odd");
  expect_one_line_error(run(kTrain + " --steps 2 --data " + odd.string() + o.flags()),
                        {odd.string(), "401 bytes after the header"});
  expect_nothing_written(o);
  // The same tokens without the stray byte train.
  const fs::path good = llmc_file("good-tokens.bin", tokens, 0);
  const CommandResult ok = run(kTrain + " --steps 1 --data " + good.string());
  EXPECT_EQ(ok.status, 0) << ok.output << ok.errors;
}

TEST(LlamaRunBadInput, TokenFileWithATokenOutsideTheVocabulary) {
  std::vector<std::uint16_t> tokens(200, 7);
  tokens[5] = 300;  // vocab 256
  const fs::path file = llmc_file("big-token.bin", tokens, 0);
  const Outputs o = fresh_outputs("bigtoken");
  expect_one_line_error(run(kTrain + " --steps 2 --data " + file.string() + o.flags()),
                        {file.string(), "token 300", "byte offset 1034", "256"});
  expect_nothing_written(o);
}

#ifdef ZEROPLAN_TEST_HAVE_MPI
// Two ranks at stage 3 (each reads its own partition of the checkpoint) and one rank with the same global batch
// (2 micro-steps of 2 rows: exec/data_shard.h) start from the same parameters: the same first loss.
TEST(LlamaRunMpi, TwoRanksAtStage3GiveTheOneRankFirstLoss) {
  const fs::path init = init_checkpoint();
  const fs::path two = fresh("mpi_two_report.json"), one = fresh("mpi_one_report.json");
  const CommandResult a = run(kTrain + " --steps 2 --gpus 2 --stage 3 --init-from " + init.string() + " --report " +
                              two.string());
  ASSERT_EQ(a.status, 0) << a.output << a.errors;
  const CommandResult b = run(kTrain + " --steps 2 --grad-accum 2 --stage 0 --init-from " + init.string() +
                              " --report " + one.string());
  ASSERT_EQ(b.status, 0) << b.output << b.errors;
  const double l2 = report_losses(two).at(0), l1 = report_losses(one).at(0);
  EXPECT_NEAR(l2, l1, 1e-6 * std::abs(l1));
  // Without --init-from too (the seeded initialization is the same at every alignment).
  const fs::path two_plain = fresh("mpi_two_plain.json"), one_plain = fresh("mpi_one_plain.json");
  ASSERT_EQ(run(kTrain + " --steps 2 --gpus 2 --stage 3 --report " + two_plain.string()).status, 0);
  ASSERT_EQ(run(kTrain + " --steps 2 --grad-accum 2 --report " + one_plain.string()).status, 0);
  const double p2 = report_losses(two_plain).at(0), p1 = report_losses(one_plain).at(0);
  EXPECT_NEAR(p2, p1, 1e-6 * std::abs(p1));
  EXPECT_NE(p1, l1);
}
#endif

// ---- LoRA (--lora-rank ...) on the CPU backend, and `zeroplan export --adapter` ----

const std::string kLora = " --lora-rank 4 --lora-alpha 8 --lora-targets q_proj,v_proj,down_proj";

// A LoRA run from a base checkpoint saves its adapters; export --adapter writes PEFT's files, which Python's
// safetensors reads back under PEFT's names and shapes (lora_A [r, in], lora_B [out, r]).
TEST(LoraRun, InitFromTrainsTheAdaptersAndExportWritesPeftFiles) {
  const fs::path init = init_checkpoint();
  const fs::path save = fresh("lora_save"), adapter = fresh("lora_adapter"), grads = fresh("lora_grads.safetensors");
  const CommandResult r = run(kTrain + kLora + " --steps 3 --stage 2 --init-from " + init.string() + " --save-dir " +
                              save.string() + " --save-grads " + grads.string());
  ASSERT_EQ(r.status, 0) << r.output << r.errors;
  EXPECT_NE(r.output.find("initialized the frozen base from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trainable params: 3,584"), std::string::npos) << r.output;
  // The first step's gradients are the adapters' (B's only nonzero: B starts at zero, so A's gradient is zero).
  const nlohmann::json gh = header_of(grads);
  ASSERT_TRUE(gh.is_object());
  EXPECT_TRUE(gh.contains("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight")) << gh.dump();
  EXPECT_FALSE(gh.contains("model.layers.0.self_attn.q_proj.weight"));
  const CommandResult e = run("export --checkpoint " + save.string() + " --adapter " + adapter.string());
  ASSERT_EQ(e.status, 0) << e.output << e.errors;
  const CommandResult py = run_command("/usr/bin/python3 " + std::string(ZEROPLAN_SOURCE_DIR) +
                                       "/tests/cli/adapter_check.py " + adapter.string());
  ASSERT_EQ(py.status, 0) << py.errors;
  const nlohmann::json got = nlohmann::json::parse(py.output);
  const nlohmann::json& t = got.at("tensors");
  EXPECT_EQ(t.size(), 2u * 3 * 2);
  EXPECT_EQ(t.at("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), nlohmann::json({4, 64}));
  EXPECT_EQ(t.at("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"), nlohmann::json({32, 4}));
  EXPECT_EQ(t.at("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"), nlohmann::json({4, 160}));
  EXPECT_EQ(got.at("nonzero_b"), 6);  // three steps moved every B off zero
  EXPECT_TRUE(got.at("finite").get<bool>());
  const nlohmann::json& c = got.at("config");
  EXPECT_EQ(c.at("peft_type"), "LORA");
  EXPECT_EQ(c.at("task_type"), "CAUSAL_LM");
  EXPECT_EQ(c.at("r"), 4);
  EXPECT_EQ(c.at("lora_alpha"), 8.0);
  EXPECT_EQ(c.at("target_modules"), nlohmann::json({"q_proj", "v_proj", "down_proj"}));
  EXPECT_EQ(c.at("lora_dropout"), 0.0);
  EXPECT_EQ(c.at("bias"), "none");
  EXPECT_EQ(c.at("fan_in_fan_out"), false);
  EXPECT_EQ(c.at("base_model_name_or_path"), init.string());
  // The adapters' checkpoint is not a model: --out says to use --adapter; a model's checkpoint has no adapters.
  expect_one_line_error(run("export --checkpoint " + save.string() + " --out " + fresh("x.safetensors").string()),
                        {"--checkpoint", "--adapter"});
  const fs::path plain = fresh("plain_save");
  ASSERT_EQ(run(kTrain + " --steps 1 --save-dir " + plain.string()).status, 0);
  expect_one_line_error(run("export --checkpoint " + plain.string() + " --adapter " + fresh("a2").string()),
                        {"--checkpoint", "no LoRA"});
  expect_one_line_error(run("export --checkpoint " + save.string()), {"--out", "--adapter"});
  // Resuming needs the same adapters and, trained on a checkpoint's base, that base again.
  expect_one_line_error(run(kTrain + kLora + " --steps 4 --stage 2 --resume " + save.string()), {"--init-from"});
  expect_one_line_error(run(kTrain + " --lora-rank 8 --lora-targets q_proj,v_proj,down_proj --steps 4 --resume " +
                            save.string() + " --init-from " + init.string()),
                        {"--resume", "r 4 (this run: 8)"});
  const CommandResult resumed = run(kTrain + kLora + " --steps 4 --stage 3 --resume " + save.string() + " --init-from " +
                                    init.string());
  EXPECT_EQ(resumed.status, 0) << resumed.output << resumed.errors;
}

// --init-adapter starts from an adapter PEFT's way (here one `export --adapter` wrote after three steps): its B is no
// longer zero, so step 1's lora_A gradients are not zero either (from PEFT's initialisation they are); after a step
// at a learning rate too small to move an fp32 value, the exported adapter is the one read, bit for bit. An adapter
// of other LoRA settings, or without LoRA, is one line naming adapter_config.json's field or the flag.
TEST(LoraRun, InitAdapterStartsFromAPeftAdapter) {
  const fs::path init = init_checkpoint();
  const fs::path save = fresh("lora_ia_save"), adapter = fresh("lora_ia_adapter");
  ASSERT_EQ(run(kTrain + kLora + " --steps 3 --init-from " + init.string() + " --save-dir " + save.string()).status, 0);
  ASSERT_EQ(run("export --checkpoint " + save.string() + " --adapter " + adapter.string()).status, 0);
  const fs::path again = fresh("lora_ia_again"), again_adapter = fresh("lora_ia_again_adapter");
  const fs::path grads = fresh("lora_ia_grads.safetensors");
  const CommandResult r = run(kTrain + kLora + " --steps 1 --warmup-steps 0 --lr 1e-30 --stage 3 --gpus 2 --init-from " +
                              init.string() + " --init-adapter " + adapter.string() + " --save-dir " + again.string());
#if defined(ZEROPLAN_TEST_HAVE_MPI)
  ASSERT_EQ(r.status, 0) << r.output << r.errors;
#else
  if (r.status != 0) GTEST_SKIP() << "2 CPU ranks need the MPI communicator: " << r.errors;
#endif
  EXPECT_NE(r.output.find("initialized the adapters from"), std::string::npos) << r.output;
  ASSERT_EQ(run("export --checkpoint " + again.string() + " --adapter " + again_adapter.string()).status, 0);
  const std::string check = "/usr/bin/python3 " + std::string(ZEROPLAN_SOURCE_DIR) + "/tests/cli/adapter_check.py ";
  const CommandResult same = run_command(check + again_adapter.string() + " " + adapter.string());
  ASSERT_EQ(same.status, 0) << same.errors;
  EXPECT_TRUE(nlohmann::json::parse(same.output).at("equal_to_other").get<bool>()) << same.output;
  const CommandResult one = run(kTrain + kLora + " --steps 1 --warmup-steps 0 --init-from " + init.string() +
                                " --init-adapter " + adapter.string() + " --save-grads " + grads.string());
  ASSERT_EQ(one.status, 0) << one.output << one.errors;
  const CommandResult g = run_command(
      "/usr/bin/python3 -c \"import sys, numpy as np; from safetensors.numpy import load_file; t = load_file(sys.argv[1]); "
      "print(sum(1 for k, v in t.items() if k.endswith('lora_A.weight') and np.any(v != 0)))\" " + grads.string());
  ASSERT_EQ(g.status, 0) << g.errors;
  EXPECT_EQ(std::stoi(g.output), 6) << "every lora_A's gradient nonzero once B is";
  // Other settings than the adapter's, no LoRA, no adapter there.
  expect_one_line_error(run(kTrain + " --lora-rank 4 --lora-alpha 16 --lora-targets q_proj,v_proj,down_proj --steps 1 "
                                     "--init-adapter " + adapter.string()),
                        {"adapter_config.json", "lora_alpha", "--lora-alpha"});
  expect_one_line_error(run(kTrain + " --lora-rank 4 --lora-alpha 8 --lora-targets q_proj,v_proj --steps 1 "
                                     "--init-adapter " + adapter.string()),
                        {"adapter_config.json", "target_modules"});
  expect_one_line_error(run(kTrain + " --steps 1 --init-adapter " + adapter.string()), {"--init-adapter", "--lora-rank"});
  expect_one_line_error(run(kTrain + kLora + " --steps 1 --init-adapter " + fresh("no_adapter_here").string()),
                        {"--init-adapter", "no such file"});
}

TEST(LoraRun, QloraTrainsOnTheCpuBackend) {
  const CommandResult r = run(kTrain + kLora + " --quantize-base nf4 --stage 1 --steps 3");
  ASSERT_EQ(r.status, 0) << r.output << r.errors;
  EXPECT_FALSE(printed_loss(r.output, 3, 3).empty()) << r.output;
}

// LoRA runs on the CUDA backend too (exec/cuda/cuda_trainer.cu): with a GPU it trains the adapters; without one,
// or in a build without the CUDA executor, the one line names the missing device, not LoRA.
TEST(LoraRun, CudaBackendTrainsOrNamesTheMissingDevice) {
  const CommandResult r = run("run --model " + kTinyLlama + " --backend cuda --micro-batch 2 --seq 32" + kLora +
                              " --quantize-base nf4 --steps 3");
  if (r.status == 0) {
    EXPECT_FALSE(printed_loss(r.output, 3, 3).empty()) << r.output;
    return;
  }
  expect_one_line_error(r, {"--backend", "try --backend cpu"});
  EXPECT_EQ(r.errors.find("LoRA"), std::string::npos) << r.errors;
}

TEST(LoraRunBadInput, OneLineNamingTheFlag) {
  expect_one_line_error(run(kTrain + " --quantize-base nf4 --steps 1"), {"--quantize-base"});
  expect_one_line_error(run(kTrain + kLora + " --quantize-base nf4 --stage 3 --steps 1"), {"--quantize-base", "stage 3"});
  expect_one_line_error(run(kTrain + kLora + " --quantize-base int8 --steps 1"), {"--quantize-base", "int8"});
  expect_one_line_error(run(kTrain + kLora + " --stage 2 --offload-optimizer cpu --steps 1"), {"--offload-optimizer"});
  expect_one_line_error(run("run --model resnet101 --backend cpu --lora-rank 4 --steps 1"), {"--lora-rank", "layer list"});
}

#ifdef ZEROPLAN_TEST_HAVE_MPI
// Two ranks at stage 3 (the base partitioned, each rank reading its share of the checkpoint) against one rank
// over the same global batch: the same losses over 4 steps.
TEST(LoraRunMpi, TwoRanksAtStage3EqualOneRank) {
  const fs::path init = init_checkpoint();
  const fs::path two = fresh("lora_two.json"), one = fresh("lora_one.json");
  const CommandResult a = run(kTrain + kLora + " --steps 4 --gpus 2 --stage 3 --init-from " + init.string() +
                              " --report " + two.string());
  ASSERT_EQ(a.status, 0) << a.output << a.errors;
  const CommandResult b = run(kTrain + kLora + " --steps 4 --grad-accum 2 --init-from " + init.string() + " --report " +
                              one.string());
  ASSERT_EQ(b.status, 0) << b.output << b.errors;
  const std::vector<double> l2 = report_losses(two), l1 = report_losses(one);
  ASSERT_EQ(l2.size(), l1.size());
  for (std::size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l2[i], l1[i], 1e-6 * std::abs(l1[i])) << "step " << i + 1;
}
#endif

}  // namespace
