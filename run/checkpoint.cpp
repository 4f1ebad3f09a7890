#include "run/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/input_error.h"
#include "core/json_input.h"
#include "run/atomic_file.h"

namespace zeroplan {

namespace fs = std::filesystem;

namespace {

constexpr int kFormat = 1;
constexpr const char* kManifest = "manifest.json";
constexpr const char* kBuffersFile = "buffers.bin";

// A system call's failure: the call, the path and errno's text, with the source position of the check.
[[noreturn]] void fail_io(const char* what, const std::string& path, const char* file, int line) {
  throw std::runtime_error(std::string(what) + " " + path + ": " + std::strerror(errno) + " (" + file + ":" +
                           std::to_string(line) + ")");
}
#define IO_CHECK(ok, what, path) \
  do {                           \
    if (!(ok)) fail_io(what, path, __FILE__, __LINE__); \
  } while (0)

std::string rank_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.bin", rank);
  return name;
}

struct Piece {
  std::string tensor;
  std::int64_t tensor_offset, count, offset;
};

// The tensor pieces of `ranges` of a layout (alignment gaps hold no values and are left out); `offset` counts
// elements from the start of the rank's section.
std::vector<Piece> pieces_of(const exec::ParamLayout& layout, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) {
  std::vector<Piece> out;
  std::int64_t at = 0;
  for (const auto& [begin, n] : ranges) {
    const std::int64_t end = begin + n;
    for (const exec::ParamTensor& t : layout.tensors()) {
      const std::int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel());
      if (lo < hi) out.push_back(Piece{t.name, lo - t.offset, hi - lo, at + (lo - begin)});
    }
    at += n;
  }
  return out;
}

// Every field of the shape: the layout (and the export's names) are rebuilt from it. Checkpoints written before
// the Llama family existed carry the first six only, and are GPT-2's (make_shape's defaults).
nlohmann::json shape_json(const exec::ModelShape& s) {
  return {{"vocab", s.vocab},
          {"padded_vocab", s.padded_vocab},
          {"hidden", s.hidden},
          {"layers", s.layers},
          {"heads", s.heads},
          {"max_seq", s.max_seq},
          {"kv_heads", s.kv_heads},
          {"head_size", s.head_size},
          {"ffn_hidden", s.ffn_hidden},
          {"norm", s.norm == exec::NormKind::rms_norm ? "rms_norm" : "layer_norm"},
          {"norm_eps", s.norm_eps},
          {"position", s.position == exec::PositionKind::rope ? "rope" : "learned"},
          {"rope_theta", s.rope_theta},
          {"rope_scaling_llama3", s.rope_scaling.llama3},
          {"rope_scaling_factor", s.rope_scaling.factor},
          {"rope_low_freq_factor", s.rope_scaling.low_freq_factor},
          {"rope_high_freq_factor", s.rope_scaling.high_freq_factor},
          {"rope_original_max_position", s.rope_scaling.original_max_position},
          {"mlp", s.mlp == exec::MlpKind::swiglu ? "swiglu" : "gelu"},
          {"qkv_bias", s.qkv_bias},
          {"attn_out_bias", s.attn_out_bias},
          {"mlp_bias", s.mlp_bias},
          {"norm_bias", s.norm_bias},
          {"tied_head", s.tied_head},
          {"naming", s.naming == exec::TensorNaming::llama ? "llama" : "gpt2"}};
}

