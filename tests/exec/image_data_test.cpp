// CIFAR-10 reader tests (exec/image_data.h): records read back exactly, DeepSpeed's normalisation, torchvision's
// crop-with-padding and flip, determinism and rank shares, every malformed file refused with its name, and the
// synthetic learnable set's files. All files are written by the tests (no network).
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "exec/image_data.h"

using namespace zeroplan::exec;

namespace {

struct Record {
  std::uint8_t label = 0;
  std::array<std::uint8_t, kCifarImageBytes> pixels{};
};

// A record whose pixels depend on (tag, byte index), so any misplaced byte shows.
Record make_record(int tag, std::uint8_t label) {
  Record r;
  r.label = label;
  for (int j = 0; j < kCifarImageBytes; ++j) r.pixels[j] = static_cast<std::uint8_t>((tag * 131 + j * 7 + j / 1024) % 256);
  return r;
}

void write_records(const std::string& path, const std::vector<Record>& records) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (const auto& r : records) {
    f.put(static_cast<char>(r.label));
    f.write(reinterpret_cast<const char*>(r.pixels.data()), kCifarImageBytes);
  }
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh folder under the test's temporary directory.
std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("zeroplan_cifar_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string file_in(const std::string& dir, const std::string& name) { return (std::filesystem::path(dir) / name).string(); }

// The training split as 5 files of `per_file` records (record tags 0, 1, ... in stream order) and a test file.
std::vector<Record> write_small_split(const std::string& dir, int per_file) {
  std::vector<Record> all;
  int tag = 0;
  for (int f = 1; f <= kCifarTrainFiles; ++f) {
    std::vector<Record> records;
    for (int i = 0; i < per_file; ++i, ++tag) records.push_back(make_record(tag, static_cast<std::uint8_t>(tag % 10)));
    write_records(file_in(dir, "data_batch_" + std::to_string(f) + ".bin"), records);
    all.insert(all.end(), records.begin(), records.end());
  }
  write_records(file_in(dir, "test_batch.bin"), {make_record(1000, 9), make_record(1001, 0)});
  return all;
}

// Element (c, y, x) of image b of a batch.
float at(const ImageBatch& batch, std::int64_t b, int c, int y, int x) {
  const std::int64_t i = batch.layout == ImageLayout::nchw
                             ? ((b * kCifarChannels + c) * kCifarSide + y) * kCifarSide + x
                             : ((b * kCifarSide + y) * kCifarSide + x) * kCifarChannels + c;
  return batch.images[static_cast<std::size_t>(i)];
}

std::uint8_t px(const Record& r, int c, int y, int x) { return r.pixels[(c * kCifarSide + y) * kCifarSide + x]; }

// The message of the std::invalid_argument that `f` throws ("" and a failure when it throws none).
template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no std::invalid_argument thrown";
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(CifarData, RecordsReadBackExactlyInFileOrder) {
  const std::string dir = fresh_dir("readback");
  const auto records = write_small_split(dir, 3);
  const auto train = CifarDataset::open(dir, CifarSplit::train);
  ASSERT_EQ(train.size(), 15);
  for (std::int64_t i = 0; i < train.size(); ++i) {
    EXPECT_EQ(train.label(i), records[i].label) << i;
    EXPECT_TRUE(std::equal(records[i].pixels.begin(), records[i].pixels.end(), train.pixels(i))) << i;
  }
  const auto test = CifarDataset::open(dir, cifar_split_from_name("test"));
  ASSERT_EQ(test.size(), 2);
  EXPECT_EQ(test.label(0), 9);
  EXPECT_EQ(test.label(1), 0);
  const Record second = make_record(1001, 0);
  EXPECT_TRUE(std::equal(second.pixels.begin(), second.pixels.end(), test.pixels(1)));
  EXPECT_TRUE(contains(train.description(), "15 images")) << train.description();
  EXPECT_THROW(cifar_split_from_name("validation"), std::invalid_argument);
}

TEST(CifarData, BatchesAreNormalisedConsecutiveAndWrap) {
  const std::string dir = fresh_dir("batches");
  const auto records = write_small_split(dir, 2);  // 10 training images
  auto train = CifarDataset::open(dir, CifarSplit::train);
  train.seek(8);
  const ImageBatch b = train.next_batch(4);  // stream images 8, 9, 10, 11: split images 8, 9, 0, 1
  EXPECT_EQ(train.position(), 12);
  ASSERT_EQ(b.images.size(), 4u * kCifarImageBytes);
  EXPECT_EQ(b.labels, (std::vector<std::int32_t>{8, 9, 0, 1}));
  const int split_image[4] = {8, 9, 0, 1};
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; y += 7)
        for (int x = 0; x < 32; x += 5)
          EXPECT_EQ(at(b, i, c, y, x), (px(records[split_image[i]], c, y, x) / 255.0f - 0.5f) / 0.5f);
}

// ToTensor (v / 255) then Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)): DeepSpeed's cifar10_deepspeed.py.
TEST(CifarData, NormalisationOfKnownPixels) {
  EXPECT_EQ(normalize_pixel(0, 0.5f, 0.5f), -1.0f);
  EXPECT_EQ(normalize_pixel(255, 0.5f, 0.5f), 1.0f);
  EXPECT_NEAR(normalize_pixel(128, 0.5f, 0.5f), 1.0f / 255.0f, 1e-7f);  // (128/255 - 0.5) / 0.5 = 1/255
  EXPECT_NEAR(normalize_pixel(51, 0.5f, 0.5f), -0.6f, 1e-6f);           // 51/255 = 0.2
  // Other statistics, per channel: (v/255 - mean) / std.
  EXPECT_NEAR(normalize_pixel(255, 0.4914f, 0.2470f), (1.0f - 0.4914f) / 0.2470f, 1e-6f);

  // Through a file: one image whose red plane is 0, green 255, blue 128.
  const std::string dir = fresh_dir("normalise");
  Record r;
  r.label = 3;
  for (int j = 0; j < 1024; ++j) r.pixels[j] = 0, r.pixels[1024 + j] = 255, r.pixels[2048 + j] = 128;
  write_records(file_in(dir, "test_batch.bin"), {r});
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    ImageTransforms t = ImageTransforms::deepspeed_cifar();
    t.layout = layout;
    auto test = CifarDataset::open(dir, CifarSplit::test, t);
    const ImageBatch b = test.next_batch(1);
    EXPECT_EQ(b.layout, layout);
    EXPECT_EQ(b.labels, (std::vector<std::int32_t>{3}));
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) {
        EXPECT_EQ(at(b, 0, 0, y, x), -1.0f);
        EXPECT_EQ(at(b, 0, 1, y, x), 1.0f);
        EXPECT_NEAR(at(b, 0, 2, y, x), 1.0f / 255.0f, 1e-7f);
      }
    // The raw layouts: NCHW's first 1,024 floats are the red plane; NHWC's first 3 are pixel (0, 0)'s R, G, B.
    if (layout == ImageLayout::nchw) {
      EXPECT_EQ(b.images[1023], -1.0f);
      EXPECT_EQ(b.images[1024], 1.0f);
    } else {
      EXPECT_EQ(b.images[0], -1.0f);
      EXPECT_EQ(b.images[1], 1.0f);
      EXPECT_NEAR(b.images[2], 1.0f / 255.0f, 1e-7f);
    }
  }
}

