#include "exec/image_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "exec/init_rng.h"

namespace zeroplan::exec {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument(path + ": " + what);
}

std::string split_name(CifarSplit split) { return split == CifarSplit::train ? "train" : "test"; }

std::string format_float(float v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string triple(const float (&v)[3]) {
  std::ostringstream s;
  s << '(' << v[0] << ", " << v[1] << ", " << v[2] << ')';
  return s.str();
}

std::string transforms_text(const ImageTransforms& t) {
  std::string out;
  if (t.random_crop) out += "RandomCrop(32, padding=" + std::to_string(t.crop_padding) + "), ";
  if (t.horizontal_flip) out += "RandomHorizontalFlip(), ";
  out += "ToTensor(), Normalize(" + triple(t.mean) + ", " + triple(t.std) + ")";
  out += t.layout == ImageLayout::nchw ? ", NCHW" : ", NHWC";
  return out;
}

void check_transforms(const ImageTransforms& t) {
  if (t.crop_padding < 0)
    throw std::invalid_argument("image transforms: crop_padding must be >= 0, got " + std::to_string(t.crop_padding));
  for (int c = 0; c < kCifarChannels; ++c)
    if (!(t.std[c] != 0.0f) || !std::isfinite(t.std[c]) || !std::isfinite(t.mean[c]))
      throw std::invalid_argument("image transforms: Normalize needs a finite mean and a finite, nonzero std; channel " +
                                  std::to_string(c) + " has mean " + format_float(t.mean[c]) + ", std " +
                                  format_float(t.std[c]));
}

// Reads one CIFAR-10 batch file, appending its labels and pixels.
void read_cifar_file(const std::string& path, std::vector<std::uint8_t>& labels, std::vector<std::uint8_t>& pixels) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path))
    fail(path, "cannot open the CIFAR-10 file (missing or unreadable); the binary version's folder holds "
               "data_batch_1.bin .. data_batch_5.bin and test_batch.bin");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto n = static_cast<std::int64_t>(bytes.size());
  if (n == 0) fail(path, "empty file (0 bytes); a CIFAR-10 batch file holds 3,073-byte records (1 label + 3,072 pixels)");
  if (n % kCifarRecordBytes != 0)
    throw std::invalid_argument("record size: " + path + " has " + std::to_string(n) +
                                " bytes, not a whole number of 3,073-byte records (1 label + 3,072 pixels): record " +
                                std::to_string(n / kCifarRecordBytes) + " (the last) holds only " +
                                std::to_string(n % kCifarRecordBytes) + " bytes (truncated?)");
  const std::int64_t records = n / kCifarRecordBytes;
  const std::size_t first_label = labels.size(), first_pixel = pixels.size();
  labels.resize(first_label + static_cast<std::size_t>(records));
  pixels.resize(first_pixel + static_cast<std::size_t>(records * kCifarImageBytes));
  for (std::int64_t r = 0; r < records; ++r) {
    const char* record = bytes.data() + r * kCifarRecordBytes;
    const auto label = static_cast<std::uint8_t>(record[0]);
    if (label >= kCifarClasses)
      fail(path, "record " + std::to_string(r) + " has label " + std::to_string(label) +
                     "; CIFAR-10 labels are 0..9");
    labels[first_label + static_cast<std::size_t>(r)] = label;
    std::copy(record + 1, record + kCifarRecordBytes,
              reinterpret_cast<char*>(pixels.data() + first_pixel + r * kCifarImageBytes));
  }
}

}  // namespace

CifarSplit cifar_split_from_name(const std::string& name) {
  if (name == "train") return CifarSplit::train;
  if (name == "test") return CifarSplit::test;
  throw std::invalid_argument("CIFAR-10 split: expected train or test, got '" + name + "'");
}

std::vector<std::string> cifar_split_files(CifarSplit split) {
  if (split == CifarSplit::test) return {"test_batch.bin"};
  std::vector<std::string> files;
  for (int i = 1; i <= kCifarTrainFiles; ++i) files.push_back("data_batch_" + std::to_string(i) + ".bin");
  return files;
}

ImageAugmentation image_augmentation(const ImageTransforms& transforms, std::uint64_t seed, std::int64_t position) {
  ImageAugmentation a;
  if (!transforms.random_crop && !transforms.horizontal_flip) return a;
  const std::uint64_t r = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(position)));
  if (transforms.random_crop) {
    const std::uint64_t choices = 2 * static_cast<std::uint64_t>(transforms.crop_padding) + 1;
    a.top = static_cast<int>((r & 0xFFFF) % choices);
    a.left = static_cast<int>(((r >> 16) & 0xFFFF) % choices);
  }
  if (transforms.horizontal_flip) a.flip = (r >> 63) == 1;
  return a;
}

std::uint8_t augmented_pixel(const std::uint8_t* pixels, const ImageAugmentation& a, int padding, int c, int y,
                             int x) {
  const int xs = a.flip ? kCifarSide - 1 - x : x;
  const int sy = a.top + y - padding, sx = a.left + xs - padding;
  if (sy < 0 || sy >= kCifarSide || sx < 0 || sx >= kCifarSide) return 0;
  return pixels[(c * kCifarSide + sy) * kCifarSide + sx];
}

CifarDataset CifarDataset::open(const std::string& dir, CifarSplit split, const ImageTransforms& transforms,
                                std::uint64_t seed) {
  check_transforms(transforms);
  CifarDataset d;
  d.transforms_ = transforms;
  d.seed_ = seed;
  const auto files = cifar_split_files(split);
  for (const auto& name : files)
    read_cifar_file((std::filesystem::path(dir) / name).string(), d.labels_, d.pixels_);
  d.description_ = "CIFAR-10 " + split_name(split) + " split from " + dir + " (" +
                   (split == CifarSplit::train ? "data_batch_1..5.bin" : "test_batch.bin") + ", " +
                   std::to_string(d.size()) + " images; " + transforms_text(transforms) + "; seed " +
                   std::to_string(seed) + ")";
  return d;
}