exec::ModelShape shape_from_json(const JsonFields& sh) {
  exec::ModelShape s = exec::make_shape(sh.positive_integer("vocab"), sh.positive_integer("hidden"),
                                        sh.positive_integer("layers"), sh.positive_integer("heads"),
                                        sh.positive_integer("max_seq"));
  s.padded_vocab = sh.positive_integer("padded_vocab");
  if (!sh.has("naming")) return s;  // an older checkpoint: GPT-2
  s.kv_heads = sh.positive_integer("kv_heads");
  s.head_size = sh.positive_integer("head_size");
  s.ffn_hidden = sh.positive_integer("ffn_hidden");
  s.norm = sh.one_of("norm", {"layer_norm", "rms_norm"}) == "rms_norm" ? exec::NormKind::rms_norm : exec::NormKind::layer_norm;
  s.norm_eps = sh.positive_number("norm_eps");
  s.position = sh.one_of("position", {"learned", "rope"}) == "rope" ? exec::PositionKind::rope : exec::PositionKind::learned;
  s.rope_theta = sh.positive_number("rope_theta");
  s.rope_scaling.llama3 = sh.boolean("rope_scaling_llama3");
  s.rope_scaling.factor = sh.positive_number("rope_scaling_factor");
  s.rope_scaling.low_freq_factor = sh.positive_number("rope_low_freq_factor");
  s.rope_scaling.high_freq_factor = sh.positive_number("rope_high_freq_factor");
  s.rope_scaling.original_max_position = sh.positive_integer("rope_original_max_position");
  s.mlp = sh.one_of("mlp", {"gelu", "swiglu"}) == "swiglu" ? exec::MlpKind::swiglu : exec::MlpKind::gelu;
  s.qkv_bias = sh.boolean("qkv_bias");
  s.attn_out_bias = sh.boolean("attn_out_bias");
  s.mlp_bias = sh.boolean("mlp_bias");
  s.norm_bias = sh.boolean("norm_bias");
  s.tied_head = sh.boolean("tied_head");
  s.naming = sh.one_of("naming", {"gpt2", "llama"}) == "llama" ? exec::TensorNaming::llama : exec::TensorNaming::gpt2;
  return s;
}

}  // namespace

std::string checkpoint_step_dir(const std::string& save_dir, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return (fs::path(save_dir) / name).string();
}

void check_save_dir(const std::string& save_dir, const std::vector<std::int64_t>& steps) {
  for (std::int64_t step : steps) {
    const std::string dir = checkpoint_step_dir(save_dir, step);
    if (fs::exists(fs::path(dir) / kManifest))
      throw InputError(save_dir, "--save-dir", dir + " already holds a complete checkpoint; nothing is overwritten "
                                               "(choose another --save-dir, or --resume from it)");
  }
  if (fs::exists(save_dir) && !fs::is_directory(save_dir))
    throw InputError(save_dir, "--save-dir", "exists and is not a directory");
}