// RandomCrop(32, padding=4) pads with 0 (torchvision's default fill) before ToTensor and Normalize, so a padded
// pixel comes out as (0 - 0.5) / 0.5 = -1; RandomHorizontalFlip mirrors the columns.
TEST(CifarData, CropWithPaddingAndFlip) {
  Record r = make_record(5, 1);
  for (auto& v : r.pixels) v = std::max<std::uint8_t>(v, 1);  // no 0 inside the image: only padding is 0
  const ImageAugmentation corner{0, 0, false};                 // window at the padded image's top-left corner
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) {
        const std::uint8_t v = augmented_pixel(r.pixels.data(), corner, 4, c, y, x);
        if (y < 4 || x < 4)
          EXPECT_EQ(v, 0);
        else
          EXPECT_EQ(v, px(r, c, y - 4, x - 4));
      }
  const ImageAugmentation far{8, 3, true};  // window 4 rows down, 1 column left of centre, then mirrored
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x) {
      const int sy = y + 4, sx = (31 - x) - 1;  // top + y - 4, left + (31 - x) - 4
      const std::uint8_t expect = (sy < 32 && sx >= 0) ? px(r, 1, sy, sx) : 0;
      EXPECT_EQ(augmented_pixel(r.pixels.data(), far, 4, 1, y, x), expect);
    }
  const ImageAugmentation flip_only{0, 0, true};
  EXPECT_EQ(augmented_pixel(r.pixels.data(), flip_only, 0, 2, 7, 0), px(r, 2, 7, 31));
  EXPECT_EQ(augmented_pixel(r.pixels.data(), flip_only, 0, 2, 7, 31), px(r, 2, 7, 0));

  // Through the batch: every image's output equals its augmentation (from the seed and the position) applied to
  // its pixels, padded pixels are -1 exactly, and over many positions the crops cover 0..8 and both flips occur.
  const std::string dir = fresh_dir("crop");
  write_records(file_in(dir, "test_batch.bin"), {r});
  const ImageTransforms t = ImageTransforms::augmented();
  EXPECT_TRUE(t.random_crop && t.horizontal_flip && t.crop_padding == 4);
  auto test = CifarDataset::open(dir, CifarSplit::test, t, 42);
  const ImageBatch b = test.next_batch(64);
  std::vector<int> tops(9), lefts(9), flips(2);
  int padded = 0;
  for (int i = 0; i < 64; ++i) {
    const ImageAugmentation a = image_augmentation(t, 42, i);
    ASSERT_TRUE(a.top >= 0 && a.top <= 8 && a.left >= 0 && a.left <= 8);
    ++tops[a.top], ++lefts[a.left], ++flips[a.flip];
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) {
          const std::uint8_t v = augmented_pixel(r.pixels.data(), a, 4, c, y, x);
          ASSERT_EQ(at(b, i, c, y, x), normalize_pixel(v, 0.5f, 0.5f));
          if (v == 0) {
            ASSERT_EQ(at(b, i, c, y, x), -1.0f);
            ++padded;
          }
        }
  }
  EXPECT_GT(padded, 0);
  EXPECT_GT(flips[0], 0);
  EXPECT_GT(flips[1], 0);
  EXPECT_GT(std::count_if(tops.begin(), tops.end(), [](int n) { return n > 0; }), 5);
  EXPECT_GT(std::count_if(lefts.begin(), lefts.end(), [](int n) { return n > 0; }), 5);
  // DeepSpeed's transforms (no augmentation) leave every image as read.
  const ImageAugmentation none = image_augmentation(ImageTransforms::deepspeed_cifar(), 42, 17);
  EXPECT_TRUE(none.top == 0 && none.left == 0 && !none.flip);
}