void CifarDataset::seek(std::int64_t position) {
  if (position < 0)
    throw std::invalid_argument(description_ + ": data position " + std::to_string(position) +
                                " is negative (positions count images drawn since the start, unwrapped)");
  position_ = position;
}

ImageBatch CifarDataset::next_batch(std::int64_t batch) {
  if (batch < 0) throw std::invalid_argument(description_ + ": batch of " + std::to_string(batch) + " images");
  ImageBatch out;
  out.batch = batch;
  out.layout = transforms_.layout;
  out.images.resize(static_cast<std::size_t>(batch * kCifarImageBytes));
  out.labels.resize(static_cast<std::size_t>(batch));
  // ToTensor then Normalize of every byte value, per channel (the same fp32 arithmetic as normalize_pixel).
  float table[kCifarChannels][256];
  for (int c = 0; c < kCifarChannels; ++c)
    for (int v = 0; v < 256; ++v)
      table[c][v] = normalize_pixel(static_cast<std::uint8_t>(v), transforms_.mean[c], transforms_.std[c]);
  const int padding = transforms_.random_crop ? transforms_.crop_padding : 0;
  const bool nchw = transforms_.layout == ImageLayout::nchw;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t stream = position_ + b;
    const std::int64_t image = stream % size();
    out.labels[static_cast<std::size_t>(b)] = labels_[static_cast<std::size_t>(image)];
    const ImageAugmentation a = image_augmentation(transforms_, seed_, stream);
    const std::uint8_t* src = pixels(image);
    float* dst = out.images.data() + b * kCifarImageBytes;
    for (int c = 0; c < kCifarChannels; ++c)
      for (int y = 0; y < kCifarSide; ++y)
        for (int x = 0; x < kCifarSide; ++x) {
          const float v = table[c][augmented_pixel(src, a, padding, c, y, x)];
          if (nchw)
            dst[(c * kCifarSide + y) * kCifarSide + x] = v;
          else
            dst[(y * kCifarSide + x) * kCifarChannels + c] = v;
        }
  }
  position_ += batch;
  return out;
}

ImageBatch next_rank_share(CifarDataset& source, std::int64_t micro_batch, std::int64_t grad_accum, int world,
                           int rank) {
  if (world < 1 || rank < 0 || rank >= world) throw std::invalid_argument("next_rank_share: bad rank/world");
  const std::int64_t rows = micro_batch * grad_accum;
  const std::int64_t start = source.position();
  source.seek(start + rank * rows);
  ImageBatch mine = source.next_batch(rows);
  source.seek(start + world * rows);
  return mine;
}

void write_synthetic_cifar(const std::string& dir, std::int64_t train_images_per_file, std::int64_t test_images,
                           std::uint64_t seed, int noise) {
  if (train_images_per_file < 1 || test_images < 1 || noise < 0 || noise > 255)
    throw std::invalid_argument("write_synthetic_cifar: needs at least one image per file and noise in 0..255 (got " +
                                std::to_string(train_images_per_file) + " per training file, " +
                                std::to_string(test_images) + " test images, noise " + std::to_string(noise) + ")");
  // One colour per class (R, G, B), pairwise far apart.
  static constexpr int kColours[kCifarClasses][3] = {
      {200, 40, 40}, {40, 200, 40}, {40, 40, 200}, {200, 200, 40}, {200, 40, 200},
      {40, 200, 200}, {128, 128, 128}, {230, 230, 230}, {30, 30, 30}, {230, 120, 30}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  auto files = cifar_split_files(CifarSplit::train);
  files.push_back(cifar_split_files(CifarSplit::test).front());
  std::vector<char> record(static_cast<std::size_t>(kCifarRecordBytes));
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string path = (std::filesystem::path(dir) / files[f]).string();
    const std::int64_t count = f < static_cast<std::size_t>(kCifarTrainFiles) ? train_images_per_file : test_images;
    const std::uint64_t salt = static_cast<std::uint64_t>(f + 1) << 40;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot write the synthetic CIFAR-10 file");
    for (std::int64_t i = 0; i < count; ++i) {
      const std::uint64_t id = salt + static_cast<std::uint64_t>(i);
      const int k = static_cast<int>(splitmix64(seed ^ splitmix64(id)) % kCifarClasses);
      record[0] = static_cast<char>(k);
      const int stripe_rows = k % 4 + 1;
      for (int c = 0; c < kCifarChannels; ++c)
        for (int y = 0; y < kCifarSide; ++y)
          for (int x = 0; x < kCifarSide; ++x) {
            const int j = (c * kCifarSide + y) * kCifarSide + x;
            const std::uint64_t h =
                splitmix64((seed + 0x5851F42D4C957F2Dull) ^ splitmix64(id * kCifarImageBytes + j));
            const int jitter = static_cast<int>(h % static_cast<std::uint64_t>(2 * noise + 1)) - noise;
            const int stripe = (y / stripe_rows) % 2 == 0 ? 24 : -24;
            const int v = std::clamp(kColours[k][c] + stripe + jitter, 0, 255);
            record[static_cast<std::size_t>(1 + j)] = static_cast<char>(static_cast<std::uint8_t>(v));
          }
      out.write(record.data(), static_cast<std::streamsize>(record.size()));
    }
    out.close();
    if (!out) fail(path, "write failed for the synthetic CIFAR-10 file");
  }
}

}  // namespace zeroplan::exec
