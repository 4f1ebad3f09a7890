#include "run/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace zeroplan {

namespace {

std::string io_error(const char* what, const std::string& path, int err, const char* file, int line) {
  return std::string(what) + " " + path + ": " + std::strerror(err) + " (" + file + ":" + std::to_string(line) + ")";
}

#define IO_CHECK(ok, what, path)                                                   \
  do {                                                                             \
    if (!(ok)) throw std::runtime_error(io_error(what, path, errno, __FILE__, __LINE__)); \
  } while (0)

struct Chunk {
  const char* data = nullptr;
  std::size_t size = 0;
  off_t offset = 0;
  uLong crc = 0;
};

// The writers' default: a few threads are enough to keep a disk busy (a GPT-2 1.5B rank file, 18.7 GB, took 49 s
// with one thread on an H200 machine whose disk writes 1.5 GB/s: bench/exec/results/2026-11-23-one-gpu/README.md).
int default_writer_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores, 1u, 4u));
}

}  // namespace

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  IO_CHECK(fd >= 0, "open directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error(io_error("fsync directory", dir, err, __FILE__, __LINE__));
}

std::uint32_t write_file_atomically(const std::string& path, const std::vector<FilePart>& parts,
                                    std::size_t chunk_bytes, int threads) {
  if (chunk_bytes == 0) throw std::invalid_argument("write_file_atomically: chunk_bytes must be positive");
  if (threads <= 0) threads = default_writer_threads();
  const std::string tmp = path + ".tmp";
  std::vector<Chunk> chunks;
  off_t offset = 0;
  for (const auto& [data, size] : parts) {
    for (std::size_t at = 0; at < size; at += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, size - at);
      chunks.push_back(Chunk{static_cast<const char*>(data) + at, n, offset, 0});
      offset += static_cast<off_t>(n);
    }
  }
  threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), std::max<std::size_t>(1, chunks.size())));

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  IO_CHECK(fd >= 0, "create", tmp);
  std::atomic<std::size_t> next{0};
  // Starting write-back early is an optimisation only (the fsync below makes the file durable either way): a
  // filesystem that refuses it turns it off for the rest of the file.
  std::atomic<bool> early_writeback{true};
  std::vector<std::string> errors(static_cast<std::size_t>(threads));
  auto writer = [&](int t) {
    for (std::size_t i = next++; i < chunks.size(); i = next++) {
      Chunk& c = chunks[i];
      c.crc = crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(c.data), c.size);
      std::size_t done = 0;
      while (done < c.size) {
        const ssize_t n = ::pwrite(fd, c.data + done, c.size - done, c.offset + static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          errors[static_cast<std::size_t>(t)] = io_error("write", tmp, n < 0 ? errno : ENOSPC, __FILE__, __LINE__);
          next = chunks.size();  // the others stop after their chunk
          return;
        }
        done += static_cast<std::size_t>(n);
      }
      if (early_writeback && ::sync_file_range(fd, c.offset, static_cast<off_t>(c.size), SYNC_FILE_RANGE_WRITE) != 0)
        early_writeback = false;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(writer, t);
  writer(0);
  for (std::thread& th : pool) th.join();

  auto fail = [&](const std::string& message) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(message);
  };
  for (const std::string& e : errors)
    if (!e.empty()) fail(e);
  if (::fsync(fd) != 0) fail(io_error("fsync", tmp, errno, __FILE__, __LINE__));
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(io_error("close", tmp, err, __FILE__, __LINE__));
  }
  IO_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "rename to", path);

  // The chunks' CRCs joined in file order give the whole file's (zlib's crc32_combine).
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const Chunk& c : chunks) crc = crc32_combine(crc, c.crc, static_cast<z_off_t>(c.size));
  return static_cast<std::uint32_t>(crc);
}

}  // namespace zeroplan
