// Helpers shared by the host-side benchmarks (cpu_adam_benchmark, nvme_io_benchmark): the command line and its
// exit statuses, sizes given as "1e8" or "100000000", medians of repeated timings, the host's load average printed
// beside each figure (the machine may be shared), and page-aligned host arrays.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/input_error.h"

namespace zeroplan::bench {

// A positive whole number written as an integer or in scientific notation ("1e8"), at most `max`.
inline std::int64_t parse_count(const std::string& text, const std::string& flag, std::int64_t max) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(value >= 1) || value > static_cast<double>(max) || value != std::floor(value))
    throw InputError("command line", flag,
                     "'" + text + "' is not a whole number from 1 to " + std::to_string(max) + " (e.g. 1e8)");
  return static_cast<std::int64_t>(value);
}

// Parses the command line into the options `app` was given, then runs `measure`. Exit status 2 for bad input (a
// flag CLI11 rejects, an InputError) and for host memory too small for the sizes asked, 1 for a failure while
// measuring, else what `measure` returns.
template <class Measure>
int run_benchmark(CLI::App& app, int argc, char** argv, const char* program, Measure measure) {
  try {
    app.parse(argc, argv);
    return measure();
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;  // --help exits 0
  } catch (const InputError& error) {
    std::cerr << program << ": error: " << error.what() << '\n';
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << program << ": error: out of host memory for the sizes asked\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << program << ": error: " << error.what() << '\n';
    return 1;
  }
}

inline double median(std::vector<double> values) {
  if (values.empty()) throw std::logic_error("median of no values");
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The 1-minute load average (/proc/loadavg, the first figure `uptime` prints); -1 where it cannot be read.
inline double load_average_1min() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <class T>
using HostArray = std::unique_ptr<T[], FreeDeleter>;

// `count` elements aligned to `alignment` bytes (a power of two, at least the page size for O_DIRECT buffers).
template <class T>
HostArray<T> allocate_host_array(std::int64_t count, std::size_t alignment = 4096) {
  if (count < 0 || static_cast<std::uint64_t>(count) > SIZE_MAX / sizeof(T) - alignment)
    throw std::length_error("host array of " + std::to_string(count) + " elements is too large");
  const std::size_t bytes = (static_cast<std::size_t>(count) * sizeof(T) + alignment - 1) / alignment * alignment;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, std::max<std::size_t>(bytes, alignment)) != 0) throw std::bad_alloc();
  return HostArray<T>(static_cast<T*>(p));
}

}  // namespace zeroplan::bench