void save_checkpoint(const std::string& save_dir, exec::Trainer& trainer, exec::Communicator* comm,
                     const CheckpointState& state) {
  const int rank = trainer.rank(), world = trainer.world();
  const std::string dir = checkpoint_step_dir(save_dir, state.step);
  if (fs::exists(fs::path(dir) / kManifest))
    throw InputError(save_dir, "--save-dir", dir + " already holds a complete checkpoint; nothing is overwritten "
                                             "(choose another --save-dir, or --resume from it)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(save_dir, "--save-dir", "cannot create " + dir + ": " + ec.message());

  std::vector<float> master, m, v;
  trainer.read_owned_state(master, m, v);
  const std::size_t bytes = master.size() * sizeof(float);
  const std::uint32_t crc = write_file_atomically((fs::path(dir) / rank_file_name(rank)).string(),
                                             {{master.data(), bytes}, {m.data(), bytes}, {v.data(), bytes}});
  fsync_directory(dir);

  // Every rank's CRC and size reach rank 0 (a sum of one-hot rows; doubles hold both exactly); the sum also
  // tells rank 0 that every rank's file is in place.
  std::vector<double> files(2 * static_cast<std::size_t>(world), 0.0);
  files[2 * rank] = static_cast<double>(crc);
  files[2 * rank + 1] = static_cast<double>(3 * bytes);
  if (comm && world > 1)
    for (std::size_t at = 0; at < files.size(); at += 64)
      comm->all_reduce_host(files.data() + at, static_cast<int>(std::min<std::size_t>(64, files.size() - at)));

  // A layer list's buffers (BatchNorm's running statistics), equal on every rank: rank 0's, in one file.
  const std::vector<exec::BufferTensor>& buffer_tensors = trainer.layout().buffers();
  nlohmann::json buffers_entry;
  if (rank == 0 && !buffer_tensors.empty()) {
    std::vector<float> values;
    nlohmann::json names = nlohmann::json::array();
    for (const exec::BufferTensor& b : buffer_tensors) {
      const std::vector<float> v = trainer.buffer(b.name);
      values.insert(values.end(), v.begin(), v.end());
      names.push_back({b.name, b.numel});
    }
    const std::size_t buffer_bytes = values.size() * sizeof(float);
    const std::uint32_t buffer_crc =
        write_file_atomically((fs::path(dir) / kBuffersFile).string(), {{values.data(), buffer_bytes}});
    fsync_directory(dir);
    buffers_entry = {{"file", kBuffersFile}, {"bytes", buffer_bytes}, {"crc32", buffer_crc}, {"tensors", names}};
  }

  if (rank == 0) {
    // Rank r owns chunk r of every bucket: rank 0's range (begin, n) is rank r's (begin + r n, n).
    const auto mine = trainer.owned_ranges();
    nlohmann::json file_list = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
      std::int64_t elements = 0;
      for (const auto& [begin, n] : mine) {
        ranges.emplace_back(begin + r * n, n);
        elements += n;
      }
      nlohmann::json segments = nlohmann::json::array();
      for (const Piece& p : pieces_of(trainer.layout(), ranges))
        segments.push_back({p.tensor, p.tensor_offset, p.count, p.offset});
      file_list.push_back({{"rank", r},
                           {"file", rank_file_name(r)},
                           {"elements", elements},
                           {"bytes", static_cast<std::int64_t>(files[2 * r + 1])},
                           {"crc32", static_cast<std::uint32_t>(files[2 * r])},
                           {"segments", segments}});
    }
    nlohmann::json manifest = {
        {"format", kFormat},
        {"sections", {"master_params_fp32", "adamw_momentum_fp32", "adamw_variance_fp32"}},
        {"step", state.step},
        {"optimizer_step", state.optimizer_step},
        {"loss_scaler",
         {{"scale", state.scaler.scale},
          {"cur_iter", state.scaler.cur_iter},
          {"last_overflow_iter", state.scaler.last_overflow_iter},
          {"cur_hysteresis", state.scaler.cur_hysteresis},
          {"skipped", state.scaler.skipped}}},
        {"data_position", state.data_position},
        {"seed", state.seed},
        {"data", state.data},
        {"world", world},
        {"stage", state.stage},
        {"precision", state.precision},
        {"files", file_list}};
    // A transformer's shape; a layer list's tensors (name, elements) in layout order, which a resuming run's
    // description must give again.
    if (trainer.layout().is_network()) {
      nlohmann::json tensors = nlohmann::json::array();
      for (const exec::ParamTensor& t : trainer.layout().tensors()) tensors.push_back({t.name, t.numel()});
      manifest["network_tensors"] = tensors;
    } else {
      manifest["shape"] = shape_json(state.shape);
    }
    if (!buffers_entry.is_null()) manifest["buffers"] = buffers_entry;
    if (state.lora) {
      const exec::LoraExecSettings& l = state.lora->settings;
      manifest["lora"] = {{"r", l.rank},
                          {"lora_alpha", l.alpha},
                          {"modules", l.modules},
                          {"target_modules", l.targets},
                          {"quantize_base", l.quantize_nf4 ? "nf4" : "none"},
                          {"base_model_name_or_path", state.lora->base_model ? nlohmann::json(*state.lora->base_model)
                                                                             : nlohmann::json(nullptr)}};
    }
    const std::string text = manifest.dump(1);
    write_file_atomically((fs::path(dir) / kManifest).string(), {{text.data(), text.size()}});
    fsync_directory(dir);
  }
  // No rank goes on (and possibly fails) before the checkpoint is complete.
  if (comm && world > 1) {
    double done = 1;
    comm->all_reduce_host(&done, 1);
  }
}