TEST(CifarData, SameSeedAndPositionGiveTheSameBatch) {
  const std::string dir = fresh_dir("determinism");
  write_small_split(dir, 4);  // 20 images
  auto a = CifarDataset::open(dir, CifarSplit::train, ImageTransforms::augmented(), 7);
  auto b = CifarDataset::open(dir, CifarSplit::train, ImageTransforms::augmented(), 7);
  const ImageBatch a1 = a.next_batch(6), a2 = a.next_batch(6);
  b.seek(6);
  const ImageBatch b2 = b.next_batch(6);
  EXPECT_EQ(a2.images, b2.images);
  EXPECT_EQ(a2.labels, b2.labels);
  b.seek(0);
  EXPECT_EQ(b.next_batch(6).images, a1.images);
  // A later epoch sees the same images with fresh augmentations (positions are not wrapped).
  b.seek(20);
  const ImageBatch epoch2 = b.next_batch(6);
  EXPECT_EQ(epoch2.labels, a1.labels);
  EXPECT_NE(epoch2.images, a1.images);
  // Another seed, other augmentations.
  auto c = CifarDataset::open(dir, CifarSplit::train, ImageTransforms::augmented(), 8);
  EXPECT_NE(c.next_batch(6).images, a1.images);
  EXPECT_THROW(b.seek(-1), std::invalid_argument);
}

