#include "run/safetensors_export.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "exec/param_layout.h"
#include "run/checkpoint.h"

namespace zeroplan {

namespace {

// fp32 -> bf16, round to nearest even (NaN stays a quiet NaN).
std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

std::uint16_t to_fp16(float f) {
  const _Float16 h = static_cast<_Float16>(f);  // IEEE round to nearest even
  std::uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

// Hugging Face GPT-2 name and shape of one of our tensors, and whether its values are transposed (Conv1D).
struct Exported {
  std::string name;
  std::int64_t rows, cols;
  bool transpose;
};

Exported exported(const exec::ParamTensor& t, const exec::ModelShape& shape) {
  if (t.name == "wte") return {"wte.weight", shape.vocab, t.cols, false};
  if (t.name == "wpe") return {"wpe.weight", t.rows, t.cols, false};
  if (t.rows > 1) return {t.name, t.cols, t.rows, true};  // block weights: [in, out]
  return {t.name, 1, t.cols, false};
}

}  // namespace

void export_safetensors(const std::string& checkpoint_dir, const std::string& out, const std::string& dtype) {
  if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16")
    throw InputError("command line", "--dtype", "expected fp32, bf16 or fp16, got '" + dtype + "'");
  CheckpointReader reader(checkpoint_dir, "--checkpoint");
  const exec::ModelShape& shape = reader.state().shape;
  const exec::ParamLayout layout(shape, 1);
  const int element = dtype == "fp32" ? 4 : 2;

  nlohmann::json header = nlohmann::json::object();
  std::vector<Exported> names;
  std::int64_t offset = 0;
  for (const exec::ParamTensor& t : layout.tensors()) {
    const Exported e = exported(t, shape);
    const std::int64_t bytes = e.rows * e.cols * element;
    nlohmann::json dims = e.rows == 1 && t.rows == 1 ? nlohmann::json::array({e.cols}) : nlohmann::json::array({e.rows, e.cols});
    header[e.name] = {{"dtype", dtype == "fp32" ? "F32" : dtype == "bf16" ? "BF16" : "F16"},
                      {"shape", dims},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    names.push_back(e);
  }
  header["__metadata__"] = {{"format", "pt"},
                            {"source", "zeroplan checkpoint " + reader.directory()},
                            {"step", std::to_string(reader.state().step)}};
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // the data starts 8-byte aligned (the format allows padding)

  const std::string tmp = out + ".tmp";
  std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
  if (!file) throw InputError(out, "--out", "cannot create " + tmp);
  const std::uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  file.write(reinterpret_cast<const char*>(len), 8);
  file.write(text.data(), static_cast<std::streamsize>(text.size()));

  std::vector<float> values, ordered;
  std::vector<std::uint16_t> half;
  for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
    const exec::ParamTensor& t = layout.tensors()[i];
    const Exported& e = names[i];
    const std::int64_t count = e.rows * e.cols;  // wte: the real vocabulary rows only (they come first)
    values.resize(count);
    reader.read(t.name, 0, count, values.data(), nullptr, nullptr);
    const std::vector<float>* src = &values;
    if (e.transpose) {
      ordered.resize(count);
      for (std::int64_t r = 0; r < t.rows; ++r)
        for (std::int64_t c = 0; c < t.cols; ++c) ordered[c * t.rows + r] = values[r * t.cols + c];
      src = &ordered;
    }
    if (element == 4) {
      file.write(reinterpret_cast<const char*>(src->data()), static_cast<std::streamsize>(count * 4));
    } else {
      half.resize(count);
      for (std::int64_t k = 0; k < count; ++k) half[k] = dtype == "bf16" ? to_bf16((*src)[k]) : to_fp16((*src)[k]);
      file.write(reinterpret_cast<const char*>(half.data()), static_cast<std::streamsize>(count * 2));
    }
  }
  file.close();
  if (!file) throw InputError(out, "--out", "writing " + tmp + " failed");
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) throw InputError(out, "--out", "cannot rename " + tmp + ": " + ec.message());
}

}  // namespace zeroplan
