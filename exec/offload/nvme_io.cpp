#include "exec/offload/nvme_io.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/input_error.h"

namespace zeroplan::exec::offload {

namespace {

using i64 = std::int64_t;

std::string errno_text(int error) { return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")"; }

std::string at(const char* file, int line) { return std::string(" [") + file + ":" + std::to_string(line) + "]"; }

// A system call returning -1 and setting errno.
#define ZP_SYSCALL_CHECK(call, what)                                                                  \
  do {                                                                                                \
    if ((call) == -1) throw IoError(std::string(what) + ": " + errno_text(errno) + at(__FILE__, __LINE__)); \
  } while (0)
// A liburing call returning a negative errno.
#define ZP_URING_CHECK(call, what)                                                                   \
  do {                                                                                               \
    const int zp_ret_ = (call);                                                                      \
    if (zp_ret_ < 0) throw IoError(std::string(what) + ": " + errno_text(-zp_ret_) + at(__FILE__, __LINE__)); \
  } while (0)

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

i64 round_down(i64 x) { return x / kDirectIoAlignment * kDirectIoAlignment; }

// Bytes to allocate for a DirectIoBuffer of `bytes`: at least one block, whole blocks.
i64 direct_io_buffer_bytes(i64 bytes) {
  if (bytes < 0 || bytes > (i64{1} << 50))
    throw std::invalid_argument("DirectIoBuffer: " + std::to_string(bytes) + " bytes; expected 0 to 2^50");
  return round_down(std::max<i64>(bytes, 1) + kDirectIoAlignment - 1);
}

}  // namespace

void DirectIoBuffer::Free::operator()(void* p) const { std::free(p); }

DirectIoBuffer::DirectIoBuffer(i64 bytes) : bytes_(direct_io_buffer_bytes(bytes)) {
  void* p = nullptr;
  const int error = posix_memalign(&p, kDirectIoAlignment, static_cast<std::size_t>(bytes_));
  if (error != 0) throw std::bad_alloc();
  data_.reset(p);
}

// ---- the state behind NvmeStore ----

struct NvmeStore::State {
  struct File {
    std::string path;
    int fd = -1;
    i64 size = 0;       // true size: the end of the furthest write; -1 after a failed write
    int writes_in_flight = 0;
    int reads_in_flight = 0;
  };
  struct Request;
  // One I/O of at most block_bytes; user_data of its submission queue entry.
  struct Block {
    Request* request;
    char* buffer;
    i64 file_offset;
    i64 length;   // bytes still to move
    i64 needed;   // of those, the bytes that must be read for the request to succeed (a tail's true bytes)
  };
  struct Request {
    bool is_write = false;
    File* file = nullptr;
    std::vector<Block> blocks;
    i64 blocks_left = 0;
    // The last partial block goes through `bounce` (4096 bytes, zero-padded for writes); a read copies
    // tail_bytes of it to user_tail when it completes.
    std::unique_ptr<DirectIoBuffer> bounce;
    char* user_tail = nullptr;
    i64 tail_bytes = 0;
    std::string error;  // written by the I/O thread before `done`
    bool done = false;  // guarded by mutex
  };

  std::string nvme_path;
  std::string directory;
  bool created_directory = false;
  int queue_depth = 0;
  i64 block_bytes = 0;
  bool overlap_events = true;

  io_uring ring{};
  bool ring_ready = false;
  int wake_fd = -1;               // eventfd: callers bump it; the I/O thread always has a read of it in flight
  std::uint64_t wake_value = 0;   // where that read lands

  std::mutex mutex;               // guards everything below and each Request's `done`
  std::condition_variable finished;
  std::map<std::string, std::unique_ptr<File>> files;
  std::unordered_map<Ticket, std::unique_ptr<Request>> requests;
  std::deque<Block*> queued;      // handed to the I/O thread, not yet taken
  Ticket next_ticket = 1;
  bool stopping = false;
  std::string fatal_error;        // io_uring itself failed: every request from then on fails with this
  std::thread io_thread;

