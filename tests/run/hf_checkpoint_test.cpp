// run/hf_checkpoint.h: Hugging Face checkpoints in and out of the executor's flat layout.
//
// - Round trip: a CPU trainer's parameters (one rank) written by write_hf_safetensors, read back through
//   HfCheckpointSource into a layout aligned for 4 ranks (whole and in odd-sized pieces), equal bit for bit tensor
//   by tensor (by name: the layouts differ in alignment), the gaps and padded vocabulary rows 0; written again from
//   the 4-rank layout, the file is byte-identical. A Llama shape (GQA, q/k/v biases, untied) and a GPT-2 shape
//   (vocabulary 257 padded to 384; Conv1D weights stored transposed).
// - Names as transformers writes them, checked independently of the name table: /usr/bin/python3 with numpy and
//   safetensors writes LlamaForCausalLM's tensor names (spelled out in the script), the trainer loads them and
//   writes its parameters back, and the script compares (same keys, bit-equal values). Fused rows checked at
//   known offsets (q/k/v rows 0 / 64 / 96; gate/up rows 0 / 160).
// - Bad inputs: each a one-line InputError naming the file and the tensor (and the expected shape).
#include "tests/run/python_script.h"
#include "run/hf_checkpoint.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "exec/exec_config.h"
#include "exec/param_layout.h"
#include "exec/trainer.h"
#include "exec/zero/zero_partition.h"
#include "run/safetensors_file.h"

namespace zeroplan {
namespace {

namespace fs = std::filesystem;

// ---- shapes and trainers ----------------------------------------------------------------------------------

exec::ModelShape llama_shape(bool qkv_bias) {
  exec::ModelShape s = exec::make_llama_shape(256, 64, 2, 4, 2, 160, 64);
  s.qkv_bias = qkv_bias;
  s.tied_head = false;
  return s;
}
exec::ModelShape gpt2_shape() { return exec::make_shape(257, 64, 2, 2, 64); }

exec::ExecConfig config_for(const exec::ModelShape& shape) {
  exec::ExecConfig c;
  c.shape = shape;
  c.micro_batch = 1;
  c.seq_len = 16;
  c.precision = exec::ExecPrecision::fp32;
  c.seed = 4242;
  return c;
}

FlatTensorReader reader_of(const std::vector<float>& flat) {
  return [&flat](const exec::ParamTensor& t, std::int64_t first, std::int64_t count, float* out) {
    ASSERT_LE(t.offset + first + count, static_cast<std::int64_t>(flat.size()));
    std::memcpy(out, flat.data() + t.offset + first, static_cast<std::size_t>(count) * sizeof(float));
  };
}

const exec::ParamTensor& tensor_named(const exec::ParamLayout& layout, const std::string& name) {
  for (const exec::ParamTensor& t : layout.tensors())
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool same_bits(const float* a, const float* b, std::int64_t n) {
  return std::memcmp(a, b, static_cast<std::size_t>(n) * sizeof(float)) == 0;
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';
    dir_ = fs::temp_directory_path() / ("zeroplan_hf_checkpoint_test_" + std::to_string(::getpid())) / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (HasFailure()) return;  // kept for the files the failure names
    fs::remove_all(dir_);
    std::error_code not_empty;  // another test's directory still there (it failed): the process's folder stays
    fs::remove(dir_.parent_path(), not_empty);
  }
  fs::path dir_;
};

// ---- a. round trip ----------------------------------------------------------------------------------------

void round_trip(const exec::ModelShape& shape, const fs::path& dir) {
  auto trainer = exec::make_cpu_trainer(config_for(shape));
  const exec::ParamLayout& one = trainer->layout();
  const std::vector<float> params = trainer->params();
  ASSERT_EQ(static_cast<std::int64_t>(params.size()), one.total());

  const fs::path file1 = dir / "one.safetensors", file2 = dir / "two.safetensors";
  write_hf_safetensors(file1.string(), one, reader_of(params), "F32", {{"format", "pt"}});

  const exec::ParamLayout four(shape, exec::zero_alignment(4));
  ASSERT_EQ(four.align(), 256);
  HfCheckpointSource source(file1.string(), four, "--init-from");
  EXPECT_EQ(source.description(), file1.string());
  const exec::ZeroEngine::StateSource state = source.state_source();

  // Whole range, with the moments: 0 (a fresh start). Poisoned first so that nothing is left unwritten.
  const std::int64_t n = four.total();
  std::vector<float> filled(static_cast<std::size_t>(n), 7.0f), m(filled.size(), 7.0f), v(filled.size(), 7.0f);
  state(0, n, filled.data(), m.data(), v.data());
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(m[i]), 0u) << i;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(v[i]), 0u) << i;
  }
  // The same in pieces that cut through tensors and rows (each rank's partition is such a range), moments null.
  for (const std::int64_t piece : {std::int64_t{997}, std::int64_t{4099}, n / 4}) {
    std::vector<float> pieces(filled.size(), 7.0f);
    for (std::int64_t b = 0; b < n; b += piece) state(b, std::min(piece, n - b), pieces.data() + b, nullptr, nullptr);
    ASSERT_TRUE(same_bits(pieces.data(), filled.data(), n)) << "pieces of " << piece;
  }

  // Every tensor's values, by name; padded rows and gaps 0.
  std::vector<char> covered(filled.size(), 0);
  ASSERT_EQ(one.tensors().size(), four.tensors().size());
  for (const exec::ParamTensor& t : one.tensors()) {
    const exec::ParamTensor& u = tensor_named(four, t.name);
    ASSERT_EQ(u.numel(), t.numel()) << t.name;
    EXPECT_EQ(u.offset % 256, 0) << t.name;
    const std::int64_t live = one.live_elements(t);
    EXPECT_TRUE(same_bits(filled.data() + u.offset, params.data() + t.offset, live)) << t.name;
    for (std::int64_t i = 0; i < live; ++i) covered[u.offset + i] = 1;
  }
  std::int64_t zeros = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (!covered[i]) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(filled[i]), 0u) << "element " << i << " (gap or padded row)";
      ++zeros;
    }
  EXPECT_GT(zeros, 0) << "the 4-rank layout has gaps";
  if (shape.vocab != shape.padded_vocab) EXPECT_GE(zeros, (shape.padded_vocab - shape.vocab) * shape.hidden);

  write_hf_safetensors(file2.string(), four, reader_of(filled), "F32", {{"format", "pt"}});
  const std::string a = bytes_of(file1), b = bytes_of(file2);
  EXPECT_GT(a.size(), static_cast<std::size_t>(one.model_params() * 4));
  EXPECT_TRUE(a == b) << "the file written from the 4-rank layout differs from the one written from one rank";
}

