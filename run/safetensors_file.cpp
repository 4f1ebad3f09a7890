#include "run/safetensors_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "run/atomic_file.h"

namespace zeroplan {

// Tensors are stored little-endian (huggingface/safetensors README, "Format"); F32 data is read and written
// without a byte swap.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace fs = std::filesystem;

namespace {

// The reference implementation's limit on N (safetensors/src/tensor.rs, MAX_HEADER_SIZE = 100_000_000): a
// larger length is a damaged or hostile file, and reading it would allocate that much.
constexpr std::int64_t kMaxHeaderBytes = 100'000'000;
// Conversion buffer of read_as_float and write for dtypes other than F32: pieces of this many bytes.
constexpr std::int64_t kChunkBytes = std::int64_t{1} << 20;

// Messages are one line: names and parser messages can hold newlines or other control characters.
std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return s;
}

[[noreturn]] void bad(const std::string& file, const std::string& tensor, const std::string& problem) {
  throw InputError(one_line(file), one_line(tensor), one_line(problem));
}

// A system call's failure: the call, the path, what was being done and errno's text (as run/checkpoint.cpp's).
[[noreturn]] void fail_io(const std::string& what, const std::string& path, int err) {
  throw std::runtime_error(one_line(what + " " + path + ": " + std::strerror(err)));
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw std::overflow_error(std::string(what) + " overflows int64");
  return r;
}
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error(std::string(what) + " overflows int64");
  return r;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// pread of exactly `size` bytes at `offset`, retried after EINTR and short counts.
void pread_all(int fd, char* out, std::int64_t size, std::int64_t offset, const std::string& path,
               const std::string& tensor) {
  while (size > 0) {
    // Linux transfers at most 0x7ffff000 bytes per call (read(2)); ask for no more than 1 GiB at a time.
    const std::size_t want = static_cast<std::size_t>(std::min<std::int64_t>(size, std::int64_t{1} << 30));
    const ssize_t n = ::pread(fd, out, want, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_io("read of tensor " + tensor + " from", path, errno);
    if (n == 0)
      bad(path, tensor, "the file ends at byte " + std::to_string(offset) + " while reading this tensor " +
                            "(it is shorter than when it was opened)");
    out += n;
    offset += n;
    size -= n;
  }
}

void pwrite_all(int fd, const char* data, std::int64_t size, std::int64_t offset, const std::string& path) {
  while (size > 0) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::int64_t>(size, std::int64_t{1} << 30));
    const ssize_t n = ::pwrite(fd, data, want, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_io("write", path, n < 0 ? errno : ENOSPC);
    data += n;
    offset += n;
    size -= n;
  }
}

// A non-negative integer of a header (nlohmann parses those as unsigned) that fits in int64.
bool as_int64(const nlohmann::json& v, std::int64_t& out) {
  if (!v.is_number_unsigned()) return false;
  const std::uint64_t u = v.get<std::uint64_t>();
  if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
  out = static_cast<std::int64_t>(u);
  return true;
}

// Parses JSON text, reporting the first key repeated within one object (nlohmann keeps the last silently; the
// reference's serde map would too, but a repeated tensor name means the file is damaged).
nlohmann::json parse_json(const std::string& text, const std::string& file, const char* what) {
  std::vector<std::set<std::string>> keys;
  std::string repeated;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text, [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      using E = nlohmann::json::parse_event_t;
      if (event == E::object_start) keys.emplace_back();
      else if (event == E::object_end) keys.pop_back();
      else if (event == E::key && !keys.back().insert(parsed.get<std::string>()).second && repeated.empty())
        repeated = parsed.get<std::string>();
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    bad(file, "", std::string(what) + " is not valid JSON: " + e.what());
  }
  if (!repeated.empty()) bad(file, repeated, std::string(what) + " has the key '" + repeated + "' twice");
  return doc;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

// ---- conversions --------------------------------------------------------------------------------------------

std::uint16_t bf16_bits_from_float(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  // Round to nearest even: add half an ulp of bf16, less one when the kept part is even (ties go to even).
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

std::uint16_t f16_bits_from_float(float f) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));  // IEEE conversion: round to nearest even
}

float float_from_bf16_bits(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);  // bf16 is fp32's upper half
}

