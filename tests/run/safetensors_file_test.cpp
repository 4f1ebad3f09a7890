// run/safetensors_file.h against the `safetensors` package (Debian's /usr/bin/python3 with safetensors 0.4.5 and
// numpy): files the package writes (F32, BF16, F16, F64; several shapes, a scalar, an empty tensor; one file, a
// folder, a sharded checkpoint with its index) read back value for value, bit for bit, whole and by partial
// ranges; files SafetensorsWriter writes, in pieces in shuffled order, read back bit for bit by the package and by
// SafetensorsCheckpoint; and every malformed input refused with a one-line InputError naming the file and the
// tensor.
#include "tests/run/python_script.h"
#include "run/safetensors_file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/input_error.h"

namespace zeroplan {
namespace {

namespace fs = std::filesystem;

// ---- Python --------------------------------------------------------------------------------------------------

// Writes and checks files with the package. `make DIR`: single.safetensors, single_dir/model.safetensors and
// sharded/ (two shards and model.safetensors.index.json); for each tensor T, DIR/expect/T.f32 holds the fp32
// value of every element as numpy computes it (bf16 bits << 16; float16 and float64 astype(float32));
// writes DIR/spec.json, {T: {"dtype", "shape"}} of single.safetensors. `check FILE DIR`: FILE was written by
// SafetensorsWriter from the fp32 values in DIR/T.in; prints "ok N" when the package reads it and every element
// equals the input rounded by numpy (float16) or by the round-to-nearest-even formula (bf16, as
// tests/cli/export_check.py), bit for bit, NaN as NaN.
const char* kPython = R"PY(
import json, os, sys
import numpy as np
import safetensors
from safetensors import safe_open

def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r

def make(out):
    rng = np.random.default_rng(20261124)
    os.makedirs(os.path.join(out, "expect"), exist_ok=True)
    def f32(shape):
        v = rng.standard_normal(shape).astype(np.float32) * 3
        flat = v.reshape(-1)
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.4028235e38, 1.17549435e-38], np.float32)
        flat[: min(len(flat), len(special))] = special[: len(flat)]
        return v
    def bits16(n):
        b = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
        special = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7C00, 0xFC00, 0x7E00, 0x7BFF,
                            0x7F80, 0xFF80, 0x7FC0, 0x007F, 0x0080, 0x3F80], np.uint16)
        b[: min(n, len(special))] = special[: n]
        return b
    def tensor(dtype, shape):
        n = int(np.prod(shape)) if len(shape) else 1
        if dtype == "float32":
            v = f32(shape if len(shape) else (1,))
            return v.tobytes(), v.astype(np.float32).reshape(-1)
        if dtype == "bfloat16":
            b = bits16(n)
            return b.tobytes(), (b.astype(np.uint32) << 16).view(np.float32)
        if dtype == "float16":
            b = bits16(n)
            return b.tobytes(), b.view(np.float16).astype(np.float32)
        if dtype == "float64":
            v = rng.standard_normal(n) * 1e3
            v[: min(n, 3)] = np.array([1.0 + 2.0 ** -24, 1e300, -1e-300])[: min(n, 3)]
            with np.errstate(over="ignore"):  # 1e300 rounds to infinity, as intended
                return v.tobytes(), v.astype(np.float32)
        if dtype == "int8":
            v = np.arange(n, dtype=np.int8)
            return v.tobytes(), v.astype(np.float32)
    def save(path, spec, metadata):
        flat, expect = {}, {}
        for name, (dtype, shape) in spec.items():
            data, values = tensor(dtype, shape)
            flat[name] = {"dtype": dtype, "shape": list(shape), "data": data}
            expect[name] = values
            values.astype("<f4").tofile(os.path.join(out, "expect", name + ".f32"))
        safetensors.serialize_file(flat, path, metadata=metadata)
        return flat
    single = {
        "model.embed_tokens.weight": ("bfloat16", (37, 64)),
        "model.layers.0.self_attn.q_proj.weight": ("float32", (7, 13)),
        "model.layers.0.mlp.up_proj.weight": ("float16", (3, 5, 11)),
        "model.norm.weight": ("float32", (64,)),
        "lm_head.big": ("bfloat16", (600007,)),
        "half.big": ("float16", (300011,)),
        "scalar": ("float32", ()),
        "empty": ("bfloat16", (0, 5)),
        "wide": ("float64", (9,)),
        "int8.counts": ("int8", (4,)),
    }
    save(os.path.join(out, "single.safetensors"), single, {"format": "pt", "note": "from python"})
    os.makedirs(os.path.join(out, "single_dir"), exist_ok=True)
    save(os.path.join(out, "single_dir", "model.safetensors"), {"dir.a": ("float16", (2, 3))}, {"format": "pt"})
    shard_dir = os.path.join(out, "sharded")
    os.makedirs(shard_dir, exist_ok=True)
    shards = {
        "model-00001-of-00002.safetensors": {"s.a": ("float32", (4, 4)), "s.b": ("bfloat16", (10,))},
        "model-00002-of-00002.safetensors": {"s.c": ("float16", (3, 7)), "s.d": ("float32", (1,))},
    }
    weight_map, total = {}, 0
    for file, spec in shards.items():
        flat = save(os.path.join(shard_dir, file), spec, {"format": "pt"})
        for name in spec:
            weight_map[name] = file
            total += len(flat[name]["data"])
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(out, "spec.json"), "w") as f:
        json.dump({k: {"dtype": d, "shape": list(s)} for k, (d, s) in single.items()}, f)

