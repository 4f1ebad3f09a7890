// run/process_memory: the fields of proc(5)'s status file, read from files written here (the kernel's format:
// "Name:<tab><spaces>value kB"), and this process's own resident peak after it touched a known amount of memory.
#include "run/process_memory.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

namespace zeroplan {
namespace {

std::string write_status(const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("zeroplan_status_" + std::to_string(::getpid()));
  std::ofstream(path) << text;
  return path.string();
}

TEST(ProcessMemory, ReadsThePeakAndTheResidentSetInBytes) {
  const std::string path = write_status("Name:\tzeroplan\nVmPeak:\t 9999999 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  "
                                        "102400 kB\nThreads:\t4\n");
  const ProcessMemory m = read_process_memory(path);
  EXPECT_EQ(m.resident_peak_bytes, std::int64_t{204800} * 1024);
  EXPECT_EQ(m.resident_bytes, std::int64_t{102400} * 1024);
  std::filesystem::remove(path);
}

TEST(ProcessMemory, ReadsTheAvailableHostMemoryAndRefusesAFileWithout) {
  // The lines of a real /proc/meminfo (the H100 host of 2026-11-25), MemAvailable below MemTotal.
  const std::string path = write_status("MemTotal:       131981020 kB\nMemFree:        129002144 kB\n"
                                        "MemAvailable:   131138996 kB\nBuffers:            4096 kB\n");
  EXPECT_EQ(read_available_host_memory(path), std::int64_t{131138996} * 1024);
  std::ofstream(path) << "MemTotal:       131981020 kB\nMemFree:        129002144 kB\n";
  EXPECT_THROW(read_available_host_memory(path), std::runtime_error);
  std::filesystem::remove(path);
  EXPECT_THROW(read_available_host_memory(path), std::runtime_error);
}

// Replaces the file at once (rename), so that the watch never reads a half-written figure.
void replace_meminfo(const std::string& path, std::int64_t available_kb) {
  const std::string tmp = path + ".new";
  std::ofstream(tmp) << "MemTotal:       131981020 kB\nMemAvailable:   " << available_kb << " kB\n";
  std::filesystem::rename(tmp, path);
}

// Waits until the watch has read the file `more` times beyond `seen` (it reads every millisecond here).
void wait_for_samples(const HostMemoryWatch& watch, std::int64_t seen, std::int64_t more) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (watch.samples() < seen + more && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(watch.samples(), seen + more) << "the watch stopped reading";
}

TEST(HostMemoryWatch, KeepsTheFirstAndTheLowestReading) {
  const std::string path = write_status("");
  replace_meminfo(path, 100000000);
  {
    const HostMemoryWatch watch(std::chrono::milliseconds(1), path);
    EXPECT_EQ(watch.first_bytes(), std::int64_t{100000000} * 1024);
    replace_meminfo(path, 60000000);  // the ranks allocate
    wait_for_samples(watch, watch.samples(), 3);
    replace_meminfo(path, 90000000);  // and free some
    wait_for_samples(watch, watch.samples(), 3);
    EXPECT_EQ(watch.first_bytes(), std::int64_t{100000000} * 1024);
    EXPECT_EQ(watch.lowest_bytes(), std::int64_t{60000000} * 1024);
  }  // stops at once on destruction
  std::filesystem::remove(path);
}

TEST(HostMemoryWatch, WithoutTheFileItsFiguresStayZero) {
  const HostMemoryWatch watch(std::chrono::milliseconds(1), "/nonexistent/meminfo");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(watch.first_bytes(), 0);
  EXPECT_EQ(watch.lowest_bytes(), 0);
  EXPECT_EQ(watch.samples(), 0);
}

TEST(ProcessMemory, FieldsMissingOrMalformedStayZero) {
  const std::string path = write_status("VmHWM:\tlots kB\nVmRSS:\t 12 MB\nVmHWMX:\t 5 kB\n");
  const ProcessMemory m = read_process_memory(path);
  EXPECT_EQ(m.resident_peak_bytes, 0);
  EXPECT_EQ(m.resident_bytes, 0);
  std::filesystem::remove(path);
}

TEST(ProcessMemory, AMissingFileIsAnErrorNamingIt) {
  try {
    read_process_memory("/nonexistent/zeroplan/status");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/zeroplan/status"), std::string::npos) << e.what();
  }
}

TEST(ProcessMemory, ThisProcessPeakCoversMemoryItTouched) {
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  const std::int64_t before = read_process_memory().resident_peak_bytes;
  ASSERT_GT(before, 0);
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);  // resident only once written
  const ProcessMemory after = read_process_memory();
  EXPECT_GE(after.resident_peak_bytes, static_cast<std::int64_t>(kBytes)) << "peak " << after.resident_peak_bytes;
  EXPECT_GE(after.resident_peak_bytes, after.resident_bytes);
  EXPECT_EQ(block[kBytes - 1], 1);
}

}  // namespace
}  // namespace zeroplan