float float_from_f16_bits(std::uint16_t bits) {
  // By bits rather than through _Float16 so NaN payloads carry over unchanged on any target.
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t u;
  if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);  // infinity, NaN
  } else if (exponent != 0) {
    u = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    u = sign;  // signed zero
  } else {
    // Subnormal: value mantissa x 2^-24; normalise so the leading 1 becomes fp32's implicit bit.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    u = sign | (static_cast<std::uint32_t>(127 - 15 + 1 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(u);
}

int safetensors_dtype_size(const std::string& dtype) {
  // The dtypes of safetensors/src/tensor.rs (Dtype::size), F8_E8M0 included; the sub-byte F4 / F6 types of
  // later versions have no whole-byte size and are not read here.
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// ---- reader -------------------------------------------------------------------------------------------------

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : source_(path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) bad(path, "", "does not exist");
  try {
    if (fs::is_directory(status)) {
      const std::string single = (fs::path(path) / "model.safetensors").string();
      const std::string index = (fs::path(path) / "model.safetensors.index.json").string();
      if (fs::exists(single)) open_file(single, tensors_);
      else if (fs::exists(index)) open_index(index);
      else bad(path, "", "the folder holds neither model.safetensors nor model.safetensors.index.json");
    } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
      open_index(path);
    } else {
      open_file(path, tensors_);
    }
  } catch (...) {
    for (Shard& s : shards_)
      if (s.fd >= 0) ::close(s.fd);
    throw;
  }
}

SafetensorsCheckpoint::~SafetensorsCheckpoint() {
  for (Shard& s : shards_)
    if (s.fd >= 0) ::close(s.fd);
}

SafetensorsCheckpoint::SafetensorsCheckpoint(SafetensorsCheckpoint&& other) noexcept
    : source_(std::move(other.source_)),
      shards_(std::move(other.shards_)),
      shard_of_path_(std::move(other.shard_of_path_)),
      tensors_(std::move(other.tensors_)) {
  other.shards_.clear();
}

SafetensorsCheckpoint& SafetensorsCheckpoint::operator=(SafetensorsCheckpoint&& other) noexcept {
  if (this != &other) {
    for (Shard& s : shards_)
      if (s.fd >= 0) ::close(s.fd);
    source_ = std::move(other.source_);
    shards_ = std::move(other.shards_);
    shard_of_path_ = std::move(other.shard_of_path_);
    tensors_ = std::move(other.tensors_);
    other.shards_.clear();
  }
  return *this;
}