def check(path, indir):
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    if (8 + n) % 8 != 0:
        sys.exit(f"data starts at {8 + n}, not 8-byte aligned")
    header = json.loads(raw[8 : 8 + n])
    meta = header.get("__metadata__")
    if meta != {"format": "pt", "writer": "zeroplan test"}:
        sys.exit(f"metadata {meta}")
    tensors = dict(safetensors.deserialize(raw))
    names = sorted(f[: -3] for f in os.listdir(indir) if f.endswith(".in"))
    if sorted(tensors) != names:
        sys.exit(f"names {sorted(tensors)} != {names}")
    with open(os.path.join(indir, "shapes.json")) as f:
        spec = json.load(f)
    for name in names:
        dtype, shape = spec[name]
        t = tensors[name]
        if t["dtype"] != dtype or list(t["shape"]) != shape:
            sys.exit(f"{name}: {t['dtype']} {t['shape']} != {dtype} {shape}")
        x = np.fromfile(os.path.join(indir, name + ".in"), dtype="<f4")
        data = bytes(t["data"])
        if dtype == "F32":
            got = np.frombuffer(data, dtype="<u4")
            want = x.view(np.uint32)
        elif dtype == "BF16":
            got = np.frombuffer(data, dtype="<u2")
            want = to_bf16_bits(x)
        else:
            got = np.frombuffer(data, dtype="<u2")
            want = x.astype(np.float16).view(np.uint16)
        nan = np.isnan(x)
        if got.shape != want.shape:
            sys.exit(f"{name}: {got.shape} elements, expected {want.shape}")
        if not np.array_equal(got[~nan], want[~nan]):
            i = int(np.nonzero(got[~nan] != want[~nan])[0][0])
            sys.exit(f"{name}: element {i}: {got[~nan][i]:#x} != {want[~nan][i]:#x} (input {x[~nan][i]!r})")
        if dtype != "F32" and nan.any():
            g = got[nan].astype(np.uint32)
            is_nan = ((g & 0x7F80) == 0x7F80) & ((g & 0x7F) != 0) if dtype == "BF16" else \
                     ((g & 0x7C00) == 0x7C00) & ((g & 0x3FF) != 0)
            if not is_nan.all():
                sys.exit(f"{name}: a NaN input is not NaN")
    # The package's lazy reader too (numpy has no bfloat16: F32 and F16 only).
    with safe_open(path, framework="numpy") as f:
        for name in names:
            if spec[name][0] == "F32":
                got = f.get_tensor(name)
                x = np.fromfile(os.path.join(indir, name + ".in"), dtype="<f4").reshape(spec[name][1])
                if not np.array_equal(got.view(np.uint32), x.view(np.uint32)):
                    sys.exit(f"{name}: safe_open values differ")
    print(f"ok {len(names)}")

if sys.argv[1] == "make":
    make(sys.argv[2])
else:
    check(sys.argv[2], sys.argv[3])
)PY";

using Python = zeroplan::test::PythonResult;
Python run_python(const fs::path& dir, const std::string& args) {
  return zeroplan::test::run_python_script(dir, "safetensors_helper.py", kPython, args);
}
std::string python_missing() { return zeroplan::test::python_modules_missing("safetensors, numpy"); }

