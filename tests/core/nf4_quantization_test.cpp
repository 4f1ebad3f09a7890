// The NF4 quantiser (core/nf4_quantization.h): its tables, its packing, its round trip, the choice of the nearest
// code at both levels, and (when the golden file is there) bitsandbytes 0.50's own codes for the same weights.
#include "core/nf4_quantization.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/lora_modules.h"
#include "core/model_description.h"

namespace zeroplan {
namespace {

std::vector<float> normal_weights(std::int64_t n, unsigned seed, float std) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, std);
  std::vector<float> w(static_cast<std::size_t>(n));
  for (float& x : w) x = dist(gen);
  return w;
}

// The index of the value of `table` nearest to x, and whether another is as near within `tie`.
template <std::size_t N>
int nearest(const std::array<float, N>& table, float x, double tie, bool* ambiguous) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(N); ++i)
    if (std::fabs(double(table[i]) - x) < std::fabs(double(table[best]) - x)) best = i;
  *ambiguous = false;
  for (int i = 0; i < static_cast<int>(N); ++i)
    if (i != best && table[i] != table[best] &&
        std::fabs(std::fabs(double(table[i]) - x) - std::fabs(double(table[best]) - x)) <= tie)
      *ambiguous = true;
  return best;
}

TEST(Nf4Quantization, CodeTableIsBitsandbytesNf4AndTheTreeSplitsAtMidpoints) {
  const auto& v = nf4_code_values();
  EXPECT_EQ(v[0], -1.0f);
  EXPECT_EQ(v[7], 0.0f);
  EXPECT_EQ(v[15], 1.0f);
  EXPECT_EQ(v[1], -0.6961928009986877f);
  EXPECT_EQ(v[8], 0.07958029955625534f);
  EXPECT_EQ(v[14], 0.7229568362236023f);
  for (int i = 0; i + 1 < 16; ++i) {
    ASSERT_LT(v[i], v[i + 1]);
    // Just below and just above the midpoint of two neighbours the tree gives the nearer one.
    const float mid = 0.5f * (v[i] + v[i + 1]);
    EXPECT_EQ(nf4_quantize_normalized(mid - 1e-6f), i) << "below the midpoint of codes " << i << ", " << i + 1;
    EXPECT_EQ(nf4_quantize_normalized(mid + 1e-6f), i + 1) << "above the midpoint of codes " << i << ", " << i + 1;
    EXPECT_EQ(nf4_quantize_normalized(v[i]), i);
  }
  EXPECT_EQ(nf4_quantize_normalized(std::nanf("")), 0);  // an all-zero block: 0 * inf, code 0 as in the kernel
}

TEST(Nf4Quantization, DynamicMapIsSignedSortedWithZeroAndOne) {
  const auto& c = bnb_dynamic_map();
  EXPECT_EQ(c[255], 1.0f);
  // The largest mean of exponent 0: (0.9859375 + 1) / 2, linspace(0.1, 1, 65)'s last two boundaries.
  EXPECT_FLOAT_EQ(c[0], -0.99296875f);
  EXPECT_FLOAT_EQ(c[254], 0.99296875f);
  EXPECT_EQ(c[127], 0.0f);
  int zeros = 0;
  for (int i = 0; i < 256; ++i) {
    if (c[i] == 0.0f) ++zeros;
    if (i > 0) EXPECT_LE(c[i - 1], c[i]);
  }
  EXPECT_EQ(zeros, 1);
  // 127 positive and 127 negative means: the smallest magnitudes are 10^-6 * 0.55.
  EXPECT_FLOAT_EQ(c[128], 0.55e-6f);
  EXPECT_FLOAT_EQ(c[126], -0.55e-6f);
}