  ~State();
  void check_directory(const NvmeStoreOptions& options, int rank);
  File& open_file(const std::string& name);
  void check_still_linked(const File& file);
  Ticket submit(bool is_write, const std::string& name, i64 file_offset, char* data, i64 bytes);
  void wake_io_thread();
  void io_loop();
  void arm_wakeup();
  void complete(Block* block, int result, std::deque<Block*>& pending);
  void finish_block(Block* block);
  Request& request_of(Ticket ticket);
};

NvmeStore::State::~State() {
  if (io_thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    try {
      wake_io_thread();
    } catch (const IoError& e) {
      // The I/O thread cannot be woken: it would wait forever for a completion that is not coming.
      std::cerr << "zeroplan: NvmeStore: " << e.what() << "; cannot stop the I/O thread\n";
      std::terminate();
    }
    io_thread.join();
  }
  // Cleanup failures are reported, not thrown (a destructor): the files are scratch space.
  for (auto& [name, file] : files) {
    if (file->fd >= 0 && close(file->fd) == -1)
      std::cerr << "zeroplan: NvmeStore: close " << file->path << ": " << errno_text(errno) << at(__FILE__, __LINE__) << '\n';
    if (unlink(file->path.c_str()) == -1 && errno != ENOENT)
      std::cerr << "zeroplan: NvmeStore: unlink " << file->path << ": " << errno_text(errno) << at(__FILE__, __LINE__) << '\n';
  }
  // ENOTEMPTY: someone else's files are in it; they stay, and so does the directory.
  if (created_directory && rmdir(directory.c_str()) == -1 && errno != ENOTEMPTY)
    std::cerr << "zeroplan: NvmeStore: rmdir " << directory << ": " << errno_text(errno) << at(__FILE__, __LINE__) << '\n';
  if (ring_ready) io_uring_queue_exit(&ring);
  if (wake_fd >= 0 && close(wake_fd) == -1)
    std::cerr << "zeroplan: NvmeStore: close eventfd: " << errno_text(errno) << at(__FILE__, __LINE__) << '\n';
}

// nvme_path must be an existing directory on a file system with direct I/O that this process can write: each
// problem is an input error naming the configuration field (checked by doing what the store will do).
void NvmeStore::State::check_directory(const NvmeStoreOptions& options, int rank) {
  auto input_error = [&](const std::string& problem) {
    return InputError(options.config_source, options.config_field, "'" + nvme_path + "' " + problem);
  };
  if (nvme_path.empty()) throw InputError(options.config_source, options.config_field, "is empty; expected a directory on a local disk (NVMe)");
  struct stat st {};
  if (stat(nvme_path.c_str(), &st) == -1) {
    const int error = errno;
    if (error == ENOENT) throw input_error("does not exist; expected an existing directory on a local disk (NVMe)");
    throw input_error("cannot be examined: " + errno_text(error) + "; expected a directory on a local disk (NVMe)");
  }
  if (!S_ISDIR(st.st_mode)) throw input_error("is not a directory; expected a directory on a local disk (NVMe)");
  directory = nvme_path + (nvme_path.back() == '/' ? "" : "/") + "zeroplan_rank" + std::to_string(rank);
  if (mkdir(directory.c_str(), 0700) == 0) {
    created_directory = true;
  } else if (errno != EEXIST) {
    throw input_error("is not writable: creating " + directory + " failed: " + errno_text(errno) +
                      "; expected a directory this process can write");
  }
  // A one-block direct write: O_DIRECT is refused (EINVAL) by file systems without it (tmpfs before Linux 6.6,
  // some network and FUSE file systems).
  const std::string probe = directory + "/.direct_io_probe";
  const int fd = open(probe.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (fd == -1) {
    const int error = errno;
    if (error == EINVAL)
      throw input_error("is on a file system without direct I/O (O_DIRECT); expected a local disk (NVMe)");
    throw input_error("is not writable: creating " + probe + " failed: " + errno_text(error) +
                      "; expected a directory this process can write");
  }
  DirectIoBuffer block(kDirectIoAlignment);
  std::memset(block.data(), 0, static_cast<std::size_t>(kDirectIoAlignment));
  const ssize_t written = pwrite(fd, block.data(), static_cast<std::size_t>(kDirectIoAlignment), 0);
  const int write_error = errno;
  ZP_SYSCALL_CHECK(close(fd), "close " + probe);
  ZP_SYSCALL_CHECK(unlink(probe.c_str()), "unlink " + probe);
  if (written != kDirectIoAlignment)
    throw input_error("cannot take a direct write of one 4096-byte block: " +
                      (written < 0 ? errno_text(write_error) : std::to_string(written) + " bytes written") +
                      "; expected a writable local disk (NVMe) with space");
}

NvmeStore::State::File& NvmeStore::State::open_file(const std::string& name) {
  auto found = files.find(name);
  if (found != files.end()) {
    check_still_linked(*found->second);
    return *found->second;
  }
  auto file = std::make_unique<File>();
  file->path = directory + "/" + name;
  file->fd = open(file->path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  ZP_SYSCALL_CHECK(file->fd, "open " + file->path + " (O_DIRECT)");
  return *files.emplace(name, std::move(file)).first->second;
}

// Whether the file is still the one under its name: the descriptor outlives an unlink, and a file put back under
// the name is another inode. Either way the data this store wrote is no longer where the user sees it.
void NvmeStore::State::check_still_linked(const File& file) {
  struct stat held {}, named {};
  ZP_SYSCALL_CHECK(fstat(file.fd, &held), "fstat " + file.path);
  if (held.st_nlink == 0 || stat(file.path.c_str(), &named) == -1 || named.st_ino != held.st_ino ||
      named.st_dev != held.st_dev)
    throw IoError("swap file " + file.path + " was removed or replaced while in use (its data is gone); expected "
                  "the directory to be left alone during the run" + at(__FILE__, __LINE__));
}

void NvmeStore::State::wake_io_thread() { ZP_SYSCALL_CHECK(eventfd_write(wake_fd, 1), "eventfd_write (waking the I/O thread)"); }

NvmeStore::Ticket NvmeStore::State::submit(bool is_write, const std::string& name, i64 file_offset, char* data, i64 bytes) {
  const char* op = is_write ? "NvmeStore::write" : "NvmeStore::read";
  if (!valid_name(name))
    throw std::invalid_argument(std::string(op) + ": file name '" + name + "'; expected 1 to 200 of [A-Za-z0-9._-]");
  if (bytes < 0 || bytes > (i64{1} << 50)) throw std::invalid_argument(std::string(op) + ": bytes " + std::to_string(bytes) + "; expected 0 to 2^50");
  if (file_offset < 0 || file_offset % kDirectIoAlignment != 0 || file_offset > (i64{1} << 50))
    throw std::invalid_argument(std::string(op) + ": file offset " + std::to_string(file_offset) +
                                "; expected a multiple of 4096 (direct I/O) from 0 to 2^50");
  if (reinterpret_cast<std::uintptr_t>(data) % kDirectIoAlignment != 0)
    throw std::invalid_argument(std::string(op) + ": buffer address is not a multiple of 4096, which direct I/O "
                                "needs; allocate it with DirectIoBuffer, posix_memalign or cudaHostAlloc");

  std::unique_lock<std::mutex> lock(mutex);
  if (!fatal_error.empty()) throw IoError(fatal_error);
  File* file;
  if (is_write) {
    file = &open_file(name);
    if (file->reads_in_flight > 0)
      throw std::logic_error("NvmeStore::write: " + file->path + " has a read in flight; wait for it first");
  } else {
    auto found = files.find(name);
    if (found == files.end())
      throw std::out_of_range("NvmeStore::read: no file '" + name + "' was written in " + directory);
    file = found->second.get();
    check_still_linked(*file);
    if (file->writes_in_flight > 0)
      throw std::logic_error("NvmeStore::read: " + file->path + " has a write in flight; wait for it first");
    if (file->size < 0)
      throw std::out_of_range("NvmeStore::read: the last write of " + file->path + " failed; its contents are unknown");
    if (file_offset + bytes > file->size)
      throw std::out_of_range("NvmeStore::read: " + file->path + " holds " + std::to_string(file->size) +
                              " bytes; asked for bytes [" + std::to_string(file_offset) + ", " +
                              std::to_string(file_offset + bytes) + ")");
  }

  auto request = std::make_unique<Request>();
  request->is_write = is_write;
  request->file = file;
  const i64 whole = round_down(bytes);
  for (i64 done = 0; done < whole; done += block_bytes) {
    const i64 length = std::min(block_bytes, whole - done);
    request->blocks.push_back({request.get(), data + done, file_offset + done, length, length});
  }
  request->tail_bytes = bytes - whole;
  if (request->tail_bytes > 0) {
    request->bounce = std::make_unique<DirectIoBuffer>(kDirectIoAlignment);
    char* bounce = static_cast<char*>(request->bounce->data());
    request->user_tail = data + whole;
    if (is_write) {
      std::memcpy(bounce, request->user_tail, static_cast<std::size_t>(request->tail_bytes));
      std::memset(bounce + request->tail_bytes, 0, static_cast<std::size_t>(kDirectIoAlignment - request->tail_bytes));
    }
    request->blocks.push_back({request.get(), bounce, file_offset + whole, kDirectIoAlignment, request->tail_bytes});
  }
  request->blocks_left = static_cast<i64>(request->blocks.size());
  request->done = request->blocks.empty();
  if (is_write) {
    file->size = std::max(file->size, file_offset + bytes);
    if (!request->done) ++file->writes_in_flight;
  } else if (!request->done) {
    ++file->reads_in_flight;
  }
  for (Block& block : request->blocks) queued.push_back(&block);
  const Ticket ticket = next_ticket++;
  const bool has_blocks = !request->blocks.empty();
  requests.emplace(ticket, std::move(request));
  lock.unlock();
  if (has_blocks) wake_io_thread();
  return ticket;
}

void NvmeStore::State::arm_wakeup() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (!sqe) throw IoError("io_uring_get_sqe: submission queue full while re-arming the wake-up" + at(__FILE__, __LINE__));
  io_uring_prep_read(sqe, wake_fd, &wake_value, sizeof wake_value, 0);
  io_uring_sqe_set_data(sqe, &wake_value);
}

// The I/O thread: takes queued blocks, keeps up to queue_depth of them in flight, and completes requests.
// io_uring_submit_and_wait submits and sleeps until at least one completion (a block, or the eventfd read that a
// caller's wake_io_thread() completes), so the thread uses no CPU while the disk works.
void NvmeStore::State::io_loop() {
  std::deque<Block*> pending;
  int in_flight = 0;
  bool batch_open = false;  // the current batch is being filled (overlap_events false)
  try {
    arm_wakeup();
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        pending.insert(pending.end(), queued.begin(), queued.end());
        queued.clear();
        if (stopping && pending.empty() && in_flight == 0) return;
      }
      // Without overlap_events a new batch waits until the previous one has completed.
      while (in_flight < queue_depth && !pending.empty() && (overlap_events || in_flight == 0 || batch_open)) {
        batch_open = true;
        Block* block = pending.front();
        pending.pop_front();
        if (!block->request->error.empty()) {  // an earlier block of this request failed: skip the rest
          finish_block(block);
          continue;
        }
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        if (!sqe) throw IoError("io_uring_get_sqe: submission queue full" + at(__FILE__, __LINE__));
        const int fd = block->request->file->fd;
        const auto length = static_cast<unsigned>(block->length);
        if (block->request->is_write) {
          io_uring_prep_write(sqe, fd, block->buffer, length, static_cast<std::uint64_t>(block->file_offset));
        } else {
          io_uring_prep_read(sqe, fd, block->buffer, length, static_cast<std::uint64_t>(block->file_offset));
        }
        io_uring_sqe_set_data(sqe, block);
        ++in_flight;
      }
      batch_open = false;
      const int submitted = io_uring_submit_and_wait(&ring, 1);
      // EINTR: a signal; EAGAIN / EBUSY: the kernel is short of resources or the completion queue is full. Reap
      // what has completed and submit again.
      if (submitted < 0 && submitted != -EINTR && submitted != -EAGAIN && submitted != -EBUSY)
        ZP_URING_CHECK(submitted, "io_uring_submit_and_wait");
      bool rearm = false;
      unsigned head = 0, seen = 0;
      io_uring_cqe* cqe = nullptr;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        void* tag = io_uring_cqe_get_data(cqe);
        if (tag == &wake_value) {
          if (cqe->res < 0 && cqe->res != -EINTR && cqe->res != -EAGAIN) ZP_URING_CHECK(cqe->res, "read of the wake-up eventfd");
          rearm = true;
          continue;
        }
        --in_flight;
        complete(static_cast<Block*>(tag), cqe->res, pending);
      }
      io_uring_cq_advance(&ring, seen);
      if (rearm) arm_wakeup();
    }
  } catch (const std::exception& e) {
    // io_uring itself failed: fail what is queued and what is pending, and every later request. Blocks still in
    // flight are cancelled by io_uring_queue_exit when the store is destroyed.
    std::lock_guard<std::mutex> lock(mutex);
    fatal_error = std::string("NvmeStore I/O thread stopped: ") + e.what();
    pending.insert(pending.end(), queued.begin(), queued.end());
    queued.clear();
    for (auto& [ticket, request] : requests) {
      if (request->done) continue;
      if (request->error.empty()) request->error = fatal_error;
      request->done = true;
    }
    finished.notify_all();
  }
}