TEST(CifarData, RankSharesConcatenateToTheOneRankGlobalBatch) {
  const std::string dir = fresh_dir("shards");
  write_small_split(dir, 3);  // 15 images: global batches wrap mid-batch
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    ImageTransforms t = ImageTransforms::augmented();
    t.layout = layout;
    const std::int64_t micro = 2, accum = 2;
    const int world = 2;
    auto one = CifarDataset::open(dir, CifarSplit::train, t, 3);
    std::vector<CifarDataset> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(CifarDataset::open(dir, CifarSplit::train, t, 3));
    for (int step = 0; step < 5; ++step) {
      const ImageBatch global = next_rank_share(one, micro * world, accum, 1, 0);  // one rank, world x A x B rows
      std::vector<float> images;
      std::vector<std::int32_t> labels;
      for (int r = 0; r < world; ++r) {
        const ImageBatch share = next_rank_share(ranks[r], micro, accum, world, r);
        EXPECT_EQ(share.batch, micro * accum);
        images.insert(images.end(), share.images.begin(), share.images.end());
        labels.insert(labels.end(), share.labels.begin(), share.labels.end());
        EXPECT_EQ(ranks[r].position(), one.position());
      }
      EXPECT_EQ(images, global.images) << "step " << step;
      EXPECT_EQ(labels, global.labels) << "step " << step;
    }
  }
}