TEST(Nf4Quantization, PacksTheFirstElementOfAPairInTheHighNibble) {
  std::vector<float> x(kNf4BlockSize + 3, 0.0f);  // two blocks, an odd count: the last byte half used
  x[0] = 2.0f;    // the absmax of block 0: code 15
  x[1] = -2.0f;   // code 0
  x[2] = 0.0f;    // code 7
  x[3] = 0.16f;   // 0.08 of the absmax: code 8 (0.0796)
  x[kNf4BlockSize + 2] = -0.5f;  // the tail's last element, absmax of block 1: code 0
  const Nf4Tensor t = quantize_nf4(x.data(), static_cast<std::int64_t>(x.size()));
  ASSERT_EQ(t.codes.size(), (x.size() + 1) / 2);
  EXPECT_EQ(t.codes[0], 0xF0);
  EXPECT_EQ(t.codes[1], 0x78);
  EXPECT_EQ(t.code(0), 15);
  EXPECT_EQ(t.code(1), 0);
  EXPECT_EQ(t.code(3), 8);
  EXPECT_EQ(t.codes.back(), 0x00);  // element 66 in the high nibble (code 0); the low nibble unused, 0
  EXPECT_EQ(t.code(kNf4BlockSize), 7);
  EXPECT_EQ(t.blocks(), 2);
  EXPECT_EQ(t.absmax_scales.size(), 1u);
}

TEST(Nf4Quantization, EveryCodeIsTheNearestAtBothLevelsAndTheRoundTripIsBoundedPerBlock) {
  for (const auto& [n, std, seed] : std::vector<std::tuple<std::int64_t, float, unsigned>>{
           {128 * 64, 0.02f, 1u}, {256 * 192 + 17, 1.0f, 2u}, {300 * 64, 0.5f, 3u}}) {
    std::vector<float> x = normal_weights(n, seed, std);
    const Nf4Tensor t = quantize_nf4(x.data(), n);
    const std::vector<float> absmax = nf4_block_absmax(x.data(), n);
    ASSERT_EQ(t.blocks(), (n + 63) / 64);
    ASSERT_EQ(static_cast<std::int64_t>(t.absmax_scales.size()), (t.blocks() + 255) / 256);
    // The sizes the executors allocate before quantising (the CUDA trainer's device copy) are the tensor's own.
    EXPECT_EQ(nf4_blocks(n), t.blocks());
    EXPECT_EQ(nf4_statistics_blocks(n), static_cast<std::int64_t>(t.absmax_scales.size()));
    EXPECT_EQ(nf4_tensor_bytes(n), t.bytes());
    // First level: each element's code is the nearest NF4 value to x / absmax (ties within fp32 rounding aside).
    const auto& nf4 = nf4_code_values();
    for (std::int64_t i = 0; i < n; ++i) {
      const float a = absmax[static_cast<std::size_t>(i / 64)];
      bool tie = false;
      const int want = nearest(nf4, x[i] * (1.0f / a), 1e-6, &tie);
      if (!tie) ASSERT_EQ(t.code(i), want) << "element " << i;
    }
    // Second level: each constant's code is the nearest dynamic-map value to (absmax - offset) / scale.
    double mean = 0;
    for (float a : absmax) mean += a;
    mean /= static_cast<double>(absmax.size());
    EXPECT_NEAR(t.offset, mean, 1e-6 * mean);
    const std::vector<float> dq_absmax = t.block_absmax();
    for (std::size_t b = 0; b < absmax.size(); ++b) {
      const float s = t.absmax_scales[b / 256];
      bool tie = false;
      const int want = nearest(bnb_dynamic_map(), (absmax[b] - t.offset) * (1.0f / s), 1e-6, &tie);
      if (!tie) ASSERT_EQ(t.absmax_codes[b], want) << "constant " << b;
      // The dynamic map's widest gap is below 1/64 of the scale (0.9/64 between means of exponent 0).
      EXPECT_LE(std::fabs(dq_absmax[b] - absmax[b]), s * (0.9f / 128.0f) * 1.0001f) << "constant " << b;
    }
    // Round trip: |c a' - x| <= |c a - x| + |c| |a' - a|: within half the widest NF4 gap (0.152 of the block's
    // absmax, between -1 and -0.696) plus the dequantised absmax's own error.
    float widest = 0;
    for (int k = 0; k + 1 < 16; ++k) widest = std::max(widest, nf4[k + 1] - nf4[k]);
    EXPECT_FLOAT_EQ(widest, 1.0f - 0.6961928009986877f);
    std::vector<float> y(static_cast<std::size_t>(n));
    dequantize_nf4(t, y.data());
    double sq = 0, ref = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t b = static_cast<std::size_t>(i / 64);
      const float bound = 0.5f * widest * absmax[b] + std::fabs(dq_absmax[b] - absmax[b]);
      ASSERT_LE(std::fabs(y[i] - x[i]), bound * 1.0001f) << "element " << i;
      sq += double(y[i] - x[i]) * (y[i] - x[i]);
      ref += double(x[i]) * x[i];
    }
    // NF4 of normal weights: ~10% relative L2 error (QLoRA's information-theoretically optimal 4-bit code).
    EXPECT_LT(std::sqrt(sq / ref), 0.12);
    EXPECT_GT(std::sqrt(sq / ref), 0.05);
    // A range dequantised alone equals the same elements of the whole.
    std::vector<float> part(100);
    dequantize_nf4_range(t, 1000, 100, part.data());
    for (int i = 0; i < 100; ++i) EXPECT_EQ(part[i], y[1000 + i]);
    EXPECT_EQ(t.bytes(), static_cast<std::int64_t>((n + 1) / 2 + t.blocks() + 4 * t.absmax_scales.size() + 4));
  }
}