// A completion: success, a partial transfer to continue, or a failure recorded in the request.
void NvmeStore::State::complete(Block* block, int result, std::deque<Block*>& pending) {
  Request& request = *block->request;
  const char* op = request.is_write ? "write" : "read";
  const std::string where = request.file->path + " at offset " + std::to_string(block->file_offset);
  if (result == -EINTR || result == -EAGAIN) {
    pending.push_front(block);
    return;
  }
  std::string error;
  if (result < 0) {
    error = std::string(op) + " of " + std::to_string(block->length) + " bytes of " + where + ": " +
            errno_text(-result) + at(__FILE__, __LINE__);
  } else if (result < block->length && !(!request.is_write && result >= block->needed)) {
    if (result > 0 && result % kDirectIoAlignment == 0) {  // a partial transfer: move on to the rest
      block->buffer += result;
      block->file_offset += result;
      block->length -= result;
      block->needed = std::max<i64>(0, block->needed - result);
      pending.push_front(block);
      return;
    }
    error = request.is_write ? "write of " + where + ": " + std::to_string(result) + " of " +
                                   std::to_string(block->length) + " bytes written (disk full?)" + at(__FILE__, __LINE__)
                             : "read of " + where + ": the file ends " + std::to_string(result) + " bytes later; " +
                                   std::to_string(block->needed) +
                                   " were expected (was it truncated or written by something else?)" +
                                   at(__FILE__, __LINE__);
  }
  if (!error.empty() && request.error.empty()) request.error = error;  // the first failure is the one reported
  if (request.error.empty() && !request.is_write && request.bounce && block->buffer == request.bounce->data())
    std::memcpy(request.user_tail, request.bounce->data(), static_cast<std::size_t>(request.tail_bytes));
  finish_block(block);
}