TEST_F(HfCheckpointTest, LlamaRoundTripsBitForBitAcrossAlignments) {
  const exec::ModelShape s = llama_shape(/*qkv_bias=*/true);
  ASSERT_EQ(s.naming, exec::TensorNaming::llama);
  round_trip(s, dir_);
}

TEST_F(HfCheckpointTest, Gpt2RoundTripsBitForBitAcrossAlignments) {
  const exec::ModelShape s = gpt2_shape();
  ASSERT_EQ(s.padded_vocab, 384);
  round_trip(s, dir_);
}

// ---- b. transformers' names, from Python -----------------------------------------------------------------

// `make FILE BIAS`: LlamaForCausalLM's tensors for the tiny Llama (vocab 256, hidden 64, 4 heads of 16, 2 kv
// heads, 2 layers, intermediate 160, untied; q/k/v biases when BIAS is 1), seeded float32 values.
// `check FILE BIAS`: FILE holds exactly those tensors, float32, same shapes, equal bit for bit; prints "ok N".
const char* kLlamaPython = R"PY(
import sys
import numpy as np
from safetensors.numpy import save_file, load_file

V, C, L, H, KV, HS, F = 256, 64, 2, 4, 2, 16, 160

def tensors(bias):
    rng = np.random.default_rng(20260527 + bias)
    t = {}
    def add(name, shape):
        t[name] = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    add("model.embed_tokens.weight", (V, C))
    for i in range(L):
        p = "model.layers.%d." % i
        add(p + "self_attn.q_proj.weight", (H * HS, C))
        add(p + "self_attn.k_proj.weight", (KV * HS, C))
        add(p + "self_attn.v_proj.weight", (KV * HS, C))
        add(p + "self_attn.o_proj.weight", (C, H * HS))
        if bias:
            add(p + "self_attn.q_proj.bias", (H * HS,))
            add(p + "self_attn.k_proj.bias", (KV * HS,))
            add(p + "self_attn.v_proj.bias", (KV * HS,))
        add(p + "mlp.gate_proj.weight", (F, C))
        add(p + "mlp.up_proj.weight", (F, C))
        add(p + "mlp.down_proj.weight", (C, F))
        add(p + "input_layernorm.weight", (C,))
        add(p + "post_attention_layernorm.weight", (C,))
    add("model.norm.weight", (C,))
    add("lm_head.weight", (V, C))
    return t