void SafetensorsCheckpoint::open_file(const std::string& path, std::map<std::string, TensorInfo>& tensors) {
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) bad(path, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) fail_io("fstat", path, errno);
  if (!S_ISREG(st.st_mode)) bad(path, "", "is not a regular file");
  const std::int64_t size = static_cast<std::int64_t>(st.st_size);

  // 8 bytes: N, the header's length (little-endian u64).
  if (size < 8)
    bad(path, "", "the file has " + std::to_string(size) + " bytes, fewer than the 8 of the header length");
  unsigned char length_bytes[8];
  pread_all(file.fd, reinterpret_cast<char*>(length_bytes), 8, 0, path, "");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length_bytes[i];
  if (n > static_cast<std::uint64_t>(kMaxHeaderBytes))
    bad(path, "", "header length " + std::to_string(n) + " exceeds the 100000000 bytes the format's reference " +
                      "reader allows (not a safetensors file, or a damaged one)");
  const std::int64_t header_bytes = static_cast<std::int64_t>(n);
  if (8 + header_bytes > size)
    bad(path, "", "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
                      " bytes)");
  std::string text(static_cast<std::size_t>(header_bytes), '\0');
  pread_all(file.fd, text.data(), header_bytes, 8, path, "");
  if (text.empty() || text[0] != '{')
    bad(path, "", "the header does not begin with '{' (the format requires a JSON object there)");
  const nlohmann::json header = parse_json(text, path, "the header");
  if (!header.is_object()) bad(path, "", "the header is not a JSON object");

  const std::int64_t data_start = 8 + header_bytes;
  const std::int64_t data_size = size - data_start;
  Shard shard;
  shard.path = path;
  shard.size = size;
  std::vector<TensorInfo> found;
  std::vector<std::pair<std::int64_t, std::int64_t>> offsets;  // data_offsets, parallel to `found`
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      // A string-to-string map (README: "free form text map"; tensor.rs: HashMap<String, String>).
      if (!entry.is_object()) bad(path, name, "expected an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) bad(path, "__metadata__." + key, "expected a string, got " + value.dump());
        shard.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) bad(path, name, "expected an object {dtype, shape, data_offsets}, got " + entry.dump());
    // Keys besides these three are ignored, as the reference reader ignores them (serde without
    // deny_unknown_fields on TensorInfo).
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key)) bad(path, name, std::string("has no \"") + key + "\"");
    const nlohmann::json& dtype = entry.at("dtype");
    if (!dtype.is_string()) bad(path, name, "dtype is not a string: " + dtype.dump());
    TensorInfo t;
    t.name = name;
    t.dtype = dtype.get<std::string>();
    t.file = path;
    const int element = safetensors_dtype_size(t.dtype);
    if (element == 0)
      bad(path, name, "unknown dtype \"" + t.dtype + "\" (the format defines BOOL, U8, I8, F8_E5M2, F8_E4M3, " +
                          "F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64)");
    const nlohmann::json& shape = entry.at("shape");
    if (!shape.is_array()) bad(path, name, "shape is not an array: " + shape.dump());
    t.elements = 1;
    for (const nlohmann::json& d : shape) {
      std::int64_t dim;
      if (!as_int64(d, dim)) bad(path, name, "shape " + shape.dump() + " holds something other than a size >= 0");
      t.shape.push_back(dim);
      if (__builtin_mul_overflow(t.elements, dim, &t.elements))
        bad(path, name, "shape " + shape.dump() + " has more elements than int64 holds");
    }
    std::int64_t need;
    if (__builtin_mul_overflow(t.elements, static_cast<std::int64_t>(element), &need))
      bad(path, name, "shape " + shape.dump() + " of " + t.dtype + " has more bytes than int64 holds");
    const nlohmann::json& range = entry.at("data_offsets");
    std::int64_t begin, end;
    if (!range.is_array() || range.size() != 2 || !as_int64(range[0], begin) || !as_int64(range[1], end))
      bad(path, name, "data_offsets " + range.dump() + " is not [begin, end] of two byte offsets >= 0");
    if (end < begin) bad(path, name, "data_offsets " + range.dump() + " ends before it begins");
    if (end - begin != need)
      bad(path, name, "data_offsets " + range.dump() + " span " + std::to_string(end - begin) + " bytes, but shape " +
                          shape_text(t.shape) + " of " + t.dtype + " is " + std::to_string(need) + " bytes");
    t.bytes = need;
    found.push_back(std::move(t));
    offsets.emplace_back(begin, end);
  }

  // The tensors sorted by offset must tile the byte buffer: Metadata::validate requires each to begin where the
  // previous one ended, and read_metadata that the last one end at the end of the file. Truncation is checked
  // first so that a short file is reported as such rather than as some other inconsistency.
  std::vector<std::size_t> order(found.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return offsets[a] < offsets[b]; });
  for (std::size_t i : order) {
    const TensorInfo& t = found[i];
    std::int64_t file_end;
    const bool overflow = __builtin_add_overflow(data_start, offsets[i].second, &file_end);
    if (overflow || file_end > size)
      bad(path, t.name, "truncated: the file has " + std::to_string(size) + " bytes, tensor " + t.name + " ends at " +
                            (overflow ? std::string("a byte past int64") : std::to_string(file_end)) + " (data_offsets [" +
                            std::to_string(offsets[i].first) + ", " + std::to_string(offsets[i].second) +
                            "] after the " + std::to_string(data_start) + " bytes of header)");
  }
  std::int64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (std::size_t i : order) {
    const TensorInfo& t = found[i];
    const auto [begin, end] = offsets[i];
    if (begin < expected)
      bad(path, t.name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] overlap tensor " +
                            previous->name + ", which ends at " + std::to_string(expected));
    if (begin > expected)
      bad(path, t.name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] leave bytes [" +
                            std::to_string(expected) + ", " + std::to_string(begin) +
                            ") of the data unused (the format allows no holes)");
    expected = end;
    previous = &t;
  }
  if (expected != data_size)
    bad(path, previous ? previous->name : "",
        "the data is " + std::to_string(data_size) + " bytes but the tensors end at " + std::to_string(expected) +
            " (the format requires the last tensor to end at the end of the file)");

  for (TensorInfo& t : found) {
    t.offset = data_start + offsets[&t - found.data()].first;
    if (!tensors.emplace(t.name, t).second) bad(path, t.name, "this tensor is also in another shard");
  }
  shard.fd = file.fd;
  file.fd = -1;
  shard_of_path_[path] = shards_.size();
  shards_.push_back(std::move(shard));
}

