// CIFAR-10 images for the executor: the binary version's files read into memory, DeepSpeed's CIFAR transforms
// (with torchvision's usual training augmentation as an option), each rank's share of a global batch, and a
// synthetic learnable set in the same file format for tests.
//
// Files (https://www.cs.toronto.edu/~kriz/cifar.html, "CIFAR-10 binary version"): a folder holding
// data_batch_1.bin .. data_batch_5.bin (the training split) and test_batch.bin (the test split). Each file is a
// sequence of 3,073-byte records: 1 label byte (0..9), then 3,072 pixel bytes: the 1,024 red values, then the
// 1,024 green, then the 1,024 blue, each a 32x32 image in row-major order (so a record's pixels are already CHW).
// The training split needs all five data_batch files (a folder missing one is an error naming it, so a partly
// downloaded set never trains silently on four fifths of the data); a file may hold any whole number of records
// (the real ones hold 10,000), which is what lets tests write small files. Images are numbered in file order,
// data_batch_1's first.
//
// Transforms, applied per image in torchvision's order:
//   RandomCrop(32, padding=P)  (torchvision.transforms.RandomCrop; fill=0, padding_mode='constant' by default):
//       pad every border by P pixels of value 0 (black, in pixel space), then take the 32x32 window whose top-left
//       corner is (top, left), each uniform in [0, 2P]. Output pixel (y, x) = padded(top + y, left + x), which is
//       0 where top + y or left + x falls in the padding.
//   RandomHorizontalFlip()  (p = 0.5): output column x takes column 31 - x.
//   ToTensor()  : float(v) / 255 in fp32 (torchvision: img.to(float32).div(255)), v the uint8 pixel.
//   Normalize(mean, std)  : (x - mean[c]) / std[c] in fp32 (torchvision: tensor.sub_(mean).div_(std)).
// A padded pixel is therefore (0 - mean[c]) / std[c]: -1.0 under DeepSpeed's mean = std = 0.5, not 0 (the
// padding is black before normalisation, as in torchvision, where Normalize runs after the crop).
// DeepSpeed's example (DeepSpeedExamples training/cifar/cifar10_deepspeed.py) uses
//   transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
// for both splits, no augmentation: ImageTransforms::deepspeed_cifar() (the defaults). torchvision's CIFAR
// training recipes put RandomCrop(32, padding=4) and RandomHorizontalFlip() in front: ImageTransforms::augmented().
//
// Batches and randomness: the stream position p counts images drawn since the start (it is not wrapped: epoch 2's
// positions continue after epoch 1's); image p of the stream is image p mod size() of the split, so batches take
// consecutive images and wrap at the end of the split (file order, no shuffling: CIFAR-10's files are already in
// random order). The augmentation of stream image p depends only on (seed, p):
//   r = splitmix64(seed ^ splitmix64(p))             (exec/init_rng.h; the rule TokenSource::synthetic uses)
//   top  = (r & 0xFFFF) % (2P + 1),  left = ((r >> 16) & 0xFFFF) % (2P + 1),  flip = (r >> 63) == 1
// (top and left only when random_crop is on, flip only when horizontal_flip is; the modulo's bias over 65,536 is
// below 0.01%),
// so the same seed and position give the same batch, every epoch sees fresh crops and flips, and a rank that
// draws stream images [p0 + r*n, p0 + (r+1)*n) gets exactly the images and augmentations that one rank drawing the
// whole global batch [p0, p0 + world*n) gets in those rows (next_rank_share below).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zeroplan::exec {

inline constexpr int kCifarClasses = 10;
inline constexpr int kCifarChannels = 3;
inline constexpr int kCifarSide = 32;
inline constexpr std::int64_t kCifarImageBytes = 3072;   // 3 x 32 x 32
inline constexpr std::int64_t kCifarRecordBytes = 3073;  // 1 label + 3,072 pixels
inline constexpr int kCifarTrainFiles = 5;               // data_batch_1.bin .. data_batch_5.bin

enum class CifarSplit { train, test };
// "train" or "test"; anything else is an std::invalid_argument.
CifarSplit cifar_split_from_name(const std::string& name);
// The split's file names in read order: data_batch_1.bin .. data_batch_5.bin, or test_batch.bin.
std::vector<std::string> cifar_split_files(CifarSplit split);

// How the batch's floats are laid out. nchw: element (n, c, y, x) at ((n*3 + c)*32 + y)*32 + x (PyTorch's
// default, channels-first). nhwc: at ((n*32 + y)*32 + x)*3 + c (channels-last, what the GPU path wants).
enum class ImageLayout { nchw, nhwc };

struct ImageTransforms {
  bool random_crop = false;     // RandomCrop(32, padding=crop_padding), fill 0
  int crop_padding = 4;
  bool horizontal_flip = false;  // RandomHorizontalFlip(p=0.5)
  float mean[3] = {0.5f, 0.5f, 0.5f};  // Normalize's mean and std, per channel R, G, B
  float std[3] = {0.5f, 0.5f, 0.5f};
  ImageLayout layout = ImageLayout::nchw;  // the output layout (not a torchvision transform)