mode, path, bias = sys.argv[1], sys.argv[2], int(sys.argv[3])
want = tensors(bias)
if mode == "make":
    save_file(want, path, metadata={"format": "pt"})
    print("made %d" % len(want))
else:
    got = load_file(path)
    if sorted(got) != sorted(want):
        sys.exit("keys differ: extra %s, missing %s" % (sorted(set(got) - set(want)), sorted(set(want) - set(got))))
    for name in sorted(want):
        g, w = got[name], want[name]
        if g.dtype != np.float32 or g.shape != w.shape:
            sys.exit("%s: %s %s, expected float32 %s" % (name, g.dtype, g.shape, w.shape))
        if not np.array_equal(g, w) or not np.array_equal(g.view(np.uint32), w.view(np.uint32)):
            i = int(np.argmax(g.reshape(-1).view(np.uint32) != w.reshape(-1).view(np.uint32)))
            sys.exit("%s: element %d is %r, expected %r" % (name, i, g.reshape(-1)[i], w.reshape(-1)[i]))
    print("ok %d" % len(want))
)PY";

using Python = zeroplan::test::PythonResult;
Python run_python(const fs::path& dir, const std::string& args) {
  return zeroplan::test::run_python_script(dir, "llama_names.py", kLlamaPython, args);
}
std::string python_missing() { return zeroplan::test::python_modules_missing("numpy, safetensors.numpy"); }

class TransformersNames : public HfCheckpointTest, public ::testing::WithParamInterface<bool> {};

