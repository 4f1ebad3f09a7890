// nvme_io_benchmark: write then read N GiB under a directory with the executor's NVMe store
// (exec/offload/nvme_io.h: O_DIRECT, io_uring, queue_depth blocks of block_bytes in flight), beside the disk's
// raw figure measured in the same run: one thread, synchronous O_DIRECT pwrite / pread of large blocks, one after
// the other, over a file of the same size.
//
//   build-offload/bench/nvme_io_benchmark [--dir /tmp] [--gib 1] [--piece-mib 64] [--queue-depth 8]
//                                         [--block-kib 1024] [--raw-block-mib 8] [--repeats 3]
//
// The store writes the N GiB as pieces of --piece-mib (one file each, all issued at once, as the engine swaps a
// partition out) and reads them back the same way; the data read is compared with the data written (outside the
// timing). Direct I/O skips the page cache in both methods, so no cache has to be dropped (which needs root);
// a cache below the file system (a virtual disk's host, a drive's own cache) is not skipped, and neither method
// calls fsync. Figures are decimal: GB/s = 1e9 bytes per second. One JSON line per method and direction, each the
// median of --repeats runs; the two methods alternate which goes first.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/host_bench_common.h"
#include "core/input_error.h"
#include "exec/offload/nvme_io.h"

namespace zeroplan::bench {
namespace {

using exec::offload::DirectIoBuffer;
using exec::offload::IoError;
using exec::offload::NvmeStore;
using exec::offload::NvmeStoreOptions;
using i64 = std::int64_t;

constexpr i64 kMiB = i64{1} << 20;

struct Options {
  std::string dir = "/tmp";
  double gib = 1;
  int piece_mib = 64;
  int queue_depth = 8;
  int block_kib = 1024;
  int raw_block_mib = 8;
  int repeats = 3;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string errno_text() { return std::string(std::strerror(errno)) + " (errno " + std::to_string(errno) + ")"; }

#define ZP_BENCH_SYSCALL(call, what)                                                                  \
  do {                                                                                                \
    if ((call) == -1)                                                                                 \
      throw IoError(std::string(what) + ": " + errno_text() + " [" + __FILE__ + ":" + std::to_string(__LINE__) + "]"); \
  } while (0)

// Seconds to move `bytes` between `buffer` and `path` in synchronous O_DIRECT blocks of `block` bytes.
double raw_transfer(bool write, const std::string& path, char* buffer, i64 bytes, i64 block) {
  const int fd = open(path.c_str(), (write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY) | O_DIRECT | O_CLOEXEC, 0600);
  ZP_BENCH_SYSCALL(fd, "open " + path + " (O_DIRECT)");
  const auto start = std::chrono::steady_clock::now();
  for (i64 done = 0; done < bytes;) {
    const auto length = static_cast<std::size_t>(std::min(block, bytes - done));
    const ssize_t moved = write ? pwrite(fd, buffer + done, length, done) : pread(fd, buffer + done, length, done);
    ZP_BENCH_SYSCALL(moved, std::string(write ? "pwrite " : "pread ") + path);
    if (moved == 0 || moved % exec::offload::kDirectIoAlignment != 0)
      throw IoError((write ? "pwrite " : "pread ") + path + ": moved " + std::to_string(moved) + " of " +
                    std::to_string(length) + " bytes at offset " + std::to_string(done));
    done += moved;
  }
  const double seconds = seconds_since(start);
  ZP_BENCH_SYSCALL(close(fd), "close " + path);
  return seconds;
}

NvmeStoreOptions store_options(const Options& o) {
  NvmeStoreOptions options;
  options.queue_depth = o.queue_depth;
  options.block_bytes = i64{o.block_kib} * 1024;
  options.config_source = "command line";
  options.config_field = "--dir";
  return options;
}

// Seconds to write, then to read, `bytes` in pieces through a fresh store (its files are removed after).
std::pair<double, double> store_transfer(const Options& o, char* source, char* destination, i64 bytes) {
  NvmeStore store(o.dir, 0, store_options(o));
  const i64 piece = i64{o.piece_mib} * kMiB;
  auto start = std::chrono::steady_clock::now();
  for (i64 offset = 0, k = 0; offset < bytes; offset += piece, ++k)
    store.write("piece_" + std::to_string(k), source + offset, std::min(piece, bytes - offset));
  store.wait_all();
  const double write_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  for (i64 offset = 0, k = 0; offset < bytes; offset += piece, ++k)
    store.read("piece_" + std::to_string(k), destination + offset, std::min(piece, bytes - offset));
  store.wait_all();
  return {write_seconds, seconds_since(start)};
}

void check_same(const char* source, const char* destination, i64 bytes, const std::string& method) {
  if (std::memcmp(source, destination, static_cast<std::size_t>(bytes)) != 0)
    throw IoError(method + ": the data read back differs from the data written");
}

int run(const Options& o) {
  if (!(o.gib > 0) || o.gib > 1024) throw InputError("command line", "--gib", "expected a size in GiB above 0, at most 1024");
  if (o.piece_mib < 1 || o.piece_mib > 1024) throw InputError("command line", "--piece-mib", "expected 1 to 1024");
  if (o.raw_block_mib < 1 || o.raw_block_mib > 1024)
    throw InputError("command line", "--raw-block-mib", "expected 1 to 1024");
  if (o.block_kib < 4 || o.block_kib % 4 != 0 || o.block_kib > 1024 * 1024)
    throw InputError("command line", "--block-kib", "expected a multiple of 4 from 4 to 1048576 (direct I/O blocks)");
  if (o.queue_depth < 1 || o.queue_depth > 4096) throw InputError("command line", "--queue-depth", "expected 1 to 4096");
  if (o.repeats < 1) throw InputError("command line", "--repeats", "expected at least 1");
  // Whole 4096-byte blocks, so both methods move exactly the same bytes.
  const i64 bytes = static_cast<i64>(o.gib * 1024 * 1024 * 1024) / exec::offload::kDirectIoAlignment *
                    exec::offload::kDirectIoAlignment;
  if (bytes < exec::offload::kDirectIoAlignment) throw InputError("command line", "--gib", "is below one 4096-byte block");
  // The store's checks of --dir (exists, is a directory, writable, takes direct I/O) before any measurement.
  { NvmeStore check(o.dir, 0, store_options(o)); }
  struct statvfs fs {};
  if (statvfs(o.dir.c_str(), &fs) == -1)
    throw InputError("command line", "--dir", "'" + o.dir + "' cannot be examined: " + errno_text() +
                                                  "; expected an existing directory on the disk to measure");
  if (static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize) < 1.1 * static_cast<double>(bytes))
    throw InputError("command line", "--dir", "'" + o.dir + "' has " + std::to_string(fs.f_bavail * fs.f_frsize / kMiB) +
                                                  " MiB free; the benchmark writes " + std::to_string(bytes / kMiB) +
                                                  " MiB at a time (--gib)");