CheckpointReader::CheckpointReader(const std::string& dir, const std::string& flag) : flag_(flag) {
  fs::path chosen = dir;
  if (!fs::exists(chosen / kManifest)) {
    // A save directory: its latest complete step.
    std::error_code ec;
    std::string best;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step-", 0) == 0 && fs::exists(entry.path() / kManifest) && name > best) best = name;
    }
    if (ec) throw InputError(dir, flag, "cannot read the directory: " + ec.message());
    if (best.empty())
      throw InputError(dir, flag, "no complete checkpoint here (expected manifest.json, or step-* directories "
                                  "holding one; a step directory without it is an interrupted save)");
    chosen /= best;
  }
  dir_ = chosen.string();
  const std::string manifest_path = (chosen / kManifest).string();
  const nlohmann::json doc = read_json_file(manifest_path);
  if (!doc.is_object()) throw InputError(manifest_path, "(top level)", "expected a JSON object");
  const JsonFields f(doc, manifest_path);
  if (f.positive_integer("format") != kFormat)
    f.fail("format", "this zeroplan reads checkpoint format " + std::to_string(kFormat));
  state_.step = f.non_negative_integer("step");
  state_.optimizer_step = static_cast<int>(f.non_negative_integer("optimizer_step"));
  const JsonFields ls = f.object("loss_scaler");
  state_.scaler.scale = ls.positive_number("scale");
  state_.scaler.cur_iter = ls.non_negative_integer("cur_iter");
  if (!ls.raw("last_overflow_iter").is_number_integer()) ls.fail("last_overflow_iter", "expected an integer");
  state_.scaler.last_overflow_iter = ls.raw("last_overflow_iter").get<std::int64_t>();
  state_.scaler.cur_hysteresis = ls.non_negative_integer("cur_hysteresis");
  state_.scaler.skipped = ls.non_negative_integer("skipped");
  state_.data_position = f.non_negative_integer("data_position");
  state_.seed = static_cast<std::uint64_t>(f.non_negative_integer("seed"));
  state_.data = f.string("data");
  state_.world = static_cast<int>(f.positive_integer("world"));
  state_.stage = static_cast<int>(f.non_negative_integer("stage"));
  state_.precision = f.one_of("precision", {"fp32", "fp16", "bf16"});
  if (doc.contains("network_tensors")) {
    const nlohmann::json& tensors = f.raw("network_tensors");
    if (!tensors.is_array()) f.fail("network_tensors", "expected [name, elements] entries");
    for (const nlohmann::json& t : tensors) {
      if (!t.is_array() || t.size() != 2 || !t[0].is_string() || !t[1].is_number_integer() || t[1].get<std::int64_t>() < 1)
        f.fail("network_tensors", "expected [name, elements] entries");
      network_tensors_.emplace_back(t[0].get<std::string>(), t[1].get<std::int64_t>());
    }
  } else {
    state_.shape = shape_from_json(f.object("shape"));
  }
  if (doc.contains("lora")) {
    const JsonFields l = f.object("lora");
    CheckpointLora lora;
    lora.settings.enabled = true;
    lora.settings.rank = l.positive_integer("r");
    lora.settings.alpha = l.positive_number("lora_alpha");
    for (const char* key : {"modules", "target_modules"}) {
      const nlohmann::json& names = l.raw(key);
      if (!names.is_array() || names.empty()) l.fail(key, "expected a list of module names");
      for (const nlohmann::json& n : names) {
        if (!n.is_string()) l.fail(key, "expected a list of module names");
        (std::string(key) == "modules" ? lora.settings.modules : lora.settings.targets).push_back(n.get<std::string>());
      }
    }
    lora.settings.quantize_nf4 = l.one_of("quantize_base", {"nf4", "none"}) == "nf4";
    const nlohmann::json& base = l.raw("base_model_name_or_path");
    if (base.is_string()) lora.base_model = base.get<std::string>();
    else if (!base.is_null()) l.fail("base_model_name_or_path", "expected a path or null");
    state_.lora = lora;
  }
  const nlohmann::json& list = f.raw("files");
  if (!list.is_array() || static_cast<int>(list.size()) != state_.world)
    f.fail("files", "expected one entry per rank (" + std::to_string(state_.world) + ")");
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_object()) f.fail("files", "entry " + std::to_string(i) + " is not an object");
    const JsonFields e(list[i], manifest_path, "files[" + std::to_string(i) + "]");
    File file;
    const std::string name = e.string("file");
    if (name.find('/') != std::string::npos || name == ".." || name.empty())
      e.fail("file", "expected a file name inside the checkpoint directory");
    file.path = (chosen / name).string();
    file.elements = e.non_negative_integer("elements");
    file.bytes = e.non_negative_integer("bytes");
    if (file.elements > (std::int64_t{1} << 58) || file.bytes != 12 * file.elements)
      e.fail("bytes", "expected 12 bytes per element (three fp32 sections)");
    const std::int64_t crc = e.non_negative_integer("crc32");
    if (crc > 0xffffffffLL) e.fail("crc32", "expected a 32-bit value");
    file.crc = static_cast<std::uint32_t>(crc);
    const nlohmann::json& segs = e.raw("segments");
    if (!segs.is_array()) e.fail("segments", "expected an array");
    for (const nlohmann::json& s : segs) {
      if (!s.is_array() || s.size() != 4 || !s[0].is_string() || !s[1].is_number_integer() ||
          !s[2].is_number_integer() || !s[3].is_number_integer())
        e.fail("segments", "expected [tensor, tensor_offset, count, offset] entries");
      const Segment seg{s[1].get<std::int64_t>(), s[2].get<std::int64_t>(), s[3].get<std::int64_t>(),
                        static_cast<int>(files_.size())};
      if (seg.tensor_offset < 0 || seg.count < 1 || seg.offset < 0 || seg.offset > file.elements - seg.count)
        e.fail("segments", "a segment of " + s[0].get<std::string>() + " lies outside the file's " +
                               std::to_string(file.elements) + " elements");
      // Its end in the tensor (tensor_offset + count) must be a count read() can form: no tensor holds 2^58
      // elements (the bound on a file's elements above).
      if (seg.tensor_offset > (std::int64_t{1} << 58) - seg.count)
        e.fail("segments", "a segment of " + s[0].get<std::string>() + " ends past element 2^58 of the tensor "
                               "(tensor_offset " + std::to_string(seg.tensor_offset) + " + count " +
                               std::to_string(seg.count) + "); expected a place inside a tensor");
      segments_[s[0].get<std::string>()].push_back(seg);
    }
    if (!fs::exists(file.path)) throw InputError(file.path, flag, "missing: the manifest lists it");
    files_.push_back(file);
  }
  if (doc.contains("buffers")) {
    const JsonFields b = f.object("buffers");
    const std::string name = b.string("file");
    if (name != kBuffersFile) b.fail("file", std::string("expected ") + kBuffersFile);
    buffers_file_.path = (chosen / name).string();
    buffers_file_.bytes = b.non_negative_integer("bytes");
    const std::int64_t crc = b.non_negative_integer("crc32");
    if (crc > 0xffffffffLL) b.fail("crc32", "expected a 32-bit value");
    buffers_file_.crc = static_cast<std::uint32_t>(crc);
    const nlohmann::json& tensors = b.raw("tensors");
    if (!tensors.is_array()) b.fail("tensors", "expected [name, count] entries");
    std::int64_t total = 0;
    for (const nlohmann::json& t : tensors) {
      if (!t.is_array() || t.size() != 2 || !t[0].is_string() || !t[1].is_number_integer() ||
          t[1].get<std::int64_t>() < 1 || t[1].get<std::int64_t>() > (std::int64_t{1} << 40))
        b.fail("tensors", "expected [name, count] entries with a count from 1 to 2^40");
      buffer_tensors_.push_back({t[0].get<std::string>(), t[1].get<std::int64_t>()});
      total += t[1].get<std::int64_t>();
    }
    if (buffers_file_.bytes != 4 * total) b.fail("bytes", "expected 4 bytes per value of its tensors");
    if (!fs::exists(buffers_file_.path)) throw InputError(buffers_file_.path, flag, "missing: the manifest lists it");
  }
  for (auto& [name, segs] : segments_) {
    std::sort(segs.begin(), segs.end(), [](const Segment& a, const Segment& b) { return a.tensor_offset < b.tensor_offset; });
    // Every element is saved by exactly one rank; pieces that overlap would let read() count an element twice and
    // leave another unwritten (found by the checkpoint_manifest fuzz target).
    for (std::size_t i = 1; i < segs.size(); ++i) {
      const Segment& a = segs[i - 1];
      const Segment& b = segs[i];
      if (b.tensor_offset < a.tensor_offset + a.count)
        throw InputError(manifest_path, "files[].segments",
                         "pieces of " + name + " overlap: elements [" + std::to_string(a.tensor_offset) + ", " +
                             std::to_string(a.tensor_offset + a.count) + ") in " +
                             fs::path(files_[static_cast<std::size_t>(a.file)].path).filename().string() + " and [" +
                             std::to_string(b.tensor_offset) + ", " + std::to_string(b.tensor_offset + b.count) +
                             ") in " + fs::path(files_[static_cast<std::size_t>(b.file)].path).filename().string() +
                             "; expected each element saved once");
    }
  }
}

