#include "run/process_memory.h"

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace zeroplan {

namespace {

// "VmHWM:    123456 kB" -> bytes; false when the line is another field or malformed.
bool field_bytes(const std::string& line, const std::string& name, std::int64_t& bytes) {
  if (line.compare(0, name.size() + 1, name + ":") != 0) return false;
  std::istringstream in(line.substr(name.size() + 1));
  std::int64_t value = 0;
  std::string unit;
  if (!(in >> value >> unit) || unit != "kB" || value < 0 || value > (std::int64_t{1} << 52)) return false;
  bytes = value * 1024;
  return true;
}

}  // namespace

ProcessMemory read_process_memory(const std::string& status_path) {
  std::ifstream status(status_path);
  if (!status) throw std::runtime_error("cannot read " + status_path + " (this process's memory)");
  ProcessMemory m;
  for (std::string line; std::getline(status, line);) {
    field_bytes(line, "VmHWM", m.resident_peak_bytes);
    field_bytes(line, "VmRSS", m.resident_bytes);
  }
  return m;
}

std::int64_t read_available_host_memory(const std::string& meminfo_path) {
  std::ifstream meminfo(meminfo_path);
  if (!meminfo) throw std::runtime_error("cannot read " + meminfo_path + " (the host's available memory)");
  std::int64_t bytes = 0;
  for (std::string line; std::getline(meminfo, line);)
    if (field_bytes(line, "MemAvailable", bytes) && bytes > 0) return bytes;
  throw std::runtime_error(meminfo_path + " has no MemAvailable line in kB (needs Linux 3.14 or later)");
}

HostMemoryWatch::HostMemoryWatch(std::chrono::milliseconds period, std::string meminfo_path)
    : path_(std::move(meminfo_path)) {
  sample();
  first_ = lowest_.load();
  thread_ = std::jthread([this, period](std::stop_token stop) {
    // Woken by the destructor's stop request at once, not after the period.
    std::mutex m;
    std::condition_variable_any wake;
    std::unique_lock lock(m);
    for (;;) {
      wake.wait_for(lock, stop, period, [] { return false; });  // returns at the period or at the stop request
      if (stop.stop_requested()) return;
      sample();
    }
  });
}

HostMemoryWatch::~HostMemoryWatch() = default;  // the jthread asks its loop to stop and joins it

void HostMemoryWatch::sample() {
  std::int64_t now = 0;
  try {
    now = read_available_host_memory(path_);
  } catch (const std::exception&) {
    return;  // no /proc/meminfo: nothing to watch (the figures stay 0 and the report says so)
  }
  samples_.fetch_add(1);
  std::int64_t seen = lowest_.load();
  while ((seen == 0 || now < seen) && !lowest_.compare_exchange_weak(seen, now)) {
  }
}

}  // namespace zeroplan
