// run/atomic_file.h: the file holds exactly the parts in order, the CRC returned is zlib's CRC-32 of the whole
// file computed in one pass (independent of the chunking and the threads), nothing temporary is left, and a
// failing system call is an error naming the path.
#include "run/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace zeroplan {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zeroplan_atomic_file_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(AtomicFileTest, ChunksAndThreadsGiveTheWholeFileAndItsCrc) {
  std::mt19937 rng(7);
  // Part sizes that end mid-chunk, on a chunk boundary, and an empty part between them.
  const std::size_t chunk = 1 << 20;
  std::vector<std::string> parts = {std::string(3 * chunk + 12345, '\0'), std::string(), std::string(chunk, '\0'),
                                    std::string(777, '\0')};
  for (std::string& p : parts)
    for (char& c : p) c = static_cast<char>(rng());
  std::string whole;
  std::vector<FilePart> file_parts;
  for (const std::string& p : parts) {
    whole += p;
    file_parts.emplace_back(p.data(), p.size());
  }
  const uLong expected = crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(whole.data()), whole.size());
  for (int threads : {1, 3, 8}) {
    const fs::path out = dir_ / ("f" + std::to_string(threads));
    const std::uint32_t crc = write_file_atomically(out.string(), file_parts, chunk, threads);
    EXPECT_EQ(crc, static_cast<std::uint32_t>(expected)) << threads << " threads";
    EXPECT_EQ(read_all(out), whole) << threads << " threads";
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  }
  // The default chunking (one chunk here) gives the same CRC.
  EXPECT_EQ(write_file_atomically((dir_ / "default").string(), file_parts), static_cast<std::uint32_t>(expected));
}

TEST_F(AtomicFileTest, AnEmptyFileIsWrittenToo) {
  const fs::path out = dir_ / "empty";
  EXPECT_EQ(write_file_atomically(out.string(), {}), 0u);
  EXPECT_TRUE(fs::exists(out));
  EXPECT_EQ(fs::file_size(out), 0u);
}

TEST_F(AtomicFileTest, AnExistingFileIsReplacedWhole) {
  const fs::path out = dir_ / "replace";
  const std::string first(5000, 'a'), second(10, 'b');
  write_file_atomically(out.string(), {{first.data(), first.size()}}, 1024, 2);
  write_file_atomically(out.string(), {{second.data(), second.size()}}, 1024, 2);
  EXPECT_EQ(read_all(out), second);
}

TEST_F(AtomicFileTest, AFailingCallNamesThePath) {
  const std::string data(100, 'x');
  const std::string out = (dir_ / "no-such-directory" / "file").string();
  try {
    write_file_atomically(out, {{data.data(), data.size()}});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("create " + out + ".tmp"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  EXPECT_THROW(fsync_directory((dir_ / "missing").string()), std::runtime_error);
}

}  // namespace
}  // namespace zeroplan