CheckpointReader::~CheckpointReader() {
  for (File& f : files_)
    if (f.fd >= 0) ::close(f.fd);
  if (buffers_file_.fd >= 0) ::close(buffers_file_.fd);
}

void CheckpointReader::open_file(File& f) {
  f.fd = ::open(f.path.c_str(), O_RDONLY);
  IO_CHECK(f.fd >= 0, "open", f.path);
  // The whole file once: its size and CRC-32 against the manifest.
  std::vector<char> buffer(std::size_t{1} << 24);
  std::int64_t total = 0;
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (;;) {
    const ssize_t n = ::read(f.fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    IO_CHECK(n >= 0, "read", f.path);
    if (n == 0) break;
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<z_size_t>(n));
    total += n;
  }
  if (total != f.bytes)
    throw InputError(f.path, flag_, "holds " + std::to_string(total) + " bytes where the manifest says " +
                                        std::to_string(f.bytes) + " (truncated or not this checkpoint's file)");
  if (static_cast<std::uint32_t>(crc) != f.crc)
    throw InputError(f.path, flag_, "CRC-32 does not match the manifest (the file is corrupted)");
  f.verified = true;
}

void CheckpointReader::verify() {
  for (File& f : files_)
    if (!f.verified) open_file(f);
  if (!buffers_file_.path.empty() && !buffers_file_.verified) open_file(buffers_file_);
}