// ---- bitsandbytes' own codes (bench/lora/bnb_nf4_codes.py on the GPU machine) ----

const char* kGoldenPath = "tests/data/bnb_nf4/bnb_nf4_codes.json";

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? std::nanf("") : INFINITY;
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

float bf16_to_float(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

std::vector<float> sixteen_bit_values(const std::string& hex, const std::string& dtype) {
  const std::vector<std::uint8_t> bytes = from_hex(hex);
  std::vector<float> out(bytes.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint16_t h = static_cast<std::uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
    out[i] = dtype == "bf16" ? bf16_to_float(h) : half_to_float(h);
  }
  return out;
}

// One tensor of ours against one stored case of bitsandbytes' quantize_4bit (the case's x, n elements).
void expect_equals_bitsandbytes_case(const nlohmann::json& c, const std::string& dtype, const std::vector<float>& x,
                                     std::int64_t n, const Nf4Tensor& t) {
  // The first level is exact: max |x| per block and the packed codes.
  const std::vector<float> absmax = nf4_block_absmax(x.data(), n);
  ASSERT_EQ(c.at("absmax").size(), absmax.size());
  for (std::size_t b = 0; b < absmax.size(); ++b) ASSERT_EQ(c.at("absmax")[b].get<double>(), absmax[b]) << "block " << b;
  EXPECT_EQ(from_hex(c.at("codes")), t.codes);
  // The dynamic map, state2's scales and the offset (a mean: torch's CUDA reduction order may differ in the last
  // bits), then each quantised constant, equal unless our normalised value sits within 1e-6 of a midpoint.
  ASSERT_EQ(c.at("state2_blocksize").get<int>(), kNf4StatisticsBlockSize);
  // torch builds the map with its vectorised CPU linspace (a chunk's base plus lane multiples of the step), whose
  // last bit depends on the CPU's vector width: measured on the H200 host, 41 of the 256 entries are one ulp (two: 2)
  // from the scalar formula. Two ulps are allowed; the codes above and below are exact.
  for (int i = 0; i < 256; ++i) {
    const float ours = bnb_dynamic_map()[i];
    const double ulp = std::nextafter(std::fabs(ours), INFINITY) - std::fabs(ours);
    EXPECT_LE(std::fabs(c.at("state2_code")[i].get<double>() - ours), 2 * ulp) << "dynamic map " << i;
  }
  EXPECT_NEAR(c.at("offset").get<double>(), t.offset, 2e-7 * std::fabs(t.offset));
  ASSERT_EQ(c.at("state2_absmax").size(), t.absmax_scales.size());
  for (std::size_t s = 0; s < t.absmax_scales.size(); ++s)
    EXPECT_NEAR(c.at("state2_absmax")[s].get<double>(), t.absmax_scales[s], 3e-7 * t.absmax_scales[s]);  // 2 ulps
  const std::vector<std::uint8_t> q = from_hex(c.at("absmax_q"));
  ASSERT_EQ(q.size(), t.absmax_codes.size());
  int differ = 0;
  for (std::size_t b = 0; b < q.size(); ++b) {
    if (q[b] == t.absmax_codes[b]) continue;
    const float y = (absmax[b] - t.offset) / t.absmax_scales[b / 256];
    const auto& code = bnb_dynamic_map();
    const float mid = 0.5f * (code[q[b]] + code[t.absmax_codes[b]]);
    EXPECT_LE(std::abs(int(q[b]) - int(t.absmax_codes[b])), 1) << "constant " << b;
    EXPECT_LE(std::fabs(y - mid), 1e-6f) << "constant " << b << ": ours " << int(t.absmax_codes[b]) << ", bitsandbytes "
                                         << int(q[b]) << ", not at a midpoint";
    ++differ;
  }
  EXPECT_LE(differ, 2);
  // dequantize_4bit's output in the dtype: ours rounded the same way equals it but where a constant differed.
  const std::vector<float> want = sixteen_bit_values(c.at("dequantized_bits"), dtype);
  std::vector<float> y(static_cast<std::size_t>(n));
  dequantize_nf4(t, y.data());
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::fabs(y[i] - want[i]) > 0.008f * std::fabs(want[i]) + 1e-30f) ++off;  // beyond 16-bit rounding
  EXPECT_LE(off, differ * kNf4BlockSize);
}

