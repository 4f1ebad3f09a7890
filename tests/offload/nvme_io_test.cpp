// The NVMe store of ZeRO-Infinity (exec/offload/nvme_io.h): random data round-trips through files for sizes that
// are and are not multiples of 4096, with many requests and blocks in flight, pieces at offsets of one file; and
// the errors: a missing, non-directory or unwritable nvme_path, a read past what was written, a file truncated
// behind the store's back, misaligned buffers and offsets. Files live under the build directory (a disk; /tmp
// may be a tmpfs without direct I/O).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/input_error.h"
#include "exec/offload/nvme_io.h"
#include "exec/offload/param_swapper.h"

namespace zeroplan::exec::offload {
namespace {

using i64 = std::int64_t;

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

class NvmeStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/nvme_io_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << "mkdtemp " << pattern << ": " << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override {
    // The stores remove their own files and directories; what is left is the test's own.
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // `bytes` random bytes in a direct-I/O buffer with 4096 spare bytes after them, set to 0xAB (a guard).
  static DirectIoBuffer random_buffer(i64 bytes, std::uint32_t seed) {
    DirectIoBuffer buffer(bytes + kDirectIoAlignment);
    std::mt19937 rng(seed);
    auto* p = static_cast<unsigned char*>(buffer.data());
    for (i64 i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(rng());
    std::memset(p + bytes, 0xAB, static_cast<std::size_t>(buffer.bytes() - bytes));
    return buffer;
  }
  static DirectIoBuffer guarded_buffer(i64 bytes) {
    DirectIoBuffer buffer(bytes + kDirectIoAlignment);
    std::memset(buffer.data(), 0xAB, static_cast<std::size_t>(buffer.bytes()));
    return buffer;
  }
  // The read-back equals the source in its first `bytes`, and the guard after them is untouched.
  static void expect_same(const DirectIoBuffer& source, const DirectIoBuffer& read_back, i64 bytes) {
    EXPECT_EQ(std::memcmp(source.data(), read_back.data(), static_cast<std::size_t>(bytes)), 0) << bytes << " bytes";
    const auto* guard = static_cast<const unsigned char*>(read_back.data()) + bytes;
    for (i64 i = 0; i < kDirectIoAlignment; ++i) ASSERT_EQ(guard[i], 0xAB) << "byte " << bytes + i << " overwritten";
  }

  std::string dir_;
};

TEST_F(NvmeStoreTest, RoundTripsSizesThatAreAndAreNotMultiplesOf4096) {
  const std::vector<i64> sizes = {0,           1,           4095,       4096,       4097, 8192 + 100,
                                  i64{1} << 20, (i64{1} << 20) + 123, 3 * (i64{1} << 20) + 5 * 4096 + 7};
  NvmeStoreOptions options;
  options.queue_depth = 4;
  NvmeStore store(dir_, 0, options);
  std::vector<DirectIoBuffer> sources, reads;
  for (std::size_t k = 0; k < sizes.size(); ++k) sources.push_back(random_buffer(sizes[k], 17 + k));
  for (std::size_t k = 0; k < sizes.size(); ++k)  // all written at once: requests pile up behind the queue depth
    store.write("tensor_" + std::to_string(k), sources[k].data(), sizes[k]);
  store.wait_all();
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_EQ(store.stored_bytes("tensor_" + std::to_string(k)), sizes[k]);
    reads.push_back(guarded_buffer(sizes[k]));
  }
  std::vector<NvmeStore::Ticket> tickets;
  for (std::size_t k = 0; k < sizes.size(); ++k)
    tickets.push_back(store.read("tensor_" + std::to_string(k), reads[k].data(), sizes[k]));
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    store.wait(tickets[k]);
    SCOPED_TRACE("size " + std::to_string(sizes[k]));
    expect_same(sources[k], reads[k], sizes[k]);
  }
}

// 48 files of 8 blocks or so, with a queue depth of 3: most blocks wait in the store's queue; reads of the first
// files start while writes of the last are still going.
TEST_F(NvmeStoreTest, ManyRequestsInFlight) {
  NvmeStoreOptions options;
  options.queue_depth = 3;
  options.block_bytes = 16384;
  NvmeStore store(dir_, 3, options);
  const int files = 48;
  std::vector<i64> sizes;
  std::vector<DirectIoBuffer> sources, reads;
  std::vector<NvmeStore::Ticket> writes;
  for (int k = 0; k < files; ++k) {
    sizes.push_back(8 * 16384 + 977 * k);
    sources.push_back(random_buffer(sizes[k], 1000 + k));
    reads.push_back(guarded_buffer(sizes[k]));
    writes.push_back(store.write("piece-" + std::to_string(k), sources[k].data(), sizes[k]));
  }
  std::vector<NvmeStore::Ticket> read_tickets;
  for (int k = 0; k < files; ++k) {
    store.wait(writes[k]);
    read_tickets.push_back(store.read("piece-" + std::to_string(k), reads[k].data(), sizes[k]));
  }
  for (int k = 0; k < files; ++k) {
    store.wait(read_tickets[k]);
    expect_same(sources[k], reads[k], sizes[k]);
  }
  EXPECT_THROW(store.wait(read_tickets[0]), std::invalid_argument) << "a ticket is waited for once";
}

// A partition written in pieces at 4096-aligned offsets of one file (the last piece ragged) and read back in
// other pieces.
TEST_F(NvmeStoreTest, PiecesAtOffsetsOfOneFile) {
  NvmeStore store(dir_, 1);
  const i64 piece = 3 * 4096, total = 4 * piece + 1000;
  DirectIoBuffer source = random_buffer(total, 5);
  const char* bytes = static_cast<const char*>(source.data());
  for (i64 offset = 0; offset < total; offset += piece)
    store.write("partition", offset, bytes + offset, std::min(piece, total - offset));
  store.wait_all();
  EXPECT_EQ(store.stored_bytes("partition"), total);
  DirectIoBuffer middle = guarded_buffer(2 * piece), last = guarded_buffer(total - 4 * piece);
  store.wait(store.read("partition", piece, middle.data(), 2 * piece));
  store.wait(store.read("partition", 4 * piece, last.data(), total - 4 * piece));
  EXPECT_EQ(std::memcmp(middle.data(), bytes + piece, 2 * piece), 0);
  EXPECT_EQ(std::memcmp(last.data(), bytes + 4 * piece, static_cast<std::size_t>(total - 4 * piece)), 0);
}

TEST_F(NvmeStoreTest, RemovesItsFilesAndDirectory) {
  std::string directory;
  {
    NvmeStore store(dir_, 7);
    directory = store.directory();
    DirectIoBuffer data = random_buffer(5000, 1);
    store.wait(store.write("m", data.data(), 5000));
    EXPECT_TRUE(exists(directory + "/m"));
  }
  EXPECT_FALSE(exists(directory)) << directory;
}

// The message names the field, the path and what is expected.
void expect_nvme_path_error(const std::string& path, const std::string& problem) {
  NvmeStoreOptions options;
  options.config_source = "ds_config.json";
  options.config_field = "zero_optimization.offload_param.nvme_path";
  try {
    NvmeStore store(path, 0, options);
    FAIL() << "nvme_path " << path << " was accepted";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ds_config.json"), std::string::npos) << message;
    EXPECT_NE(message.find("zero_optimization.offload_param.nvme_path"), std::string::npos) << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << message;
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
  }
}

TEST_F(NvmeStoreTest, MissingNvmePathIsAnInputError) {
  expect_nvme_path_error(dir_ + "/no-such-directory", "does not exist");
  expect_nvme_path_error("", "is empty");
}

TEST_F(NvmeStoreTest, NvmePathThatIsAFileOrUnderAFileIsAnInputError) {
  const std::string file = dir_ + "/plain-file";
  std::ofstream(file) << "not a directory";
  expect_nvme_path_error(file, "is not a directory");
  // Whoever runs the test (root included) cannot create anything under a regular file.
  expect_nvme_path_error(file + "/nvme", "Not a directory");
}

TEST_F(NvmeStoreTest, UnwritableNvmePathIsAnInputError) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes to read-only directories; the path-under-a-file test covers root";
  const std::string locked = dir_ + "/locked";
  ASSERT_EQ(mkdir(locked.c_str(), 0500), 0);
  expect_nvme_path_error(locked, "is not writable");
  chmod(locked.c_str(), 0700);
}