void CheckpointReader::read(const std::string& tensor, std::int64_t offset, std::int64_t count, float* master,
                            float* m, float* v) {
  const auto it = segments_.find(tensor);
  if (it == segments_.end())
    throw InputError(dir_, flag_, "the checkpoint holds no tensor " + tensor + " (a different model?)");
  std::int64_t covered = 0;
  for (const Segment& s : it->second) {
    const std::int64_t lo = std::max(offset, s.tensor_offset), hi = std::min(offset + count, s.tensor_offset + s.count);
    if (lo >= hi) continue;
    File& f = files_[s.file];
    if (!f.verified) open_file(f);
    float* dst[3] = {master, m, v};
    for (int section = 0; section < 3; ++section) {
      if (!dst[section]) continue;
      const off_t at = static_cast<off_t>((section * f.elements + s.offset + (lo - s.tensor_offset)) * 4);
      char* out = reinterpret_cast<char*>(dst[section] + (lo - offset));
      std::size_t left = static_cast<std::size_t>(hi - lo) * 4;
      off_t pos = at;
      while (left > 0) {
        const ssize_t n = ::pread(f.fd, out, left, pos);
        if (n < 0 && errno == EINTR) continue;
        IO_CHECK(n > 0, "read", f.path);
        out += n;
        pos += n;
        left -= static_cast<std::size_t>(n);
      }
    }
    covered += hi - lo;
  }
  if (covered != count)
    throw InputError(dir_, flag_, "the checkpoint covers " + std::to_string(covered) + " of " + std::to_string(count) +
                                      " elements of " + tensor + " from " + std::to_string(offset));
}