void SafetensorsCheckpoint::open_index(const std::string& index_path) {
  // Read whole: an index is a few hundred bytes per tensor. The same cap as a header guards against a wrong path.
  Fd file{::open(index_path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) bad(index_path, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) fail_io("fstat", index_path, errno);
  if (st.st_size > kMaxHeaderBytes)
    bad(index_path, "", "is " + std::to_string(st.st_size) + " bytes; an index is JSON of at most 100000000 bytes");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  pread_all(file.fd, text.data(), static_cast<std::int64_t>(text.size()), 0, index_path, "");
  const nlohmann::json doc = parse_json(text, index_path, "the index");
  if (!doc.is_object()) bad(index_path, "", "expected a JSON object with \"weight_map\"");
  if (!doc.contains("weight_map")) bad(index_path, "weight_map", "missing");
  const nlohmann::json& map = doc.at("weight_map");
  if (!map.is_object() || map.empty())
    bad(index_path, "weight_map", "expected a non-empty object {tensor name: shard file name}");

  // Shard -> the tensors the index puts in it, shards in the order of their names.
  std::map<std::string, std::vector<std::string>> listed;
  for (const auto& [name, shard] : map.items()) {
    if (!shard.is_string()) bad(index_path, "weight_map." + name, "expected a shard file name, got " + shard.dump());
    const std::string file = shard.get<std::string>();
    const fs::path relative(file);
    // transformers joins the names to the index's folder; a name leaving that folder is not a shard of it.
    if (file.empty() || relative.is_absolute() ||
        std::any_of(relative.begin(), relative.end(), [](const fs::path& p) { return p == ".."; }))
      bad(index_path, "weight_map." + name, "shard \"" + file + "\" is not a file name in the index's folder");
    listed[file].push_back(name);
  }
  const fs::path folder = fs::path(index_path).parent_path();
  std::map<std::string, TensorInfo> all;
  for (const auto& [file, names] : listed) {
    const std::string path = (folder / file).string();
    std::error_code ec;
    if (!fs::exists(path, ec))
      bad(index_path, names.front(), "shard " + file + " is missing (" + path + " does not exist); the weight_map " +
                                         "puts tensor " + names.front() + " and " + std::to_string(names.size() - 1) +
                                         " other(s) in it");
    std::map<std::string, TensorInfo> in_shard;
    open_file(path, in_shard);
    for (const std::string& name : names)
      if (!in_shard.count(name))
        bad(index_path, name, "the weight_map puts tensor " + name + " in shard " + file + ", but " + path +
                                  " holds no tensor of that name");
    for (auto& [name, info] : in_shard) {
      const auto where = map.find(name);
      if (where != map.end() && where->get<std::string>() != file)
        bad(index_path, name, "tensor " + name + " is in shard " + file + " too, but the weight_map puts it in " +
                                  where->get<std::string>());
      if (!all.emplace(name, info).second)
        bad(index_path, name, "tensor " + name + " is in two shards (" + all.at(name).file + " and " + path + ")");
    }
  }
  tensors_ = std::move(all);
}

const TensorInfo* SafetensorsCheckpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

std::vector<std::string> SafetensorsCheckpoint::files() const {
  std::vector<std::string> out;
  for (const Shard& s : shards_) out.push_back(s.path);
  return out;
}

const std::map<std::string, std::string>& SafetensorsCheckpoint::metadata(const std::string& file) const {
  const auto it = shard_of_path_.find(file);
  if (it == shard_of_path_.end())
    throw std::invalid_argument("SafetensorsCheckpoint::metadata: " + file + " is not a file of " + source_);
  return shards_[it->second].metadata;
}

void SafetensorsCheckpoint::read_as_float(const TensorInfo& tensor, std::int64_t first_element, std::int64_t count,
                                          float* out) const {
  const auto it = shard_of_path_.find(tensor.file);
  if (it == shard_of_path_.end())
    throw std::invalid_argument("read_as_float: tensor " + tensor.name + " names file " + tensor.file +
                                ", which is not a file of " + source_);
  const Shard& shard = shards_[it->second];
  const std::string& d = tensor.dtype;
  if (d != "F32" && d != "BF16" && d != "F16" && d != "F64")
    bad(tensor.file, tensor.name, "cannot read dtype " + d + " of tensor " + tensor.name + " in " + tensor.file +
                                      "; expected F32, BF16, F16 or F64");
  if (first_element < 0 || count < 0 || first_element > tensor.elements || count > tensor.elements - first_element)
    throw std::out_of_range("read_as_float: elements [" + std::to_string(first_element) + ", +" +
                            std::to_string(count) + ") are outside tensor " + tensor.name + " of " +
                            std::to_string(tensor.elements) + " elements in " + tensor.file);
  const std::int64_t element = safetensors_dtype_size(d);
  const std::int64_t at = checked_add(tensor.offset, checked_mul(first_element, element, "read offset"), "read offset");
  const std::int64_t bytes = checked_mul(count, element, "read size");
  if (checked_add(at, bytes, "read end") > shard.size)
    throw std::invalid_argument("read_as_float: tensor " + tensor.name + " does not lie inside " + tensor.file);
  if (d == "F32") {
    pread_all(shard.fd, reinterpret_cast<char*>(out), bytes, at, tensor.file, tensor.name);
    return;
  }
  std::vector<char> buffer(static_cast<std::size_t>(std::min(bytes, kChunkBytes)));
  const std::int64_t per_chunk = kChunkBytes / element;
  for (std::int64_t done = 0; done < count;) {
    const std::int64_t n = std::min(per_chunk, count - done);
    pread_all(shard.fd, buffer.data(), n * element, at + done * element, tensor.file, tensor.name);
    float* dst = out + done;
    if (d == "BF16" || d == "F16") {
      const bool bf16 = d == "BF16";
      for (std::int64_t k = 0; k < n; ++k) {
        std::uint16_t bits;
        std::memcpy(&bits, buffer.data() + 2 * k, 2);
        dst[k] = bf16 ? float_from_bf16_bits(bits) : float_from_f16_bits(bits);
      }
    } else {  // F64: rounded to nearest (the default floating-point environment)
      for (std::int64_t k = 0; k < n; ++k) {
        double v;
        std::memcpy(&v, buffer.data() + 8 * k, 8);
        dst[k] = static_cast<float>(v);
      }
    }
    done += n;
  }
}

// ---- writer -------------------------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_) remove_temporary();
}