TEST_P(TransformersNames, LlamaForCausalLMCheckpointLoadsAndWritesBackUnchanged) {
  if (const std::string why = python_missing(); !why.empty()) GTEST_SKIP() << why;
  const bool bias = GetParam();
  const std::string flag = bias ? "1" : "0";
  const fs::path file1 = dir_ / "from_python.safetensors", file2 = dir_ / "from_trainer.safetensors";
  const Python made = run_python(dir_, "make " + file1.string() + " " + flag);
  ASSERT_EQ(made.status, 0) << made.output;
  const std::size_t count = bias ? 27 : 21;
  ASSERT_EQ(made.output, "made " + std::to_string(count) + "\n");

  auto trainer = exec::make_cpu_trainer(config_for(llama_shape(bias)));
  const exec::ParamLayout& layout = trainer->layout();
  {
    HfCheckpointSource source(file1.string(), layout, "--init-from");
    trainer->restore_state(source.state_source(), 0, trainer->loss_scaler_state());
  }
  const std::vector<float> params = trainer->params();
  write_hf_safetensors(file2.string(), layout, reader_of(params), "F32", {{"format", "pt"}});
  const Python checked = run_python(dir_, "check " + file2.string() + " " + flag);
  EXPECT_EQ(checked.status, 0) << checked.output;
  EXPECT_EQ(checked.output, "ok " + std::to_string(count) + "\n");

  // The fused tensors, at known rows: q rows 0-63, k rows 64-95, v rows 96-127; gate rows 0-159, up 160-319.
  const SafetensorsCheckpoint original(file1.string());
  auto row = [&](const std::string& name, std::int64_t r, std::int64_t width) {
    const TensorInfo* info = original.find(name);
    EXPECT_NE(info, nullptr) << name;
    std::vector<float> out(static_cast<std::size_t>(width), -1.0f);
    if (info) original.read_as_float(*info, r * width, width, out.data());
    return out;
  };
  const exec::ParamTensor& qkv = tensor_named(layout, "layers.0.self_attn.qkv_proj.weight");
  const exec::ParamTensor& gate_up = tensor_named(layout, "layers.0.mlp.gate_up_proj.weight");
  ASSERT_EQ(qkv.rows, 128);
  ASSERT_EQ(qkv.cols, 64);
  ASSERT_EQ(gate_up.rows, 320);
  ASSERT_EQ(gate_up.cols, 64);
  EXPECT_EQ(&qkv, &layout.block(0, exec::kQkvW));
  EXPECT_EQ(&gate_up, &layout.block(0, exec::kFcW));
  const struct {
    const char* name;
    const exec::ParamTensor& fused;
    std::int64_t fused_row;
  } rows[] = {{"model.layers.0.self_attn.q_proj.weight", qkv, 0},
              {"model.layers.0.self_attn.k_proj.weight", qkv, 64},
              {"model.layers.0.self_attn.v_proj.weight", qkv, 96},
              {"model.layers.0.mlp.gate_proj.weight", gate_up, 0},
              {"model.layers.0.mlp.up_proj.weight", gate_up, 160}};
  for (const auto& r : rows) {
    const std::vector<float> want = row(r.name, 0, 64);
    EXPECT_TRUE(same_bits(params.data() + r.fused.offset + r.fused_row * 64, want.data(), 64))
        << r.name << " row 0 at fused row " << r.fused_row;
    EXPECT_NE(want[0], 0.0f);
  }
  // Layer 1's k_proj row 5, to be sure it is not only layer 0.
  {
    const exec::ParamTensor& qkv1 = tensor_named(layout, "layers.1.self_attn.qkv_proj.weight");
    const std::vector<float> want = row("model.layers.1.self_attn.k_proj.weight", 5, 64);
    EXPECT_TRUE(same_bits(params.data() + qkv1.offset + (64 + 5) * 64, want.data(), 64));
  }
  if (bias) {
    const exec::ParamTensor& qkv_b = tensor_named(layout, "layers.0.self_attn.qkv_proj.bias");
    ASSERT_EQ(qkv_b.numel(), 128);
    EXPECT_TRUE(same_bits(params.data() + qkv_b.offset, row("model.layers.0.self_attn.q_proj.bias", 0, 64).data(), 64));
    EXPECT_TRUE(same_bits(params.data() + qkv_b.offset + 64, row("model.layers.0.self_attn.k_proj.bias", 0, 32).data(), 32));
    EXPECT_TRUE(same_bits(params.data() + qkv_b.offset + 96, row("model.layers.0.self_attn.v_proj.bias", 0, 32).data(), 32));
  }
  // The untied head and the embedding are separate.
  const exec::ParamTensor& head = tensor_named(layout, "lm_head");
  EXPECT_TRUE(same_bits(params.data() + head.offset + 3 * 64, row("lm_head.weight", 3, 64).data(), 64));
  EXPECT_TRUE(same_bits(params.data() + layout.wte().offset + 3 * 64, row("model.embed_tokens.weight", 3, 64).data(), 64));
}

INSTANTIATE_TEST_SUITE_P(QkvBias, TransformersNames, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "WithQkvBias" : "NoBias"; });

// ---- c. bad inputs ----------------------------------------------------------------------------------------

// A safetensors file written byte by byte (any dtype, any header), as the format's README lays it out.
struct RawTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
};

std::int64_t elements_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