  // DeepSpeed's example: ToTensor() then Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)); no augmentation.
  static ImageTransforms deepspeed_cifar() { return {}; }
  // The same preceded by RandomCrop(32, padding=4) and RandomHorizontalFlip() (torchvision's CIFAR training recipe).
  static ImageTransforms augmented() {
    ImageTransforms t;
    t.random_crop = true;
    t.horizontal_flip = true;
    return t;
  }
};

// ToTensor then Normalize for one pixel value, in fp32 as torchvision computes it.
inline float normalize_pixel(std::uint8_t value, float mean, float std) {
  const float x = static_cast<float>(value) / 255.0f;
  return (x - mean) / std;
}

// One image's augmentation parameters at stream position `position` (the rule above).
struct ImageAugmentation {
  int top = 0;   // the crop window's corner in the padded image, 0..2P (0 when random_crop is off: P = 0)
  int left = 0;
  bool flip = false;
};
// Output pixel (c, y, x) of image `pixels` (3,072 bytes, CHW) under one augmentation and padding P (0 when
// random_crop is off), before ToTensor: the source column is xs = flip ? 31 - x : x, and the value is
// pixels[c][top + y - P][left + xs - P], or 0 (the fill) where that falls outside the image.
std::uint8_t augmented_pixel(const std::uint8_t* pixels, const ImageAugmentation& augmentation, int padding, int c,
                             int y, int x);
ImageAugmentation image_augmentation(const ImageTransforms& transforms, std::uint64_t seed, std::int64_t position);

struct ImageBatch {
  std::int64_t batch = 0;
  ImageLayout layout = ImageLayout::nchw;
  std::vector<float> images;         // batch x 3 x 32 x 32 fp32, in `layout`
  std::vector<std::int32_t> labels;  // batch, 0..9
};

class CifarDataset {
 public:
  // Reads the split's files from `dir` (every file fully into memory). Throws std::invalid_argument with one line
  // naming the file and the problem: a missing file, an empty one, a size that is not a whole number of 3,073-byte
  // records (a truncated file), a label past 9 (naming the record).
  static CifarDataset open(const std::string& dir, CifarSplit split, const ImageTransforms& transforms = {},
                           std::uint64_t seed = 0);

  // The next `batch` images of the stream, transformed (their augmentations from the seed and their positions).
  ImageBatch next_batch(std::int64_t batch);
  // Images in the split.
  std::int64_t size() const { return static_cast<std::int64_t>(labels_.size()); }
  std::string description() const { return description_; }
  // Where the next batch starts in the stream (checkpoints resume the data and its augmentations exactly there).
  std::int64_t position() const { return position_; }
  void seek(std::int64_t position);

  const ImageTransforms& transforms() const { return transforms_; }
  std::uint64_t seed() const { return seed_; }
  // Image i of the split as read (0 <= i < size()): its label and its 3,072 pixel bytes, R then G then B planes.
  std::int32_t label(std::int64_t i) const { return labels_[static_cast<std::size_t>(i)]; }
  const std::uint8_t* pixels(std::int64_t i) const { return pixels_.data() + i * kCifarImageBytes; }

 private:
  ImageTransforms transforms_;
  std::uint64_t seed_ = 0;
  std::vector<std::uint8_t> labels_;
  std::vector<std::uint8_t> pixels_;  // size() x 3,072, each image's record bytes after the label
  std::int64_t position_ = 0;
  std::string description_;
};

// Rank `rank`'s share of the step's global batch of world x grad_accum x micro_batch images, as next_rank_share
// does for tokens (exec/data_shard.h): rank r takes the global batch's images [r*A*B, (r+1)*A*B), micro-step k of
// them [k*B, (k+1)*B). Only the rank's own images are transformed (it seeks to its rows); the source then stands
// after the whole global batch on every rank, so all ranks advance alike. Concatenating the world's shares gives
// the batch one rank draws with next_batch(world*A*B), augmentations included.
ImageBatch next_rank_share(CifarDataset& source, std::int64_t micro_batch, std::int64_t grad_accum, int world,
                           int rank);

// Writes a learnable CIFAR-format set into `dir` (created if missing): data_batch_1.bin .. data_batch_5.bin of
// `train_images_per_file` records each and test_batch.bin of `test_images`. Image i of a file gets label
// splitmix64(seed ^ splitmix64(file_salt + i)) % 10; class k's image is a colour of its own (a fixed RGB per
// class, far apart) with horizontal stripes k % 4 + 1 rows wide (+/-24 levels), plus
// uniform per-pixel noise of +/-`noise` levels from (seed, file, image, pixel), clamped to 0..255. Colour and
// stripes survive crops and horizontal flips, so a small network learns it; the test split draws other images
// (other salts) from the same distribution. Throws std::invalid_argument naming the file when it cannot write.
void write_synthetic_cifar(const std::string& dir, std::int64_t train_images_per_file, std::int64_t test_images,
                           std::uint64_t seed, int noise = 32);

}  // namespace zeroplan::exec