TEST(CifarData, BadFilesNameTheFileAndTheProblem) {
  // A missing training file (data_batch_3.bin), named.
  {
    const std::string dir = fresh_dir("missing");
    write_small_split(dir, 1);
    std::filesystem::remove(file_in(dir, "data_batch_3.bin"));
    const std::string m = invalid_argument_message([&] { CifarDataset::open(dir, CifarSplit::train); });
    EXPECT_TRUE(contains(m, file_in(dir, "data_batch_3.bin"))) << m;
    EXPECT_TRUE(contains(m, "cannot open")) << m;
    std::filesystem::remove(file_in(dir, "test_batch.bin"));
    const std::string t = invalid_argument_message([&] { CifarDataset::open(dir, CifarSplit::test); });
    EXPECT_TRUE(contains(t, file_in(dir, "test_batch.bin"))) << t;
  }
  // An empty file.
  {
    const std::string dir = fresh_dir("empty");
    write_bytes(file_in(dir, "test_batch.bin"), {});
    const std::string m = invalid_argument_message([&] { CifarDataset::open(dir, CifarSplit::test); });
    EXPECT_TRUE(contains(m, file_in(dir, "test_batch.bin") + ": empty file (0 bytes)")) << m;
  }
  // A size that is not a whole number of records (shorter than one record), and a truncated file (its last
  // record cut short).
  {
    const std::string dir = fresh_dir("size");
    write_bytes(file_in(dir, "test_batch.bin"), std::vector<char>(100, 1));
    const std::string m = invalid_argument_message([&] { CifarDataset::open(dir, CifarSplit::test); });
    EXPECT_TRUE(contains(m, "record size: " + file_in(dir, "test_batch.bin") +
                                " has 100 bytes, not a whole number of 3,073-byte records (1 label + 3,072 pixels)"))
        << m;
    EXPECT_TRUE(contains(m, "record 0 (the last) holds only 100 bytes")) << m;
  }
  {
    const std::string dir = fresh_dir("truncated");
    write_small_split(dir, 2);
    const std::string path = file_in(dir, "data_batch_5.bin");
    std::filesystem::resize_file(path, 2 * kCifarRecordBytes - 10);
    const std::string m = invalid_argument_message([&] { CifarDataset::open(dir, CifarSplit::train); });
    EXPECT_TRUE(contains(m, "record size: " + path + " has 6136 bytes, not a whole number of 3,073-byte records")) << m;
    EXPECT_TRUE(contains(m, "record 1 (the last) holds only 3063 bytes")) << m;
  }
  // A label past 9, naming the file and the record.
  {
    const std::string dir = fresh_dir("label");
    write_small_split(dir, 3);
    write_records(file_in(dir, "data_batch_2.bin"), {make_record(0, 1), make_record(1, 2), make_record(2, 10)});
    const std::string m = invalid_argument_message([&] { CifarDataset::open(dir, CifarSplit::train); });
    EXPECT_EQ(m, file_in(dir, "data_batch_2.bin") + ": record 2 has label 10; CIFAR-10 labels are 0..9");
    write_records(file_in(dir, "test_batch.bin"), {make_record(0, 255)});
    const std::string t = invalid_argument_message([&] { CifarDataset::open(dir, CifarSplit::test); });
    EXPECT_EQ(t, file_in(dir, "test_batch.bin") + ": record 0 has label 255; CIFAR-10 labels are 0..9");
  }
  // Every message is one line.
  {
    const std::string dir = fresh_dir("oneline");
    const std::string m = invalid_argument_message([&] { CifarDataset::open(dir, CifarSplit::test); });
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // Transforms that cannot be applied.
  {
    const std::string dir = fresh_dir("transforms");
    write_small_split(dir, 1);
    ImageTransforms t;
    t.std[1] = 0.0f;
    EXPECT_THROW(CifarDataset::open(dir, CifarSplit::test, t), std::invalid_argument);
    t = ImageTransforms::augmented();
    t.crop_padding = -1;
    EXPECT_THROW(CifarDataset::open(dir, CifarSplit::test, t), std::invalid_argument);
  }
}

TEST(CifarData, SyntheticLearnableSetHasCifarFiles) {
  const std::string dir = fresh_dir("synthetic") + "/nested";  // created by the writer
  write_synthetic_cifar(dir, 40, 30, 11);
  for (const auto& name : cifar_split_files(CifarSplit::train))
    EXPECT_EQ(std::filesystem::file_size(file_in(dir, name)), static_cast<std::uintmax_t>(40 * kCifarRecordBytes));
  EXPECT_EQ(std::filesystem::file_size(file_in(dir, "test_batch.bin")), static_cast<std::uintmax_t>(30 * kCifarRecordBytes));
  const auto train = CifarDataset::open(dir, CifarSplit::train);
  const auto test = CifarDataset::open(dir, CifarSplit::test);
  ASSERT_EQ(train.size(), 200);
  ASSERT_EQ(test.size(), 30);
  // Every class occurs; the class decides each image's mean colour: the nearest class centroid (from the training
  // split) classifies every test image, so the set is learnable.
  std::vector<std::array<double, 3>> centroid(kCifarClasses, {0, 0, 0});
  std::vector<int> count(kCifarClasses, 0);
  auto mean_colour = [](const std::uint8_t* p) {
    std::array<double, 3> m{0, 0, 0};
    for (int c = 0; c < 3; ++c) {
      for (int j = 0; j < 1024; ++j) m[c] += p[c * 1024 + j];
      m[c] /= 1024.0;
    }
    return m;
  };
  for (std::int64_t i = 0; i < train.size(); ++i) {
    const auto m = mean_colour(train.pixels(i));
    for (int c = 0; c < 3; ++c) centroid[train.label(i)][c] += m[c];
    ++count[train.label(i)];
  }
  for (int k = 0; k < kCifarClasses; ++k) {
    ASSERT_GT(count[k], 0) << "class " << k;
    for (int c = 0; c < 3; ++c) centroid[k][c] /= count[k];
  }
  for (std::int64_t i = 0; i < test.size(); ++i) {
    const auto m = mean_colour(test.pixels(i));
    int best = 0;
    double best_d = 1e30;
    for (int k = 0; k < kCifarClasses; ++k) {
      double d = 0;
      for (int c = 0; c < 3; ++c) d += (m[c] - centroid[k][c]) * (m[c] - centroid[k][c]);
      if (d < best_d) best_d = d, best = k;
    }
    EXPECT_EQ(best, test.label(i)) << "test image " << i;
  }
  // Deterministic from the seed; another seed gives other images.
  const std::string again = fresh_dir("synthetic_again");
  write_synthetic_cifar(again, 40, 30, 11);
  const auto train2 = CifarDataset::open(again, CifarSplit::train);
  EXPECT_TRUE(std::equal(train.pixels(0), train.pixels(0) + 200 * kCifarImageBytes, train2.pixels(0)));
  const std::string other = fresh_dir("synthetic_other");
  write_synthetic_cifar(other, 40, 30, 12);
  const auto train3 = CifarDataset::open(other, CifarSplit::train);
  EXPECT_FALSE(std::equal(train.pixels(0), train.pixels(0) + 200 * kCifarImageBytes, train3.pixels(0)));
  EXPECT_THROW(write_synthetic_cifar(other, 0, 30, 12), std::invalid_argument);
}