void CheckpointReader::restore(exec::Trainer& trainer) {
  if (trainer.layout().is_network() != is_network())
    throw InputError(dir_, flag_, is_network() ? "this checkpoint is of a layer-list model; this run trains a transformer"
                                               : "this checkpoint is of a transformer; this run trains a layer-list model");
  if (is_network()) {
    // Compared by name: the segments address tensors by name and offset, so a checkpoint written with the
    // tensors in another order (layouts before layer units were placed largest first) restores the same.
    std::vector<std::pair<std::string, std::int64_t>> have;
    for (const exec::ParamTensor& t : trainer.layout().tensors()) have.emplace_back(t.name, t.numel());
    std::vector<std::pair<std::string, std::int64_t>> saved = network_tensors_;
    std::sort(have.begin(), have.end());
    std::sort(saved.begin(), saved.end());
    auto label = [](const std::vector<std::pair<std::string, std::int64_t>>& v, std::size_t i) {
      return i < v.size() ? v[i].first + " (" + std::to_string(v[i].second) + " elements)" : std::string("nothing");
    };
    for (std::size_t i = 0; i < std::max(have.size(), saved.size()); ++i)
      if (i >= have.size() || i >= saved.size() || have[i] != saved[i])
        throw InputError(dir_, flag_, "this run's model differs from the one saved: in name order, tensor " +
                                          std::to_string(i) + " is " + label(have, i) + " here, " + label(saved, i) +
                                          " in the checkpoint");
  }
  // LoRA: the checkpoint's states are adapters, which only a run with the same adapters continues.
  const exec::LoraExecSettings& lora = trainer.config().lora;
  if (lora.enabled != state_.lora.has_value())
    throw InputError(dir_, flag_, state_.lora ? "this checkpoint holds LoRA adapters; this run trains the whole model "
                                                "(give the same --lora-rank, --lora-alpha, --lora-targets)"
                                              : "this checkpoint holds the whole model's states; this run trains LoRA "
                                                "adapters");
  if (state_.lora) {
    const exec::LoraExecSettings& saved = state_.lora->settings;
    std::string differences;
    auto differ = [&](const std::string& what, const std::string& ours, const std::string& theirs) {
      if (ours != theirs) differences += (differences.empty() ? "" : ", ") + what + " " + theirs + " (this run: " + ours + ")";
    };
    auto list = [](const std::vector<std::string>& v) {
      std::string t;
      for (const std::string& x : v) t += (t.empty() ? "" : ",") + x;
      return t;
    };
    differ("r", std::to_string(lora.rank), std::to_string(saved.rank));
    differ("lora_alpha", nlohmann::json(lora.alpha).dump(), nlohmann::json(saved.alpha).dump());
    differ("modules", list(lora.modules), list(saved.modules));
    differ("quantize_base", lora.quantize_nf4 ? "nf4" : "none", saved.quantize_nf4 ? "nf4" : "none");
    if (!differences.empty())
      throw InputError(dir_, flag_, "this run's LoRA adapters differ from the ones saved: " + differences);
  }
  const exec::ModelShape& have = trainer.config().shape;
  const exec::ModelShape& saved = state_.shape;
  const nlohmann::json have_json = shape_json(have), saved_json = shape_json(saved);
  if (!is_network() && have_json != saved_json) {
    std::string differences;
    for (const auto& [key, value] : saved_json.items())
      if (have_json.at(key) != value)
        differences += (differences.empty() ? "" : ", ") + key + " " + value.dump() + " (this run: " +
                       have_json.at(key).dump() + ")";
    throw InputError(dir_, flag_, "this run's model differs from the one saved: " + differences);
  }
  const exec::ParamLayout& layout = trainer.layout();
  auto source = [&](std::int64_t begin, std::int64_t n, float* master, float* m, float* v) {
    for (float* d : {master, m, v})
      if (d) std::fill(d, d + n, 0.0f);  // alignment gaps
    for (const exec::ParamTensor& t : layout.tensors()) {
      const std::int64_t lo = std::max(begin, t.offset), hi = std::min(begin + n, t.offset + t.numel());
      if (lo >= hi) continue;
      const std::int64_t at = lo - begin;
      read(t.name, lo - t.offset, hi - lo, master ? master + at : nullptr, m ? m + at : nullptr, v ? v + at : nullptr);
    }
  };
  trainer.restore_state(source, state_.optimizer_step, state_.scaler);
  // A layer list's buffers: every one the model has, from the checkpoint's buffers file.
  if (layout.buffers().empty()) return;
  if (buffer_tensors_.empty())
    throw InputError(dir_, flag_, "this checkpoint holds no BatchNorm running statistics (buffers.bin), which "
                                  "this layer-list model needs");
  if (!buffers_file_.verified) open_file(buffers_file_);
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> at;  // name -> (first value, count)
  std::int64_t first = 0;
  for (const exec::BufferTensor& b : buffer_tensors_) {
    at[b.name] = {first, b.numel};
    first += b.numel;
  }
  for (const exec::BufferTensor& b : layout.buffers()) {
    const auto it = at.find(b.name);
    if (it == at.end() || it->second.second != b.numel)
      throw InputError(buffers_file_.path, flag_, "holds no buffer " + b.name + " of " + std::to_string(b.numel) +
                                                      " values (another model's checkpoint?)");
    std::vector<float> values(static_cast<std::size_t>(b.numel));
    const std::int64_t offset = it->second.first * static_cast<std::int64_t>(sizeof(float));
    const std::int64_t bytes = b.numel * static_cast<std::int64_t>(sizeof(float));
    IO_CHECK(::pread(buffers_file_.fd, values.data(), static_cast<std::size_t>(bytes), offset) == bytes, "pread",
             buffers_file_.path);
    trainer.set_buffer(b.name, values);
  }
}

}  // namespace zeroplan