void NvmeStore::State::finish_block(Block* block) {
  Request& request = *block->request;
  if (--request.blocks_left > 0) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (request.is_write) {
    --request.file->writes_in_flight;
    if (!request.error.empty()) request.file->size = -1;
  } else {
    --request.file->reads_in_flight;
  }
  request.done = true;
  finished.notify_all();
}

NvmeStore::State::Request& NvmeStore::State::request_of(Ticket ticket) {
  auto found = requests.find(ticket);
  if (found == requests.end())
    throw std::invalid_argument("NvmeStore: ticket " + std::to_string(ticket) + " is unknown or already waited for");
  return *found->second;
}

// ---- NvmeStore ----

NvmeStore::NvmeStore(const std::string& nvme_path, int rank, const NvmeStoreOptions& options)
    : state_(std::make_unique<State>()) {
  if (rank < 0) throw std::invalid_argument("NvmeStore: rank " + std::to_string(rank) + "; expected >= 0");
  if (options.queue_depth < 1 || options.queue_depth > 4096)
    throw std::invalid_argument("NvmeStore: queue_depth " + std::to_string(options.queue_depth) +
                                "; expected 1 to 4096");
  if (options.block_bytes < kDirectIoAlignment || options.block_bytes > (i64{1} << 30) ||
      options.block_bytes % kDirectIoAlignment != 0)
    throw std::invalid_argument("NvmeStore: block_bytes " + std::to_string(options.block_bytes) +
                                "; expected a multiple of 4096 from 4096 to 1 GiB");
  State& s = *state_;
  s.nvme_path = nvme_path;
  s.queue_depth = options.queue_depth;
  s.block_bytes = options.block_bytes;
  s.overlap_events = options.overlap_events;
  s.check_directory(options, rank);
  s.wake_fd = eventfd(0, EFD_CLOEXEC);
  ZP_SYSCALL_CHECK(s.wake_fd, "eventfd");
  // One entry per block in flight and one for the wake-up read.
  ZP_URING_CHECK(io_uring_queue_init(static_cast<unsigned>(options.queue_depth + 1), &s.ring, 0),
                 "io_uring_queue_init (is io_uring disabled: /proc/sys/kernel/io_uring_disabled, seccomp?)");
  s.ring_ready = true;
  s.io_thread = std::thread([&s] { s.io_loop(); });
}

