#include "run/hf_checkpoint.h"

#include <algorithm>
#include <set>

#include "core/input_error.h"
#include "run/safetensors_file.h"

namespace zeroplan {

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A piece holding our rows [row_begin, row_begin + rows) of tensor t, stored untransposed as `shape`.
HfTensorPiece rows_piece(const exec::ParamTensor& t, std::string name, std::int64_t row_begin, std::int64_t rows,
                         std::vector<std::int64_t> shape) {
  return {std::move(name), row_begin * t.cols, rows * t.cols, std::move(shape), false, rows, t.cols};
}

// transformers' LlamaForCausalLM names (modeling_llama.py: LlamaModel.embed_tokens, layers.N.self_attn.{q,k,v,o}
// _proj, mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm, norm; lm_head). Biases follow the
// same split (Qwen2's q/k/v biases; Llama's attention_bias / mlp_bias).
HfTensorMapping llama_mapping(const exec::ParamLayout& layout, const exec::ParamTensor& t) {
  const exec::ModelShape& s = layout.shape();
  HfTensorMapping m{&t, {}};
  const std::int64_t V = s.vocab, C = s.hidden, Q = s.q_dim(), KV = s.kv_dim(), F = s.ffn_hidden;
  if (&t == &layout.wte()) {
    m.pieces.push_back(rows_piece(t, "model.embed_tokens.weight", 0, V, {V, C}));
    return m;
  }
  if (t.name == "lm_head") {
    m.pieces.push_back(rows_piece(t, "lm_head.weight", 0, V, {V, C}));
    return m;
  }
  if (t.name == "norm.weight" || t.name == "norm.bias") {
    m.pieces.push_back(rows_piece(t, "model." + t.name, 0, 1, {C}));
    return m;
  }
  // "layers.L.<module>.<weight|bias>"
  const std::string prefix = "model." + t.name.substr(0, t.name.find('.', 7) + 1);
  const std::string rest = t.name.substr(prefix.size() - 6);
  const bool bias = rest.size() > 5 && rest.compare(rest.size() - 5, 5, ".bias") == 0;
  auto split = [&](const std::vector<std::pair<std::string, std::int64_t>>& parts) {
    std::int64_t at = 0;
    for (const auto& [module, width] : parts) {
      if (bias) m.pieces.push_back({prefix + module + ".bias", at, width, {width}, false, 1, width});
      else m.pieces.push_back(rows_piece(t, prefix + module + ".weight", at, width, {width, C}));
      at += width;
    }
  };
  if (rest.rfind("self_attn.qkv_proj.", 0) == 0) {
    split({{"self_attn.q_proj", Q}, {"self_attn.k_proj", KV}, {"self_attn.v_proj", KV}});
  } else if (rest.rfind("mlp.gate_up_proj.", 0) == 0) {
    split({{"mlp.gate_proj", F}, {"mlp.up_proj", F}});
  } else if (t.rows > 1) {
    m.pieces.push_back(rows_piece(t, prefix + rest, 0, t.rows, {t.rows, t.cols}));  // o_proj, down_proj
  } else {
    m.pieces.push_back(rows_piece(t, prefix + rest, 0, 1, {t.cols}));  // norms, o_proj / down_proj biases
  }
  return m;
}

// transformers' GPT2Model names; Conv1D weights stored [in, out] (modeling_gpt2.py, pytorch_utils.Conv1D).
HfTensorMapping gpt2_mapping(const exec::ParamLayout& layout, const exec::ParamTensor& t) {
  const exec::ModelShape& s = layout.shape();
  HfTensorMapping m{&t, {}};
  if (&t == &layout.wte()) {
    m.pieces.push_back(rows_piece(t, "wte.weight", 0, s.vocab, {s.vocab, s.hidden}));
  } else if (t.name == "wpe") {
    m.pieces.push_back(rows_piece(t, "wpe.weight", 0, t.rows, {t.rows, t.cols}));
  } else if (t.name == "lm_head") {
    m.pieces.push_back(rows_piece(t, "lm_head.weight", 0, s.vocab, {s.vocab, s.hidden}));
  } else if (t.rows > 1) {
    m.pieces.push_back({t.name, 0, t.numel(), {t.cols, t.rows}, true, t.rows, t.cols});
  } else {
    m.pieces.push_back(rows_piece(t, t.name, 0, 1, {t.cols}));
  }
  return m;
}

// Tensors transformers' own loaders skip: GPT-2's causal-mask buffers (older checkpoints hold them), a tied
// head's copy of the embedding, the rotary inverse frequencies old Llama checkpoints carry.
// A layer list's tensors under torchvision's names as the layout has them ("conv1.weight" [out, in/groups, k, k],
// "bn1.weight" [C], "fc.weight" [out, in]), whole and in our element order.
HfTensorMapping network_mapping(const exec::ParamTensor& t) {
  HfTensorPiece p;
  p.name = t.name;
  p.count = t.numel();
  p.rows = t.rows;
  p.cols = t.cols;
  p.shape = !t.dims.empty() ? t.dims : t.rows == 1 ? std::vector<std::int64_t>{t.cols}
                                                   : std::vector<std::int64_t>{t.rows, t.cols};
  return {&t, {p}};
}

bool ignored_by_transformers(const std::string& name, const exec::ModelShape& s) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (s.naming == exec::TensorNaming::gpt2 && (ends_with(".attn.bias") || ends_with(".attn.masked_bias"))) return true;
  if (s.tied_head && name == "lm_head.weight") return true;
  return ends_with("rotary_emb.inv_freq");
}

}  // namespace