TEST_F(NvmeStoreTest, ReadingMoreThanWasWrittenIsRefused) {
  NvmeStore store(dir_, 0);
  DirectIoBuffer data = random_buffer(10000, 2), back = guarded_buffer(20000);
  store.wait(store.write("short", data.data(), 10000));
  try {
    store.read("short", back.data(), 20000);
    FAIL() << "a read past the end was accepted";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("holds 10000 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store.read("short", 8192, back.data(), 4096), std::out_of_range);
  EXPECT_THROW(store.read("never-written", back.data(), 1), std::out_of_range);
  EXPECT_NO_THROW(store.wait(store.read("short", 8192, back.data(), 10000 - 8192)));
}

// A file cut short behind the store's back: the read fails at wait() with the file and where it ended.
TEST_F(NvmeStoreTest, FileTruncatedBehindTheStoreFailsTheRead) {
  NvmeStore store(dir_, 0);
  DirectIoBuffer data = random_buffer(3 * 4096, 3), back = guarded_buffer(3 * 4096);
  store.wait(store.write("cut", data.data(), 3 * 4096));
  ASSERT_EQ(truncate((store.directory() + "/cut").c_str(), 4096), 0);
  const NvmeStore::Ticket ticket = store.read("cut", back.data(), 3 * 4096);
  try {
    store.wait(ticket);
    FAIL() << "a read of a truncated file succeeded";
  } catch (const IoError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(store.directory() + "/cut"), std::string::npos) << message;
    EXPECT_NE(message.find("the file ends"), std::string::npos) << message;
  }
}

TEST_F(NvmeStoreTest, RefusesMisalignedBuffersOffsetsAndBadNames) {
  NvmeStore store(dir_, 0);
  DirectIoBuffer data = random_buffer(8192, 4);
  char* misaligned = static_cast<char*>(data.data()) + 512;
  EXPECT_THROW(store.write("a", misaligned, 100), std::invalid_argument);
  EXPECT_THROW(store.write("a", 100, data.data(), 100), std::invalid_argument);
  EXPECT_THROW(store.write("a", data.data(), -1), std::invalid_argument);
  for (const std::string& name : {std::string(""), std::string(".."), std::string("a/b"), std::string(201, 'x')})
    EXPECT_THROW(store.write(name, data.data(), 100), std::invalid_argument) << "name '" << name << "'";
  NvmeStoreOptions bad_block;
  bad_block.block_bytes = 5000;
  EXPECT_THROW(NvmeStore(dir_, 0, bad_block), std::invalid_argument);
  NvmeStoreOptions bad_depth;
  bad_depth.queue_depth = 0;
  EXPECT_THROW(NvmeStore(dir_, 0, bad_depth), std::invalid_argument);
  EXPECT_THROW(NvmeStore(dir_, -1), std::invalid_argument);
}


// aio.overlap_events false: blocks go in batches of queue_depth, each after the previous one completed; the
// data is the same.
TEST_F(NvmeStoreTest, BatchedSubmissionWithoutOverlapEventsRoundTrips) {
  NvmeStoreOptions options;
  options.queue_depth = 3;
  options.block_bytes = 8192;
  options.overlap_events = false;
  NvmeStore store(dir_, 0, options);
  EXPECT_FALSE(store.overlap_events());
  const i64 bytes = 10 * 8192 + 123;
  DirectIoBuffer source = random_buffer(bytes, 7), back = guarded_buffer(bytes);
  store.wait(store.write("batched", source.data(), bytes));
  store.wait(store.read("batched", back.data(), bytes));
  expect_same(source, back, bytes);
}

// A file removed (or put back as another file) under the store's name is an error naming it at the next request:
// the open descriptor would still read the old inode, but whoever removed it meant its data gone.
TEST_F(NvmeStoreTest, AFileRemovedOrReplacedIsAnIoErrorNamingIt) {
  NvmeStore store(dir_, 0);
  const i64 bytes = 5000;
  DirectIoBuffer source = random_buffer(bytes, 9), back = guarded_buffer(bytes);
  store.wait(store.write("removed", source.data(), bytes));
  const std::string path = store.directory() + "/removed";
  ASSERT_TRUE(exists(path));
  std::filesystem::remove(path);
  try {
    store.read("removed", back.data(), bytes);
    ADD_FAILURE() << "a read of a removed file was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("removed"), std::string::npos) << e.what();
  }
  store.wait(store.write("replaced", source.data(), bytes));
  const std::string replaced = store.directory() + "/replaced";
  std::filesystem::remove(replaced);
  std::ofstream(replaced) << "someone else's";
  EXPECT_THROW(store.write("replaced", source.data(), bytes), IoError);
}

// The parameter swapper: chunks written, then read back in a planned order (read ahead into the buffers) and out
// of it; bytes counted in whole blocks; a chunk still in a buffer not read again; a write of a chunk whose read is
// planned drops the plan.
TEST_F(NvmeStoreTest, ParamSwapperReadsAheadInThePlannedOrder) {
  const std::vector<i64> chunks = {1000, 0, 4096, 3000};  // elements of 4 bytes; chunk 1 stays in host memory
  std::vector<DirectIoBuffer> memory;
  std::vector<int> idle;
  ParamSwapper swapper(
      dir_, 0, NvmeStoreOptions{}, chunks, 4, 2,
      [&](i64 bytes) {
        memory.emplace_back(bytes);
        return memory.back().data();
      },
      [&](int b) { idle.push_back(b); });
  EXPECT_EQ(swapper.buffer_count(), 2);
  EXPECT_EQ(swapper.nvme_bytes(), 4096 + 16384 + 12288);
  EXPECT_EQ(swapper.buffer_bytes(), 2 * 16384 + 4096);
  std::vector<std::vector<float>> values(chunks.size());
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c] == 0) continue;
    values[c].resize(static_cast<std::size_t>(chunks[c]));
    for (std::size_t i = 0; i < values[c].size(); ++i) values[c][i] = static_cast<float>(c * 100000 + i);
    const ParamSwapper::Writing w = swapper.begin_write(static_cast<int>(c), 0, chunks[c]);
    std::memcpy(w.data, values[c].data(), values[c].size() * 4);
    swapper.end_write(w);
  }
  swapper.wait_writes();
  SwapTimes t = swapper.take_times();
  EXPECT_EQ(t.write_bytes, swapper.nvme_bytes());
  EXPECT_EQ(t.read_bytes, 0);
  const std::vector<int> order = {3, 0, 2, 3, 0};
  swapper.plan_reads(order);
  for (int c : order) {
    const ParamSwapper::Held h = swapper.acquire(c);
    EXPECT_EQ(std::memcmp(h.data, values[c].data(), values[c].size() * 4), 0) << "chunk " << c;
    swapper.release(h.buffer);
  }
  const ParamSwapper::Held out_of_order = swapper.acquire(2);  // no plan: read now
  EXPECT_EQ(std::memcmp(out_of_order.data, values[2].data(), values[2].size() * 4), 0);
  swapper.release(out_of_order.buffer);
  t = swapper.take_times();
  // Chunk 3, written last, was still in its buffer for its first use (swap_buffer_policy.h); every other use read
  // its chunk: 0, 2, 3 again (its buffer went to chunk 2), 0 again, and 2 out of the plan.
  EXPECT_EQ(t.read_bytes, 4096 + 16384 + 12288 + 4096 + 16384);
  // A write of chunk 0 while its read is planned: the plan goes, the write lands, the read sees it.
  swapper.plan_reads({0, 2});
  values[0][5] = -1.0f;
  const ParamSwapper::Writing w = swapper.begin_write(0, 0, chunks[0]);
  std::memcpy(w.data, values[0].data(), values[0].size() * 4);
  swapper.end_write(w);
  const ParamSwapper::Held h = swapper.acquire(0);
  EXPECT_EQ(static_cast<const float*>(h.data)[5], -1.0f);
  swapper.release(h.buffer);
  EXPECT_FALSE(idle.empty());
  EXPECT_THROW(swapper.acquire(1), std::logic_error);  // chunk 1 is not on NVMe
}

}  // namespace
}  // namespace zeroplan::exec::offload