// ---- files ---------------------------------------------------------------------------------------------------

std::vector<float> read_floats(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_floats(const fs::path& p, const std::vector<float>& v) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(v.data()),
                                           static_cast<std::streamsize>(v.size() * 4));
}

// A safetensors file by hand: `header` padded to a multiple of 8, then `data_bytes` bytes; `length` replaces N.
void write_raw(const fs::path& p, std::string header, std::int64_t data_bytes, std::int64_t length = -1) {
  while (header.size() % 8 != 0) header.push_back(' ');
  const std::uint64_t n = length >= 0 ? static_cast<std::uint64_t>(length) : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  out += header;
  out.append(static_cast<std::size_t>(data_bytes), '\x11');
  std::ofstream(p, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
}

// Bits equal, NaN as NaN (payloads are compared too when both are NaN of the same bits; numpy may quiet one).
::testing::AssertionResult same_values(const std::vector<float>& got, const std::vector<float>& want,
                                       std::int64_t first) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float w = want[first + i], g = got[i];
    if (std::isnan(w) ? !std::isnan(g) : std::bit_cast<std::uint32_t>(g) != std::bit_cast<std::uint32_t>(w))
      return ::testing::AssertionFailure() << "element " << first + i << ": got " << g << " ("
                                           << std::bit_cast<std::uint32_t>(g) << "), want " << w << " ("
                                           << std::bit_cast<std::uint32_t>(w) << ")";
  }
  return ::testing::AssertionSuccess();
}