std::vector<HfTensorMapping> hf_tensor_mappings(const exec::ParamLayout& layout) {
  std::vector<HfTensorMapping> out;
  for (const exec::ParamTensor& t : layout.tensors())
    // A layer list and LoRA's adapters (named as PEFT saves them, exec/lora_layout.h) are stored as they are.
    out.push_back(layout.is_network() || layout.is_adapters()          ? network_mapping(t)
                  : layout.shape().naming == exec::TensorNaming::llama ? llama_mapping(layout, t)
                                                                       : gpt2_mapping(layout, t));
  return out;
}

HfCheckpointSource::HfCheckpointSource(const std::string& path, const exec::ParamLayout& layout,
                                       const std::string& flag)
    : checkpoint_(std::make_unique<SafetensorsCheckpoint>(path)), layout_(layout),
      mappings_(hf_tensor_mappings(layout)), flag_(flag) {
  const bool network = layout.is_network();
  const bool gpt2 = !network && layout.shape().naming == exec::TensorNaming::gpt2;
  std::set<std::string> used;
  std::int64_t missing = 0;
  std::string first_missing;
  for (HfTensorMapping& m : mappings_)
    for (HfTensorPiece& p : m.pieces) {
      // GPT2LMHeadModel.save_pretrained writes the GPT2Model's tensors under "transformer.".
      if (gpt2 && !checkpoint_->find(p.name) && checkpoint_->find("transformer." + p.name)) p.name = "transformer." + p.name;
      const TensorInfo* info = checkpoint_->find(p.name);
      if (!info) {
        if (missing++ == 0) first_missing = p.name + " (expected shape " + shape_text(p.shape) + ")";
        continue;
      }
      used.insert(p.name);
      if (info->shape != p.shape)
        throw InputError(info->file, flag_, "tensor " + p.name + " has shape " + shape_text(info->shape) +
                                                 ", this model expects " + shape_text(p.shape));
      if (info->dtype != "F32" && info->dtype != "BF16" && info->dtype != "F16" && info->dtype != "F64")
        throw InputError(info->file, flag_, "tensor " + p.name + " has dtype " + info->dtype +
                                                 ", which cannot be read; expected F32, BF16 or F16");
    }
  // A layer list's buffers (torchvision's BatchNorm running statistics), whole on every rank; their
  // num_batches_tracked counters are read by nothing here (momentum 0.1 does not use them) and accepted.
  for (const exec::BufferTensor& b : layout.buffers()) {
    const TensorInfo* info = checkpoint_->find(b.name);
    if (!info) {
      if (missing++ == 0) first_missing = b.name + " (expected shape [" + std::to_string(b.numel) + "])";
      continue;
    }
    used.insert(b.name);
    if (info->shape != std::vector<std::int64_t>{b.numel})
      throw InputError(info->file, flag_, "tensor " + b.name + " has shape " + shape_text(info->shape) +
                                              ", this model expects [" + std::to_string(b.numel) + "]");
    if (info->dtype != "F32" && info->dtype != "BF16" && info->dtype != "F16" && info->dtype != "F64")
      throw InputError(info->file, flag_, "tensor " + b.name + " has dtype " + info->dtype +
                                               ", which cannot be read; expected F32, BF16 or F16");
    const std::string stem = b.name.substr(0, b.name.rfind('.'));
    if (checkpoint_->find(stem + ".num_batches_tracked")) used.insert(stem + ".num_batches_tracked");
  }
  const std::vector<std::string> names = checkpoint_->names();
  if (missing > 0) {
    const std::string family = network ? "torchvision" : gpt2 ? "gpt2" : "llama";
    throw InputError(path, flag_, "tensor " + first_missing + " is missing" +
                                      (missing > 1 ? " (and " + std::to_string(missing - 1) + " more of the " +
                                                         family + " tensors this model needs" +
                                                         (used.empty() ? "; none is there: a checkpoint of another "
                                                                         "architecture?" : "") + ")"
                                                   : ""));
  }
  for (const std::string& name : names)
    if (!used.count(name) && (network || !ignored_by_transformers(name, layout.shape())))
      throw InputError(checkpoint_->find(name)->file, flag_,
                       "tensor " + name + " " + shape_text(checkpoint_->find(name)->shape) +
                           " is not part of this model (another architecture or configuration?)");
}