void SafetensorsWriter::remove_temporary() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (started_) ::unlink(tmp_.c_str());
}

void SafetensorsWriter::set_metadata(std::map<std::string, std::string> metadata) {
  if (started_) throw std::invalid_argument("SafetensorsWriter " + path_ + ": set_metadata after the first write");
  metadata_ = std::move(metadata);
}

void SafetensorsWriter::add(const std::string& name, const std::string& dtype, std::vector<std::int64_t> shape) {
  const std::string where = "SafetensorsWriter " + path_ + ": tensor " + name + ": ";
  if (started_) throw std::invalid_argument(where + "added after the first write");
  if (name.empty() || name == "__metadata__") throw std::invalid_argument(where + "not a tensor name");
  if (index_.count(name)) throw std::invalid_argument(where + "added twice");
  if (dtype != "F32" && dtype != "BF16" && dtype != "F16")
    throw std::invalid_argument(where + "dtype " + dtype + "; expected F32, BF16 or F16");
  Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.element_size = safetensors_dtype_size(dtype);
  t.elements = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw std::invalid_argument(where + "shape " + shape_text(shape) + " has a negative dimension");
    t.elements = checked_mul(t.elements, d, "tensor elements");
  }
  t.shape = std::move(shape);
  t.bytes = checked_mul(t.elements, t.element_size, "tensor bytes");
  t.begin = data_bytes_;
  data_bytes_ = checked_add(data_bytes_, t.bytes, "file size");
  index_[name] = tensors_.size();
  tensors_.push_back(std::move(t));
}

void SafetensorsWriter::start() {
  nlohmann::json header = nlohmann::json::object();
  for (const Tensor& t : tensors_)
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.begin + t.bytes}}};
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  // Spaces until 8 + N is a multiple of 8, so the data starts 8-byte aligned (README: the header MAY be padded
  // with whitespace; tensor.rs, prepare, pads the same way).
  while (text.size() % 8 != 0) text.push_back(' ');
  const std::int64_t n = static_cast<std::int64_t>(text.size());
  if (n > kMaxHeaderBytes)
    throw std::invalid_argument("SafetensorsWriter " + path_ + ": the header would be " + std::to_string(n) +
                                " bytes, over the 100000000 readers accept");
  data_start_ = 8 + n;
  const std::int64_t total = checked_add(data_start_, data_bytes_, "file size");

  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_io("create", tmp_, errno);
  started_ = true;
  try {
    if (::ftruncate(fd_, static_cast<off_t>(total)) != 0) fail_io("ftruncate", tmp_, errno);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(n) >> (8 * i));
    pwrite_all(fd_, reinterpret_cast<const char*>(length), 8, 0, tmp_);
    pwrite_all(fd_, text.data(), n, 8, tmp_);
  } catch (...) {
    remove_temporary();
    started_ = false;
    throw;
  }
}