TEST(Nf4Quantization, EqualsBitsandbytesQuantize4bitOnStoredWeights) {
  if (!std::filesystem::exists(kGoldenPath))
    GTEST_SKIP() << "the golden file " << kGoldenPath << " is missing: on the GPU machine (torch + bitsandbytes 0.50) "
                 << "run `python3 bench/lora/bnb_nf4_codes.py OUT && cp OUT/bnb_nf4_codes.json tests/data/bnb_nf4/`";
  std::ifstream f(kGoldenPath);
  const nlohmann::json doc = nlohmann::json::parse(f);
  const auto& nf4 = nf4_code_values();
  ASSERT_EQ(doc.at("nf4_code").size(), 16u);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(doc.at("nf4_code")[i].get<double>(), static_cast<double>(nf4[i])) << "NF4 value " << i;
  ASSERT_FALSE(doc.at("cases").empty());
  for (const auto& c : doc.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const std::string dtype = c.at("dtype");
    const std::vector<float> x = sixteen_bit_values(c.at("input_bits"), dtype);
    const auto n = static_cast<std::int64_t>(x.size());
    ASSERT_EQ(n, c.at("shape")[0].get<std::int64_t>() * c.at("shape")[1].get<std::int64_t>());
    expect_equals_bitsandbytes_case(c, dtype, x, n, quantize_nf4(x.data(), n));
  }
}