HfCheckpointSource::~HfCheckpointSource() = default;

std::string HfCheckpointSource::description() const { return checkpoint_->source(); }

void HfCheckpointSource::fill(std::int64_t begin, std::int64_t n, float* out) const {
  std::fill(out, out + n, 0.0f);  // alignment gaps and padded vocabulary rows
  const std::int64_t end = begin + n;
  std::vector<float> row;
  for (const HfTensorMapping& m : mappings_) {
    const exec::ParamTensor& t = *m.tensor;
    if (t.offset >= end || t.offset + t.numel() <= begin) continue;
    for (const HfTensorPiece& p : m.pieces) {
      // the piece's flat range, intersected with the request
      const std::int64_t lo = std::max(begin, t.offset + p.begin), hi = std::min(end, t.offset + p.begin + p.count);
      if (lo >= hi) continue;
      const TensorInfo& info = *checkpoint_->find(p.name);
      const std::int64_t first = lo - (t.offset + p.begin);  // element of the piece in our (row-major) order
      if (!p.transposed) {
        checkpoint_->read_as_float(info, first, hi - lo, out + (lo - begin));
        continue;
      }
      // Stored [cols, rows]: our element (r, c) is the checkpoint's (c, r). Our rows r0..r1 are a column range
      // of every stored row: read that segment of each stored row, then place it.
      const std::int64_t last = first + (hi - lo) - 1;
      const std::int64_t r0 = first / p.cols, r1 = last / p.cols;
      row.resize(static_cast<std::size_t>(r1 - r0 + 1));
      for (std::int64_t c = 0; c < p.cols; ++c) {
        checkpoint_->read_as_float(info, c * p.rows + r0, r1 - r0 + 1, row.data());
        for (std::int64_t r = r0; r <= r1; ++r) {
          const std::int64_t e = r * p.cols + c;  // our element in the piece
          if (e >= first && e <= last) out[lo - begin + (e - first)] = row[static_cast<std::size_t>(r - r0)];
        }
      }
    }
  }
}

std::vector<float> HfCheckpointSource::buffer(const exec::BufferTensor& b) const {
  std::vector<float> values(static_cast<std::size_t>(b.numel));
  checkpoint_->read_as_float(*checkpoint_->find(b.name), 0, b.numel, values.data());
  return values;
}

exec::ZeroEngine::StateSource HfCheckpointSource::state_source() const {
  return [this](std::int64_t begin, std::int64_t n, float* master, float* m, float* v) {
    if (master) fill(begin, n, master);
    for (float* d : {m, v})
      if (d) std::fill(d, d + n, 0.0f);  // a fresh start: AdamW's moments at 0
  };
}

void write_hf_safetensors(const std::string& path, const exec::ParamLayout& layout, const FlatTensorReader& values,
                          const std::string& dtype, const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter writer(path);
  writer.set_metadata(metadata);
  const std::vector<HfTensorMapping> mappings = hf_tensor_mappings(layout);
  for (const HfTensorMapping& m : mappings)
    for (const HfTensorPiece& p : m.pieces) writer.add(p.name, dtype, p.shape);
  std::vector<float> piece, stored;
  for (const HfTensorMapping& m : mappings)
    for (const HfTensorPiece& p : m.pieces) {
      piece.resize(static_cast<std::size_t>(p.count));
      values(*m.tensor, p.begin, p.count, piece.data());
      if (p.transposed) {  // ours [rows, cols] -> stored [cols, rows]
        stored.resize(piece.size());
        for (std::int64_t r = 0; r < p.rows; ++r)
          for (std::int64_t c = 0; c < p.cols; ++c) stored[c * p.rows + r] = piece[r * p.cols + c];
        writer.write(p.name, 0, stored.data(), p.count);
      } else {
        writer.write(p.name, 0, piece.data(), p.count);
      }
    }
  writer.finish();
}

}  // namespace zeroplan