// Every value of `name` read whole, at the ends, in the middle, as nothing, and in pieces of 7 and of 100003.
void expect_tensor_reads(const SafetensorsCheckpoint& ckpt, const std::string& name, const std::vector<float>& want) {
  SCOPED_TRACE(name);
  const TensorInfo* t = ckpt.find(name);
  ASSERT_NE(t, nullptr);
  const std::int64_t n = t->elements;
  ASSERT_EQ(static_cast<std::int64_t>(want.size()), n);
  auto check = [&](std::int64_t first, std::int64_t count) {
    std::vector<float> got(static_cast<std::size_t>(count), -12345.0f);
    ckpt.read_as_float(*t, first, count, got.data());
    EXPECT_TRUE(same_values(got, want, first)) << "range [" << first << ", +" << count << ")";
  };
  check(0, n);
  check(0, 0);
  check(n, 0);
  if (n == 0) return;
  check(0, 1);
  check(n - 1, 1);
  check(n / 3, n / 4 + 1);      // the middle
  check(1, std::max<std::int64_t>(n - 2, 0));
  for (std::int64_t piece : {std::int64_t{7}, std::int64_t{100003}}) {
    if (piece > n) continue;
    std::vector<float> got(static_cast<std::size_t>(n));
    for (std::int64_t at = 0; at < n; at += piece)
      ckpt.read_as_float(*t, at, std::min(piece, n - at), got.data() + at);
    EXPECT_TRUE(same_values(got, want, 0)) << "in pieces of " << piece;
  }
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("zeroplan_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// The message of the InputError that `f` throws (failing when it throws none or another type).
template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an InputError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

#define EXPECT_MESSAGE(message, ...)                                                                   \
  do {                                                                                                 \
    const std::string text_ = (message);                                                               \
    EXPECT_EQ(text_.find('\n'), std::string::npos) << text_;                                           \
    for (const std::string& part_ : std::vector<std::string>{__VA_ARGS__})                             \
      EXPECT_NE(text_.find(part_), std::string::npos) << "'" << part_ << "' not in: " << text_;        \
  } while (0)

// ---- conversions ---------------------------------------------------------------------------------------------

TEST(SafetensorsConversions, SixteenBitValuesRoundTripAndRoundToNearestEven) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float bf = float_from_bf16_bits(bits), h = float_from_f16_bits(bits);
    if (!std::isnan(bf)) {
      EXPECT_EQ(bf16_bits_from_float(bf), bits) << b;
    }
    if (!std::isnan(h)) {
      EXPECT_EQ(f16_bits_from_float(h), bits) << b;
      EXPECT_EQ(h, static_cast<float>(std::bit_cast<_Float16>(bits))) << b;  // the compiler's exact widening
    }
  }
  EXPECT_EQ(bf16_bits_from_float(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(bf16_bits_from_float(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even
  EXPECT_EQ(bf16_bits_from_float(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f16_bits_from_float(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f16_bits_from_float(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(f16_bits_from_float(65520.0f), 0x7c00);  // overflow rounds to infinity
  EXPECT_EQ(f16_bits_from_float(0x1p-25f), 0x0000);  // tie with the smallest subnormal -> even (zero)
  EXPECT_EQ(float_from_f16_bits(0x0001), 0x1p-24f);
  EXPECT_EQ(safetensors_dtype_size("BF16"), 2);
  EXPECT_EQ(safetensors_dtype_size("bf16"), 0);
}

// ---- files the package writes ----------------------------------------------------------------------------------

TEST_F(SafetensorsTest, FilesThePackageWritesReadBackExactly) {
  if (const std::string why = python_missing(); !why.empty()) GTEST_SKIP() << why;
  const Python made = run_python(dir_, "make " + dir_.string());
  ASSERT_EQ(made.status, 0) << made.output;
  const nlohmann::json spec = nlohmann::json::parse(std::ifstream(dir_ / "spec.json"));
  const std::map<std::string, std::string> dtype_names = {
      {"float32", "F32"}, {"bfloat16", "BF16"}, {"float16", "F16"}, {"float64", "F64"}, {"int8", "I8"}};

  const std::string file = (dir_ / "single.safetensors").string();
  const SafetensorsCheckpoint ckpt(file);
  EXPECT_EQ(ckpt.files(), std::vector<std::string>{file});
  EXPECT_EQ(ckpt.metadata(file), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "from python"}}));
  std::vector<std::string> want_names;
  for (const auto& [name, info] : spec.items()) want_names.push_back(name);
  std::sort(want_names.begin(), want_names.end());
  EXPECT_EQ(ckpt.names(), want_names);
  EXPECT_EQ(ckpt.find("model.layers.0.self_attn.k_proj.weight"), nullptr);
  for (const auto& [name, info] : spec.items()) {
    const TensorInfo* t = ckpt.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->name, name);
    EXPECT_EQ(t->dtype, dtype_names.at(info.at("dtype").get<std::string>())) << name;
    EXPECT_EQ(t->shape, info.at("shape").get<std::vector<std::int64_t>>()) << name;
    EXPECT_EQ(t->file, file);
    EXPECT_EQ(t->bytes, t->elements * safetensors_dtype_size(t->dtype));
    if (t->dtype == "I8") continue;
    expect_tensor_reads(ckpt, name, read_floats(dir_ / "expect" / (name + ".f32")));
  }
  EXPECT_EQ(ckpt.find("scalar")->elements, 1);
  EXPECT_EQ(ckpt.find("empty")->elements, 0);

  // Offsets are absolute: the raw bytes at offset are the tensor's (an F32 tensor compared without conversion).
  const TensorInfo* q = ckpt.find("model.layers.0.self_attn.q_proj.weight");
  std::ifstream raw(file, std::ios::binary);
  raw.seekg(q->offset);
  std::vector<float> direct(static_cast<std::size_t>(q->elements));
  raw.read(reinterpret_cast<char*>(direct.data()), q->bytes);
  EXPECT_TRUE(same_values(direct, read_floats(dir_ / "expect" / (q->name + ".f32")), 0));

  // Integer dtypes are refused by name.
  const TensorInfo* i8 = ckpt.find("int8.counts");
  float sink[4];
  EXPECT_MESSAGE(input_error_of([&] { ckpt.read_as_float(*i8, 0, 4, sink); }),
                 "cannot read dtype I8 of tensor int8.counts in " + file + "; expected F32, BF16, F16 or F64");
  // A range outside the tensor is the caller's bug.
  EXPECT_THROW(ckpt.read_as_float(*q, q->elements - 1, 2, direct.data()), std::out_of_range);
  EXPECT_THROW(ckpt.read_as_float(*q, -1, 1, direct.data()), std::out_of_range);
  TensorInfo foreign = *q;
  foreign.file = "/elsewhere.safetensors";
  EXPECT_THROW(ckpt.read_as_float(foreign, 0, 1, direct.data()), std::invalid_argument);

  // A folder with model.safetensors.
  SafetensorsCheckpoint in_dir((dir_ / "single_dir").string());
  EXPECT_EQ(in_dir.names(), std::vector<std::string>{"dir.a"});
  expect_tensor_reads(in_dir, "dir.a", read_floats(dir_ / "expect" / "dir.a.f32"));

  // Moved, the tensors and their open files go with it.
  SafetensorsCheckpoint moved(std::move(in_dir));
  expect_tensor_reads(moved, "dir.a", read_floats(dir_ / "expect" / "dir.a.f32"));
}

TEST_F(SafetensorsTest, ShardedCheckpointsReadThroughTheirIndex) {
  if (const std::string why = python_missing(); !why.empty()) GTEST_SKIP() << why;
  const Python made = run_python(dir_, "make " + dir_.string());
  ASSERT_EQ(made.status, 0) << made.output;
  const fs::path folder = dir_ / "sharded";
  const std::string shard1 = (folder / "model-00001-of-00002.safetensors").string();
  const std::string shard2 = (folder / "model-00002-of-00002.safetensors").string();
  for (const std::string& path : {(folder / "model.safetensors.index.json").string(), folder.string()}) {
    SCOPED_TRACE(path);
    const SafetensorsCheckpoint ckpt(path);
    EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"s.a", "s.b", "s.c", "s.d"}));
    EXPECT_EQ(ckpt.files(), (std::vector<std::string>{shard1, shard2}));
    EXPECT_EQ(ckpt.find("s.a")->file, shard1);
    EXPECT_EQ(ckpt.find("s.c")->file, shard2);
    EXPECT_EQ(ckpt.find("s.c")->shape, (std::vector<std::int64_t>{3, 7}));
    EXPECT_EQ(ckpt.metadata(shard2).at("format"), "pt");
    for (const std::string& name : ckpt.names()) expect_tensor_reads(ckpt, name, read_floats(dir_ / "expect" / (name + ".f32")));
  }

  // A folder with both model.safetensors and the index: the single file, as transformers takes it.
  fs::copy_file(dir_ / "single_dir" / "model.safetensors", folder / "model.safetensors");
  EXPECT_EQ(SafetensorsCheckpoint(folder.string()).names(), std::vector<std::string>{"dir.a"});
  fs::remove(folder / "model.safetensors");

  // A shard's tensor missing from the weight_map is still read (transformers loads each shard whole).
  const std::string index = (folder / "model.safetensors.index.json").string();
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(index));
  doc["weight_map"].erase("s.d");
  std::ofstream(index) << doc.dump();
  EXPECT_NE(SafetensorsCheckpoint(index).find("s.d"), nullptr);

  // A shard the index names is missing: the index, the shard and a tensor it should hold.
  doc["weight_map"]["s.e"] = "model-00003-of-00003.safetensors";
  std::ofstream(index) << doc.dump();
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(index); }), index, "field 's.e'",
                 "shard model-00003-of-00003.safetensors is missing", (folder / "model-00003-of-00003.safetensors").string(),
                 "tensor s.e");

  // A tensor the index puts in a shard that does not hold it.
  doc["weight_map"]["s.e"] = "model-00001-of-00002.safetensors";
  std::ofstream(index) << doc.dump();
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(index); }), index, "field 's.e'",
                 "puts tensor s.e in shard model-00001-of-00002.safetensors", shard1 + " holds no tensor of that name");

  // A tensor in one shard that the index puts in the other.
  doc["weight_map"].erase("s.e");
  doc["weight_map"]["s.d"] = "model-00001-of-00002.safetensors";
  std::ofstream(index) << doc.dump();
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(index); }), index, "s.d", shard1, "holds no tensor");

  // Malformed indexes.
  std::ofstream(index) << R"({"metadata": {}})";
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(index); }), index, "weight_map", "missing");
  std::ofstream(index) << R"({"weight_map": {"s.a": 3}})";
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(index); }), index, "weight_map.s.a", "shard file name");
  std::ofstream(index) << R"({"weight_map": {"s.a": "../model-00001-of-00002.safetensors"}})";
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(index); }), index, "not a file name in the index's folder");
  std::ofstream(index) << R"({"weight_map": {"s.a": "x", "s.a": "y"}})";
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(index); }), index, "s.a", "twice");
  std::ofstream(index) << "{\"weight_map\": ";
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(index); }), index, "not valid JSON");
}