// Every linear layer of a model as QLoRA loads it: transformers' from_pretrained with BitsAndBytesConfig (nf4,
// double quantisation, bf16) turned each nn.Linear of bench/llama/configs/tiny-ci.json (the CI's Llama: GQA 4/2,
// SwiGLU, two blocks) into a bnb.nn.Linear4bit; the golden file holds each module's saved bf16 weight and the codes
// and quant_state bitsandbytes 0.50 made of it on the H200 (`python3 bench/lora/bnb_nf4_codes.py --model
// bench/llama/configs/tiny-ci.json OUT`). Quantised as the executor holds the base (exec/lora_layout.h
// nf4_module_elements: q/k/v fused into one weight and gate/up into another, each module its own Nf4Tensor), every
// module equals bitsandbytes'; and the file's modules are the model's block linears, no more (lm_head stays 16-bit).
TEST(Nf4Quantization, EveryLinear4bitOfAQloraModelEqualsOursModuleByModule) {
  const char* path = "tests/data/bnb_nf4/bnb_nf4_linear4bit_tiny-ci.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  std::ifstream f(path);
  const nlohmann::json doc = nlohmann::json::parse(f);
  EXPECT_EQ(doc.at("model").get<std::string>(), "bench/llama/configs/tiny-ci.json");
  std::map<std::string, const nlohmann::json*> by_name;
  for (const auto& c : doc.at("cases")) {
    EXPECT_EQ(c.at("blocksize").get<int>(), kNf4BlockSize);
    EXPECT_TRUE(c.at("nested").get<bool>()) << "double quantisation";
    by_name[c.at("name").get<std::string>()] = &c;
  }
  const ModelDescription model = load_model("bench/llama/configs/tiny-ci.json");
  ASSERT_TRUE(model.transformer.has_value());
  const std::vector<BlockLinear> linears = block_linear_modules(model);
  ASSERT_EQ(by_name.size(), linears.size() * static_cast<std::size_t>(model.transformer->layers));
  // The executor's fused block weights, in element order, each a run of transformers modules.
  const std::vector<std::vector<std::string>> fused = {
      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, {"self_attn.o_proj"},
      {"mlp.gate_proj", "mlp.up_proj"}, {"mlp.down_proj"}};
  int compared = 0;
  for (std::int64_t l = 0; l < model.transformer->layers; ++l)
    for (const std::vector<std::string>& weight : fused) {
      std::vector<const nlohmann::json*> cases;
      std::vector<float> values;
      std::vector<std::int64_t> sizes;
      for (const std::string& module : weight) {
        const std::string name = "model.layers." + std::to_string(l) + "." + module;
        ASSERT_TRUE(by_name.count(name)) << name << " is not a Linear4bit of the file";
        const auto linear = std::find_if(linears.begin(), linears.end(),
                                         [&](const BlockLinear& b) { return b.path == module; });
        ASSERT_NE(linear, linears.end()) << module;
        const nlohmann::json& c = *by_name[name];
        EXPECT_EQ(c.at("shape")[0].get<std::int64_t>(), linear->out_features) << name;
        EXPECT_EQ(c.at("shape")[1].get<std::int64_t>(), linear->in_features) << name;
        const std::vector<float> x = sixteen_bit_values(c.at("input_bits"), "bf16");
        values.insert(values.end(), x.begin(), x.end());
        sizes.push_back(static_cast<std::int64_t>(x.size()));
        cases.push_back(&c);
      }
      const Nf4ModuleTensors q = quantize_nf4_modules(values.data(), sizes);
      ASSERT_EQ(q.modules.size(), cases.size());
      std::int64_t first = 0;
      for (std::size_t j = 0; j < cases.size(); ++j) {
        SCOPED_TRACE(cases[j]->at("name").get<std::string>());
        const std::vector<float> x(values.begin() + first, values.begin() + first + sizes[j]);
        expect_equals_bitsandbytes_case(*cases[j], "bf16", x, sizes[j], q.modules[j]);
        first += sizes[j];
        ++compared;
      }
    }
  EXPECT_EQ(compared, static_cast<int>(by_name.size()));
}