void write_raw(const fs::path& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::int64_t at = 0;
  for (const RawTensor& t : tensors) {
    const std::int64_t bytes = elements_of(t.shape) * safetensors_dtype_size(t.dtype);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::string out(8, '\0');
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += text;
  std::string data(static_cast<std::size_t>(at), '\0');
  for (std::size_t i = 0; i < data.size(); i += 4) data[i] = static_cast<char>(i * 7);  // not all zero
  out += data;
  std::ofstream(path, std::ios::binary) << out;
}

// The tensors a checkpoint for `layout` holds, from the name table.
std::vector<RawTensor> complete(const exec::ParamLayout& layout) {
  std::vector<RawTensor> out;
  for (const HfTensorMapping& m : hf_tensor_mappings(layout))
    for (const HfTensorPiece& p : m.pieces) out.push_back({p.name, "F32", p.shape});
  return out;
}

std::vector<RawTensor> without(std::vector<RawTensor> tensors, const std::string& name) {
  std::erase_if(tensors, [&](const RawTensor& t) { return t.name == name; });
  return tensors;
}

// HfCheckpointSource refuses `path` with an InputError naming each of `mentions`, on one line.
void expect_refused(const fs::path& path, const exec::ParamLayout& layout, const std::vector<std::string>& mentions) {
  try {
    HfCheckpointSource source(path.string(), layout, "--init-from");
    ADD_FAILURE() << path << " was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const std::string& m : mentions) EXPECT_NE(what.find(m), std::string::npos) << "'" << m << "' not in: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an InputError: " << e.what();
  }
}

TEST_F(HfCheckpointTest, CompleteRawCheckpointIsAccepted) {
  // The baseline the bad inputs below each change in one way.
  const exec::ParamLayout layout(llama_shape(true));
  const fs::path good = dir_ / "good.safetensors";
  write_raw(good, complete(layout));
  EXPECT_NO_THROW(HfCheckpointSource(good.string(), layout, "--init-from"));
  // What transformers itself ignores: rotary inverse frequencies of old Llama checkpoints.
  std::vector<RawTensor> with_rotary = complete(layout);
  with_rotary.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {8}});
  write_raw(dir_ / "rotary.safetensors", with_rotary);
  EXPECT_NO_THROW(HfCheckpointSource((dir_ / "rotary.safetensors").string(), layout, "--init-from"));
}

TEST_F(HfCheckpointTest, MissingTensorNamesFileTensorAndShape) {
  const exec::ParamLayout layout(llama_shape(true));
  const fs::path file = dir_ / "missing.safetensors";
  write_raw(file, without(complete(layout), "model.layers.1.mlp.down_proj.weight"));
  expect_refused(file, layout, {file.string(), "model.layers.1.mlp.down_proj.weight", "missing", "[64, 160]"});
  // A bias the shape has (q/k/v bias) but the checkpoint lacks: a Llama without attention_bias given to Qwen2.
  const fs::path no_bias = dir_ / "no_bias.safetensors";
  write_raw(no_bias, complete(exec::ParamLayout(llama_shape(false))));
  expect_refused(no_bias, layout, {no_bias.string(), "model.layers.0.self_attn.q_proj.bias", "missing", "[64]"});
}

TEST_F(HfCheckpointTest, ExtraTensorNamesFileAndTensor) {
  const exec::ParamLayout layout(llama_shape(false));
  std::vector<RawTensor> tensors = complete(layout);
  tensors.push_back({"model.layers.2.self_attn.q_proj.weight", "F32", {64, 64}});
  const fs::path file = dir_ / "extra.safetensors";
  write_raw(file, tensors);
  expect_refused(file, layout, {file.string(), "model.layers.2.self_attn.q_proj.weight", "not part of this model"});
  // q/k/v biases given to a model without them.
  const fs::path biased = dir_ / "biased.safetensors";
  write_raw(biased, complete(exec::ParamLayout(llama_shape(true))));
  expect_refused(biased, layout, {biased.string(), "_proj.bias", "not part of this model"});
}

TEST_F(HfCheckpointTest, MisShapedTensorNamesFileTensorAndBothShapes) {
  const exec::ParamLayout layout(llama_shape(false));
  std::vector<RawTensor> tensors = complete(layout);
  for (RawTensor& t : tensors)
    if (t.name == "model.layers.1.self_attn.k_proj.weight") t.shape = {64, 64};  // multi-head, not GQA
  const fs::path file = dir_ / "shape.safetensors";
  write_raw(file, tensors);
  expect_refused(file, layout, {file.string(), "model.layers.1.self_attn.k_proj.weight", "[64, 64]", "[32, 64]"});
}

TEST_F(HfCheckpointTest, IntegerTensorNamesFileTensorAndDtype) {
  const exec::ParamLayout layout(llama_shape(false));
  std::vector<RawTensor> tensors = complete(layout);
  for (RawTensor& t : tensors)
    if (t.name == "model.norm.weight") t.dtype = "I32";
  const fs::path file = dir_ / "int.safetensors";
  write_raw(file, tensors);
  expect_refused(file, layout, {file.string(), "model.norm.weight", "I32"});
}