NvmeStore::~NvmeStore() = default;

NvmeStore::Ticket NvmeStore::write(const std::string& name, i64 file_offset, const void* data, i64 bytes) {
  // The store only reads from `data` for a write; the const is dropped to share the block bookkeeping.
  return state_->submit(true, name, file_offset, static_cast<char*>(const_cast<void*>(data)), bytes);
}

NvmeStore::Ticket NvmeStore::read(const std::string& name, i64 file_offset, void* data, i64 bytes) {
  return state_->submit(false, name, file_offset, static_cast<char*>(data), bytes);
}

bool NvmeStore::ready(Ticket ticket) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->request_of(ticket).done;
}

void NvmeStore::wait(Ticket ticket) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  State::Request& request = s.request_of(ticket);
  s.finished.wait(lock, [&] { return request.done; });
  const std::string error = request.error;
  s.requests.erase(ticket);
  if (!error.empty()) throw IoError("NvmeStore: " + error);
}

void NvmeStore::wait_all() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.finished.wait(lock, [&] {
    return std::all_of(s.requests.begin(), s.requests.end(), [](const auto& r) { return r.second->done; });
  });
  std::string first_error;
  for (const auto& [ticket, request] : s.requests)
    if (first_error.empty() && !request->error.empty()) first_error = request->error;
  s.requests.clear();
  if (!first_error.empty()) throw IoError("NvmeStore: " + first_error);
}

i64 NvmeStore::stored_bytes(const std::string& name) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto found = state_->files.find(name);
  return found == state_->files.end() ? -1 : found->second->size;
}

const std::string& NvmeStore::directory() const { return state_->directory; }
int NvmeStore::queue_depth() const { return state_->queue_depth; }
i64 NvmeStore::block_bytes() const { return state_->block_bytes; }
bool NvmeStore::overlap_events() const { return state_->overlap_events; }

}  // namespace zeroplan::exec::offload