  DirectIoBuffer source(bytes), destination(bytes);
  auto* src = static_cast<char*>(source.data());
  auto* dst = static_cast<char*>(destination.data());
  std::mt19937_64 rng(12);
  for (i64 i = 0; i < bytes / 8; ++i) {
    const std::uint64_t word = rng();
    std::memcpy(src + 8 * i, &word, 8);
  }
  const std::string raw_path = o.dir + (o.dir.back() == '/' ? "" : "/") + "zeroplan_raw_io." + std::to_string(getpid());
  const i64 raw_block = i64{o.raw_block_mib} * kMiB;
  // The raw file goes when the benchmark does, also when it stops on an error.
  struct RemoveOnExit {
    const std::string& path;
    ~RemoveOnExit() {
      if (unlink(path.c_str()) == -1 && errno != ENOENT)
        std::cerr << "nvme_io_benchmark: unlink " << path << ": " << errno_text() << '\n';
    }
  } remove_raw_file{raw_path};

  const double load_before = load_average_1min();
  std::vector<double> raw_write, raw_read, store_write, store_read;
  for (int r = 0; r < o.repeats; ++r) {
    auto raw = [&] {
      raw_write.push_back(raw_transfer(true, raw_path, src, bytes, raw_block));
      std::memset(dst, 0, static_cast<std::size_t>(bytes));
      raw_read.push_back(raw_transfer(false, raw_path, dst, bytes, raw_block));
      ZP_BENCH_SYSCALL(unlink(raw_path.c_str()), "unlink " + raw_path);
      check_same(src, dst, bytes, "raw pread");
    };
    auto store = [&] {
      std::memset(dst, 0, static_cast<std::size_t>(bytes));
      const auto [w, rd] = store_transfer(o, src, dst, bytes);
      store_write.push_back(w);
      store_read.push_back(rd);
      check_same(src, dst, bytes, "NvmeStore read");
    };
    if (r % 2 == 0) {
      raw();
      store();
    } else {
      store();
      raw();
    }
  }
  const double load_after = load_average_1min();
  auto line = [&](const char* method, const char* op, const std::vector<double>& seconds, i64 block, int depth) {
    nlohmann::ordered_json j;
    j["method"] = method;
    j["op"] = op;
    j["gb_per_s"] = static_cast<double>(bytes) / median(seconds) / 1e9;
    j["unit"] = "GB/s, GB = 1e9 bytes";
    j["bytes"] = bytes;
    j["seconds_median"] = median(seconds);
    j["block_bytes"] = block;
    j["queue_depth"] = depth;
    if (std::string(method) == "nvme_store") j["piece_bytes"] = i64{o.piece_mib} * kMiB;
    j["dir"] = o.dir;
    j["repeats"] = o.repeats;
    j["loadavg_1min_before"] = load_before;
    j["loadavg_1min_after"] = load_after;
    std::cout << j.dump() << std::endl;
  };
  line("raw_sync_o_direct", "write", raw_write, raw_block, 1);
  line("nvme_store", "write", store_write, i64{o.block_kib} * 1024, o.queue_depth);
  line("raw_sync_o_direct", "read", raw_read, raw_block, 1);
  line("nvme_store", "read", store_read, i64{o.block_kib} * 1024, o.queue_depth);
  return 0;
}

}  // namespace
}  // namespace zeroplan::bench

int main(int argc, char** argv) {
  zeroplan::bench::Options o;
  CLI::App app{"Read/write GB/s of the executor's NVMe store (ZeRO-Infinity) beside the disk's raw direct-I/O figure"};
  app.add_option("--dir", o.dir, "directory on the disk to measure (DeepSpeed's nvme_path)");
  app.add_option("--gib", o.gib, "GiB to write and read back");
  app.add_option("--piece-mib", o.piece_mib, "MiB per store request (one file each)");
  app.add_option("--queue-depth", o.queue_depth, "the store's blocks in flight");
  app.add_option("--block-kib", o.block_kib, "KiB per store I/O");
  app.add_option("--raw-block-mib", o.raw_block_mib, "MiB per synchronous pwrite/pread of the raw figure");
  app.add_option("--repeats", o.repeats, "runs of each method; the median is printed");
  return zeroplan::bench::run_benchmark(app, argc, argv, "nvme_io_benchmark", [&] { return zeroplan::bench::run(o); });
}