void SafetensorsWriter::write(const std::string& name, std::int64_t first_element, const float* values,
                              std::int64_t count) {
  if (finished_) throw std::invalid_argument("SafetensorsWriter " + path_ + ": write after finish");
  const auto it = index_.find(name);
  if (it == index_.end())
    throw std::invalid_argument("SafetensorsWriter " + path_ + ": write to tensor " + name + ", which was not added");
  Tensor& t = tensors_[it->second];
  const std::string where = "SafetensorsWriter " + path_ + ": tensor " + name + ": ";
  if (first_element < 0 || count < 0 || first_element > t.elements || count > t.elements - first_element)
    throw std::invalid_argument(where + "elements [" + std::to_string(first_element) + ", +" + std::to_string(count) +
                                ") are outside its " + std::to_string(t.elements));
  if (count == 0) return;
  const std::int64_t end = first_element + count;
  // The written ranges are disjoint and merged; the piece must fall in a gap between them.
  auto next = t.written.lower_bound(first_element);
  if (next != t.written.end() && next->first < end)
    throw std::invalid_argument(where + "elements [" + std::to_string(first_element) + ", " + std::to_string(end) +
                                ") overlap [" + std::to_string(next->first) + ", " + std::to_string(next->second) +
                                "), already written");
  if (next != t.written.begin() && std::prev(next)->second > first_element)
    throw std::invalid_argument(where + "elements [" + std::to_string(first_element) + ", " + std::to_string(end) +
                                ") overlap [" + std::to_string(std::prev(next)->first) + ", " +
                                std::to_string(std::prev(next)->second) + "), already written");
  if (!started_) start();

  const std::int64_t at = data_start_ + t.begin + first_element * t.element_size;
  if (t.dtype == "F32") {
    pwrite_all(fd_, reinterpret_cast<const char*>(values), count * 4, at, tmp_);
  } else {
    const bool bf16 = t.dtype == "BF16";
    std::vector<std::uint16_t> half(static_cast<std::size_t>(std::min(count, kChunkBytes / 2)));
    for (std::int64_t done = 0; done < count;) {
      const std::int64_t n = std::min<std::int64_t>(static_cast<std::int64_t>(half.size()), count - done);
      for (std::int64_t k = 0; k < n; ++k)
        half[k] = bf16 ? bf16_bits_from_float(values[done + k]) : f16_bits_from_float(values[done + k]);
      pwrite_all(fd_, reinterpret_cast<const char*>(half.data()), n * 2, at + done * 2, tmp_);
      done += n;
    }
  }

  // Record [first_element, end), merged with the neighbours it touches.
  std::int64_t lo = first_element, hi = end;
  if (next != t.written.end() && next->first == end) {
    hi = next->second;
    next = t.written.erase(next);
  }
  if (next != t.written.begin() && std::prev(next)->second == first_element) {
    lo = std::prev(next)->first;
    t.written.erase(std::prev(next));
  }
  t.written[lo] = hi;
  t.written_elements += count;
}

void SafetensorsWriter::finish() {
  if (finished_) throw std::invalid_argument("SafetensorsWriter " + path_ + ": finish called twice");
  for (const Tensor& t : tensors_)
    if (t.written_elements != t.elements)
      throw std::invalid_argument("SafetensorsWriter " + path_ + ": tensor " + t.name + " has " +
                                  std::to_string(t.written_elements) + " of its " + std::to_string(t.elements) +
                                  " elements written");
  if (!started_) start();
  if (::fsync(fd_) != 0) fail_io("fsync", tmp_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_io("close", tmp_, errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail_io("rename to " + path_ + " of", tmp_, errno);
  finished_ = true;
  // The rename is durable once the folder is (as run/atomic_file.h's callers do).
  const fs::path parent = fs::path(path_).parent_path();
  fsync_directory(parent.empty() ? std::string(".") : parent.string());
}

}  // namespace zeroplan