// A fused weight of several modules (the executor's Llama qkv / gate_up) quantised module by module: bitsandbytes
// quantises each nn.Linear alone, so two stored cases laid back to back, as one tensor of two modules, must give
// each case's own bitsandbytes codes, constants and offset. (The stored file has no case quantised through
// transformers' Linear4bit modules of a real Llama layer: bench/lora/bnb_nf4_codes.py quantises single tensors;
// that each module is its own quantize_4bit call is transformers' replace_with_bnb_linear, one Linear4bit per
// nn.Linear.) One quantize_4bit of the concatenation shares the offset and the 256-block groups across the two
// and differs from bitsandbytes' constants.
TEST(Nf4Quantization, ModulesOfAFusedTensorEachEqualBitsandbytesQuantize4bitOfThatModule) {
  if (!std::filesystem::exists(kGoldenPath)) GTEST_SKIP() << "the golden file " << kGoldenPath << " is missing";
  std::ifstream f(kGoldenPath);
  const nlohmann::json doc = nlohmann::json::parse(f);
  // The same dtype's cases (a 128-block module, then a 768-block one: its first group of 256 would start at block
  // 128 of the fused tensor's second group), one std 0.02 and (bf16) one std 1: offsets far apart.
  for (const std::string dtype : {"fp16", "bf16"}) {
    SCOPED_TRACE(dtype);
    std::vector<const nlohmann::json*> cases;
    for (const auto& c : doc.at("cases"))
      if (c.at("dtype") == dtype) cases.push_back(&c);
    ASSERT_GE(cases.size(), 2u);
    std::vector<float> fused;
    std::vector<std::int64_t> sizes;
    for (const nlohmann::json* c : cases) {
      const std::vector<float> x = sixteen_bit_values(c->at("input_bits"), dtype);
      fused.insert(fused.end(), x.begin(), x.end());
      sizes.push_back(static_cast<std::int64_t>(x.size()));
    }
    const Nf4ModuleTensors q = quantize_nf4_modules(fused.data(), sizes);
    ASSERT_EQ(q.modules.size(), cases.size());
    std::int64_t first = 0;
    for (std::size_t j = 0; j < cases.size(); ++j) {
      SCOPED_TRACE(cases[j]->at("name").get<std::string>());
      const std::vector<float> x(fused.begin() + first, fused.begin() + first + sizes[j]);
      expect_equals_bitsandbytes_case(*cases[j], dtype, x, sizes[j], q.modules[j]);
      first += sizes[j];
    }
    // The fused tensor quantised as one: its offset is none of the modules' (bitsandbytes' state.offset).
    const Nf4Tensor one = quantize_nf4(fused.data(), static_cast<std::int64_t>(fused.size()));
    for (const nlohmann::json* c : cases)
      EXPECT_GT(std::fabs(c->at("offset").get<double>() - one.offset), 1e-5 * std::fabs(one.offset));
    // ... and so the absmax codes of the second module's blocks are not bitsandbytes'.
    const std::vector<std::uint8_t> second = from_hex(cases[1]->at("absmax_q"));
    std::size_t differ = 0;
    for (std::size_t b = 0; b < second.size(); ++b)
      differ += second[b] != one.absmax_codes[static_cast<std::size_t>(q.modules[0].blocks()) + b];
    EXPECT_GT(differ, second.size() / 2) << differ << " of " << second.size();
  }
}

// The blocks shared among threads give the one-thread result bit for bit: a tensor of 5,000,003 values (a partial
// last block, an odd count, a block of zeros whose reciprocal is infinite) on 7 threads against 1, as the executors
// quantise a frozen base on the CPU optimizer's threads.
TEST(Nf4Quantization, SeveralThreadsGiveTheOneThreadCodes) {
  const std::int64_t n = 5'000'003;
  std::vector<float> x = normal_weights(n, 11, 0.02f);
  std::fill(x.begin() + 64 * 1000, x.begin() + 64 * 1001, 0.0f);
  const Nf4Tensor one = quantize_nf4(x.data(), n, 1);
  const Nf4Tensor seven = quantize_nf4(x.data(), n, 7);
  EXPECT_EQ(seven.elements, n);
  EXPECT_TRUE(seven.codes == one.codes);
  EXPECT_TRUE(seven.absmax_codes == one.absmax_codes);
  EXPECT_TRUE(seven.absmax_scales == one.absmax_scales);
  EXPECT_EQ(std::memcmp(&seven.offset, &one.offset, sizeof(float)), 0);
  // and each piece is what it would be alone: the first block of the last piece against a serial quantisation
  const std::vector<std::int64_t> modules = {n - 3'000'000, 3'000'000};
  const Nf4ModuleTensors m7 = quantize_nf4_modules(x.data(), modules, 7);
  const Nf4Tensor second = quantize_nf4(x.data() + modules[0], modules[1], 1);
  ASSERT_EQ(m7.modules.size(), 2u);
  EXPECT_TRUE(m7.modules[1].codes == second.codes);
  EXPECT_TRUE(m7.modules[1].absmax_codes == second.absmax_codes);
}

}  // namespace
}  // namespace zeroplan