TEST_F(HfCheckpointTest, Gpt2CheckpointGivenToLlamaSaysAnotherArchitecture) {
  const exec::ParamLayout gpt2(gpt2_shape()), llama(llama_shape(false));
  const fs::path file = dir_ / "gpt2.safetensors";
  std::vector<float> zeros(static_cast<std::size_t>(gpt2.total()), 0.5f);
  write_hf_safetensors(file.string(), gpt2, reader_of(zeros), "F32", {{"format", "pt"}});
  expect_refused(file, llama, {file.string(), "model.embed_tokens.weight", "missing", "another architecture"});
  // And the other way round.
  const fs::path lfile = dir_ / "llama.safetensors";
  std::vector<float> lzeros(static_cast<std::size_t>(llama.total()), 0.5f);
  write_hf_safetensors(lfile.string(), llama, reader_of(lzeros), "F32", {{"format", "pt"}});
  expect_refused(lfile, gpt2, {lfile.string(), "wte.weight", "missing", "another architecture"});
  // GPT2LMHeadModel's "transformer." prefix is accepted.
  std::vector<RawTensor> prefixed = complete(gpt2);
  for (RawTensor& t : prefixed) t.name = "transformer." + t.name;
  prefixed.push_back({"transformer.h.0.attn.bias", "F32", {1, 1, 64, 64}});  // the causal-mask buffer
  write_raw(dir_ / "prefixed.safetensors", prefixed);
  EXPECT_NO_THROW(HfCheckpointSource((dir_ / "prefixed.safetensors").string(), gpt2, "--init-from"));
}

TEST_F(HfCheckpointTest, ShardedIndexWithAMissingShardNamesIndexShardAndTensor) {
  const exec::ParamLayout layout(llama_shape(false));
  const std::vector<RawTensor> all = complete(layout);
  std::vector<RawTensor> first(all.begin(), all.begin() + all.size() / 2);
  write_raw(dir_ / "model-00001-of-00002.safetensors", first);
  nlohmann::json map = nlohmann::json::object();
  for (std::size_t i = 0; i < all.size(); ++i)
    map[all[i].name] = i < all.size() / 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  const fs::path index = dir_ / "model.safetensors.index.json";
  std::ofstream(index) << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2);
  // The message names the first tensor (by name) the weight_map puts in the missing shard.
  std::string first_in_second = all[all.size() / 2].name;
  for (std::size_t i = all.size() / 2; i < all.size(); ++i) first_in_second = std::min(first_in_second, all[i].name);
  expect_refused(index, layout, {index.string(), "model-00002-of-00002.safetensors", "missing", first_in_second});
  // The folder holding the index: the same.
  expect_refused(dir_, layout, {"model-00002-of-00002.safetensors", "missing"});
  // With the second shard there, it loads.
  std::vector<RawTensor> second(all.begin() + all.size() / 2, all.end());
  write_raw(dir_ / "model-00002-of-00002.safetensors", second);
  EXPECT_NO_THROW(HfCheckpointSource(index.string(), layout, "--init-from"));
}

TEST_F(HfCheckpointTest, TruncatedFileNamesTheFile) {
  const exec::ParamLayout layout(llama_shape(false));
  const fs::path good = dir_ / "good.safetensors";
  write_raw(good, complete(layout));
  const std::string bytes = bytes_of(good);
  for (const std::size_t keep : {bytes.size() - 4, bytes.size() / 2, std::size_t{100}, std::size_t{5}}) {
    const fs::path cut = dir_ / ("cut" + std::to_string(keep) + ".safetensors");
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, keep);
    SCOPED_TRACE(keep);
    expect_refused(cut, layout, {cut.string()});
  }
  // The last tensor cut short names it.
  const fs::path cut = dir_ / "cut_last.safetensors";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 4);
  expect_refused(cut, layout, {cut.string(), complete(layout).back().name});
  expect_refused(dir_ / "no_such.safetensors", layout, {(dir_ / "no_such.safetensors").string()});
}

}  // namespace
}  // namespace zeroplan