// ---- files SafetensorsWriter writes ----------------------------------------------------------------------------

TEST_F(SafetensorsTest, WrittenInShuffledPiecesAndReadBackBitForBit) {
  struct Spec {
    std::string name, dtype;
    std::vector<std::int64_t> shape;
  };
  const std::vector<Spec> specs = {
      {"model.layers.0.self_attn.q_proj.weight", "F32", {5, 7}},
      {"model.embed_tokens.weight", "BF16", {600001}},  // over one conversion chunk (2^19 bf16 values)
      {"model.layers.0.mlp.down_proj.weight", "F16", {3, 3, 3}},
      {"model.norm.weight", "BF16", {33}},
      {"half.long", "F16", {524289}},
      {"scalar", "F32", {}},
      {"empty", "BF16", {0}},
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const std::vector<float> special = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN,
                                      std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u),
                                      1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, 0x1p-24f,
                                      0x1p-25f, 3 * 0x1p-26f, 1e-45f, 3.4028235e38f, -1.17549435e-38f};
  const fs::path in = dir_ / "in";
  fs::create_directories(in);
  std::map<std::string, std::vector<float>> values;
  nlohmann::json shapes;
  for (const Spec& s : specs) {
    std::int64_t n = 1;
    for (std::int64_t d : s.shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = normal(rng);
    for (std::size_t i = 0; i < std::min(v.size(), special.size()); ++i) v[i] = special[i];
    values[s.name] = v;
    write_floats(in / (s.name + ".in"), v);
    shapes[s.name] = {s.dtype, s.shape};
  }
  std::ofstream(in / "shapes.json") << shapes.dump();

  const fs::path out = dir_ / "out.safetensors";
  std::ofstream(out) << "the previous contents";
  {
    SafetensorsWriter writer(out.string());
    writer.set_metadata({{"format", "pt"}, {"writer", "zeroplan test"}});
    for (const Spec& s : specs) writer.add(s.name, s.dtype, s.shape);
    // Each tensor cut into pieces of random lengths; all pieces of all tensors written in a random order.
    struct Piece {
      std::string name;
      std::int64_t first, count;
    };
    std::vector<Piece> pieces;
    for (const Spec& s : specs) {
      const std::int64_t n = static_cast<std::int64_t>(values[s.name].size());
      for (std::int64_t at = 0; at < n;) {
        const std::int64_t count = std::min<std::int64_t>(n - at, 1 + rng() % std::max<std::int64_t>(n / 5, 1));
        pieces.push_back({s.name, at, count});
        at += count;
      }
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    for (const Piece& p : pieces) writer.write(p.name, p.first, values[p.name].data() + p.first, p.count);
    EXPECT_EQ(read_text(out), "the previous contents");  // nothing replaced before finish()
    writer.finish();
  }
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));

  if (const std::string why = python_missing(); why.empty()) {
    const Python checked = run_python(dir_, "check " + out.string() + " " + in.string());
    EXPECT_EQ(checked.status, 0) << checked.output;
    EXPECT_NE(checked.output.find("ok " + std::to_string(specs.size())), std::string::npos) << checked.output;
  } else {
    ADD_FAILURE() << "the package's check of the written file is skipped: " << why;
  }

  const SafetensorsCheckpoint ckpt(out.string());
  EXPECT_EQ(ckpt.metadata(out.string()), (std::map<std::string, std::string>{{"format", "pt"}, {"writer", "zeroplan test"}}));
  for (const Spec& s : specs) {
    const TensorInfo* t = ckpt.find(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->dtype, s.dtype);
    EXPECT_EQ(t->shape, s.shape);
    std::vector<float> want = values[s.name];
    for (float& x : want)
      x = s.dtype == "F32"    ? x
          : s.dtype == "BF16" ? float_from_bf16_bits(bf16_bits_from_float(x))
                              : float_from_f16_bits(f16_bits_from_float(x));
    expect_tensor_reads(ckpt, s.name, want);
  }
  // The data starts 8-byte aligned.
  std::ifstream raw(out, std::ios::binary);
  std::uint64_t n = 0;
  raw.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST_F(SafetensorsTest, WriterRefusesMisuseAndLeavesNothingBehind) {
  const std::string out = (dir_ / "w.safetensors").string();
  std::ofstream(out) << "keep me";
  {
    SafetensorsWriter writer(out);
    writer.add("a", "F32", {2, 3});
    writer.add("b", "BF16", {4});
    EXPECT_THROW(writer.add("a", "F32", {1}), std::invalid_argument);
    EXPECT_THROW(writer.add("c", "I8", {1}), std::invalid_argument);
    EXPECT_THROW(writer.add("c", "F32", {2, -1}), std::invalid_argument);
    EXPECT_THROW(writer.add("__metadata__", "F32", {1}), std::invalid_argument);
    EXPECT_THROW(writer.add("huge", "F32", {std::int64_t{1} << 40, std::int64_t{1} << 40}), std::overflow_error);
    const float v[6] = {1, 2, 3, 4, 5, 6};
    EXPECT_THROW(writer.write("nope", 0, v, 1), std::invalid_argument);
    EXPECT_THROW(writer.write("a", 4, v, 3), std::invalid_argument);  // past the end
    writer.write("a", 1, v, 2);
    EXPECT_TRUE(fs::exists(out + ".tmp"));
    EXPECT_THROW(writer.write("a", 2, v, 1), std::invalid_argument);  // overlaps [1, 3)
    EXPECT_THROW(writer.write("a", 0, v, 2), std::invalid_argument);  // overlaps [1, 3)
    EXPECT_THROW(writer.add("c", "F32", {1}), std::invalid_argument);  // after the first write
    writer.write("a", 3, v, 3);
    try {
      writer.finish();
      ADD_FAILURE() << "finish with a tensor incomplete";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("tensor a has 5 of its 6 elements written"), std::string::npos) << e.what();
    }
  }
  // Abandoned: the temporary file is gone and the old file untouched.
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  EXPECT_EQ(read_text(out), "keep me");

  // No tensors at all: a valid empty file ("{}" and padding, as the reference writes it).
  {
    SafetensorsWriter writer(out);
    writer.finish();
    EXPECT_THROW(writer.finish(), std::invalid_argument);
  }
  EXPECT_TRUE(SafetensorsCheckpoint(out).names().empty());
  EXPECT_EQ(fs::file_size(out), 16u);

  // A folder that cannot be written: the error names the call, the path and errno's text.
  SafetensorsWriter nowhere((dir_ / "no" / "such" / "dir.safetensors").string());
  nowhere.add("a", "F32", {1});
  const float one = 1;
  try {
    nowhere.write("a", 0, &one, 1);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("create " + (dir_ / "no" / "such" / "dir.safetensors.tmp").string() +
                                         ": No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

// ---- malformed input -----------------------------------------------------------------------------------------

TEST_F(SafetensorsTest, MalformedFilesAreRefusedNamingTheFileAndTheTensor) {
  const std::string f = (dir_ / "bad.safetensors").string();
  auto error = [&] { return input_error_of([&] { SafetensorsCheckpoint c(f); }); };

  // Truncated: a valid file missing its last 3 bytes.
  {
    SafetensorsWriter w(f);
    w.add("a", "F32", {4});
    w.add("z.last", "BF16", {8});
    const std::vector<float> v(8, 1.5f);
    w.write("a", 0, v.data(), 4);
    w.write("z.last", 0, v.data(), 8);
    w.finish();
  }
  const std::int64_t whole = static_cast<std::int64_t>(fs::file_size(f));
  fs::resize_file(f, static_cast<std::uintmax_t>(whole - 3));
  EXPECT_MESSAGE(error(), f + ": field 'z.last': truncated: the file has " + std::to_string(whole - 3) +
                              " bytes, tensor z.last ends at " + std::to_string(whole));

  // The header length.
  write_raw(f, "{}", 30, 1000);
  EXPECT_MESSAGE(error(), f, "header length 1000 runs past the end of the file (46 bytes)");
  write_raw(f, "{}", 30, std::int64_t{1} << 40);
  EXPECT_MESSAGE(error(), f, "header length 1099511627776 exceeds the 100000000 bytes");
  { std::ofstream(f) << "abc"; }
  EXPECT_MESSAGE(error(), f, "the file has 3 bytes, fewer than the 8");

  // The header text.
  write_raw(f, R"({"a": {"dtype": "F32", )", 0);
  EXPECT_MESSAGE(error(), f, "the header is not valid JSON");
  write_raw(f, R"(  {})", 0);
  EXPECT_MESSAGE(error(), f, "does not begin with '{'");
  write_raw(f, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)" "\n"
               R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8);
  EXPECT_MESSAGE(error(), f, "field 'a'", "has the key 'a' twice");

  // One tensor's entry.
  write_raw(f, R"({"w.q": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 12);
  EXPECT_MESSAGE(error(), f, "field 'w.q'", "data_offsets [0,12] span 12 bytes, but shape [2, 2] of F32 is 16 bytes");
  write_raw(f, R"({"w.q": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})", 2);
  EXPECT_MESSAGE(error(), f, "field 'w.q'", "unknown dtype \"Q4_K\"");
  write_raw(f, R"({"w.q": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 0]}})", 0);
  EXPECT_MESSAGE(error(), f, "field 'w.q'", "shape [2,-1] holds something other than a size >= 0");
  write_raw(f, R"({"w.q": {"dtype": "F32", "shape": [2]}})", 8);
  EXPECT_MESSAGE(error(), f, "field 'w.q'", "has no \"data_offsets\"");
  write_raw(f, R"({"w.q": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8);
  EXPECT_MESSAGE(error(), f, "field 'w.q'", "ends before it begins");
  write_raw(f, R"({"w.q": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0);
  EXPECT_MESSAGE(error(), f, "field 'w.q'", "more elements than int64 holds");
  write_raw(f, R"({"w.q": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "__metadata__": {"n": 3}})", 4);
  EXPECT_MESSAGE(error(), f, "field '__metadata__.n'", "expected a string");

  // The tensors' places in the data.
  write_raw(f, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
               R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 24);
  EXPECT_MESSAGE(error(), f, "field 'b'", "data_offsets [8, 24] overlap tensor a, which ends at 16");
  write_raw(f, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
               R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})", 24);
  EXPECT_MESSAGE(error(), f, "field 'b'", "leave bytes [8, 16) of the data unused");
  write_raw(f, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12);
  EXPECT_MESSAGE(error(), f, "field 'a'", "the data is 12 bytes but the tensors end at 8");
  write_raw(f, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [9223372036854775800, 9223372036854775808]}})", 0);
  EXPECT_MESSAGE(error(), f, "field 'a'", "is not [begin, end] of two byte offsets >= 0");
  write_raw(f, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [9223372036854775799, 9223372036854775807]}})", 0);
  EXPECT_MESSAGE(error(), f, "field 'a'", "truncated: the file has", "tensor a ends at a byte past int64");

  // Paths.
  const std::string nothing = (dir_ / "absent.safetensors").string();
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(nothing); }), nothing, "does not exist");
  const fs::path empty_dir = dir_ / "empty";
  fs::create_directories(empty_dir);
  EXPECT_MESSAGE(input_error_of([&] { SafetensorsCheckpoint c(empty_dir.string()); }), empty_dir.string(),
                 "neither model.safetensors nor model.safetensors.index.json");

  // A file the package refuses (when it is there to ask): the cases above are not stricter than the reference.
  if (python_missing().empty()) {
    write_raw(f, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12);
    const int raw = std::system(("/usr/bin/python3 -c 'import safetensors,sys; safetensors.deserialize(open(sys.argv[1],\"rb\").read())' " +
                                 f + " >/dev/null 2>&1").c_str());
    EXPECT_NE(WEXITSTATUS(raw), 0) << "the package reads a file with bytes after its last tensor";
    write_raw(f, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                 R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})", 24);
    const int raw2 = std::system(("/usr/bin/python3 -c 'import safetensors,sys; safetensors.deserialize(open(sys.argv[1],\"rb\").read())' " +
                                  f + " >/dev/null 2>&1").c_str());
    EXPECT_NE(WEXITSTATUS(raw2), 0) << "the package reads a file with a hole";
  }
}

TEST_F(SafetensorsTest, AFileThatShrinksAfterOpeningIsAnErrorNotSilence) {
  const std::string f = (dir_ / "shrinks.safetensors").string();
  {
    SafetensorsWriter w(f);
    w.add("a", "BF16", {1000});
    const std::vector<float> v(1000, 2.0f);
    w.write("a", 0, v.data(), 1000);
    w.finish();
  }
  const SafetensorsCheckpoint ckpt(f);
  fs::resize_file(f, fs::file_size(f) - 100);
  std::vector<float> out(1000);
  EXPECT_MESSAGE(input_error_of([&] { ckpt.read_as_float(*ckpt.find("a"), 0, 1000, out.data()); }), f, "field 'a'",
                 "the file ends at byte", "while reading this tensor");
}

}  // namespace
}  // namespace zeroplan
