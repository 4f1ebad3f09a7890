#include "run/host_calibration.h"

#include "run/process_memory.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/input_error.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/offload/cpu_adamw.h"
#include "exec/offload/nvme_io.h"
#include "exec/offload/thread_pool.h"

namespace zeroplan {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Median wall seconds of `work` over `repeats` runs after one untimed run (first-touch page faults, thread start).
template <typename Work>
double time_median(Work&& work, int repeats) {
  work();
  std::vector<double> seconds;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    work();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(std::move(seconds));
}

void require_positive(std::int64_t value, const char* what) {
  if (value < 1) throw std::invalid_argument(std::string(what) + " must be >= 1, got " + std::to_string(value));
}

}  // namespace

HostFacts host_facts() {
  HostFacts facts;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_bytes = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_bytes <= 0 ||
      __builtin_mul_overflow(static_cast<std::int64_t>(pages), static_cast<std::int64_t>(page_bytes),
                             &facts.physical_memory_bytes))
    throw std::runtime_error("cannot read this host's physical memory size (sysconf _SC_PHYS_PAGES)");
  // A plan that fills the physical size is ended by the OOM killer (2x H200, 2026-11-23): the kernel and the
  // system's processes hold the rest.
  facts.memory_bytes = read_available_host_memory();
  facts.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  if (facts.logical_cores < 1) throw std::runtime_error("cannot read this host's core count (hardware_concurrency is 0)");
  facts.cpu_model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) facts.cpu_model = line.substr(colon + 2);
    break;
  }
  return facts;
}

namespace {

// Median seconds of one CpuAdamw update of `parameters` fp32 parameters (bf16 copy written) with `threads` threads.
double cpu_adamw_update_seconds(std::int64_t parameters, int threads, int repeats) {
  require_positive(parameters, "CPU AdamW parameters");
  const auto n = static_cast<std::size_t>(parameters);
  std::vector<float> params(n, 0.02f), grads(n, 1e-3f), exp_avg(n, 0.0f), exp_avg_sq(n, 0.0f);
  std::vector<std::uint16_t> half(n, 0);
  exec::offload::CpuAdamw adamw(threads);
  exec::offload::AdamwTensors t;
  t.params = params.data();
  t.grads = grads.data();
  t.exp_avg = exp_avg.data();
  t.exp_avg_sq = exp_avg_sq.data();
  t.params_half = half.data();
  t.count = parameters;
  exec::offload::AdamwHyper hyper;
  hyper.lr = 1e-4f;
  hyper.weight_decay = 0.1f;
  return time_median(
      [&] {
        adamw.update(t, hyper);
        ++hyper.step;
      },
      repeats);
}

}  // namespace

double cpu_adamw_params_per_second(std::int64_t parameters, int threads, int repeats) {
  return static_cast<double>(parameters) / cpu_adamw_update_seconds(parameters, threads, repeats);
}

double cpu_adamw_call_seconds(int threads, int repeats) {
  // A size whose work is a few hundred nanoseconds per thread: the rest is the call (on one H200 machine, 16
  // threads: 39.0, 34.9, 34.5 us at 1e3, 1e4, 6.5e4 parameters, bench/cpu_adam_benchmark.cpp).
  return cpu_adamw_update_seconds(1024, threads, std::max(repeats, 9));
}

double host_copy_bandwidth(std::int64_t bytes, int threads, int repeats) {
  require_positive(bytes, "host copy bytes");
  std::vector<unsigned char> source(static_cast<std::size_t>(bytes), 1), target(static_cast<std::size_t>(bytes), 0);
  exec::offload::ThreadPool pool(threads);
  const std::int64_t share = (bytes + pool.threads() - 1) / pool.threads();
  const double seconds = time_median(
      [&] {
        pool.run([&](int t) {
          const std::int64_t begin = std::min(bytes, share * t), end = std::min(bytes, begin + share);
          if (end > begin) std::memcpy(target.data() + begin, source.data() + begin, static_cast<std::size_t>(end - begin));
        });
      },
      repeats);
  return 2.0 * static_cast<double>(bytes) / seconds;  // each byte read once and written once
}

DiskRates disk_rates(const std::string& directory, std::int64_t bytes, int repeats) {
  require_positive(bytes, "disk test bytes");
  DiskRates rates;
  std::error_code error;
  const auto space = std::filesystem::space(directory, error);
  if (error) throw InputError(directory, "--nvme-path", "cannot read the free space: " + error.message());
  rates.available_bytes = static_cast<std::int64_t>(space.available);
  if (rates.available_bytes < 2 * bytes)
    throw InputError(directory, "--nvme-path",
                     "has " + std::to_string(rates.available_bytes) + " bytes free; the disk test writes " +
                         std::to_string(bytes) + " bytes and needs twice that free");
  exec::offload::NvmeStoreOptions options;
  options.config_source = "command line";
  options.config_field = "--nvme-path";
  exec::offload::NvmeStore store(directory, /*rank=*/0, options);
  rates.queue_depth = store.queue_depth();
  rates.block_bytes = store.block_bytes();
  exec::offload::DirectIoBuffer buffer(bytes);
  std::memset(buffer.data(), 0x5a, static_cast<std::size_t>(buffer.bytes()));
  const double write_seconds = time_median([&] { store.wait(store.write("calibrate", buffer.data(), bytes)); }, repeats);
  const double read_seconds = time_median([&] { store.wait(store.read("calibrate", buffer.data(), bytes)); }, repeats);
  rates.write_bytes_per_second = static_cast<double>(bytes) / write_seconds;
  rates.read_bytes_per_second = static_cast<double>(bytes) / read_seconds;
  return rates;
}

double cpu_gemm_seconds(std::int64_t m, std::int64_t k, std::int64_t n, bool training_pass, int repeats) {
  require_positive(m, "GEMM M");
  require_positive(k, "GEMM K");
  require_positive(n, "GEMM N");
  const auto size = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); };
  std::vector<float> inp(size(m, k)), w(size(n, k)), out(size(m, n));
  // Values in [-1, 1): the time of a dense fp32 GEMM does not depend on them, but NaNs or denormals would.
  for (std::size_t i = 0; i < inp.size(); ++i) inp[i] = static_cast<float>(i % 251) / 125.5f - 1.0f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 241) / 120.5f - 1.0f;
  std::vector<float> dinp(training_pass ? size(m, k) : 0), dw(training_pass ? size(n, k) : 0);
  return time_median(
      [&] {
        exec::cpu::matmul_forward(out.data(), inp.data(), w.data(), nullptr, m, k, n);
        // `out` stands for the output gradient (the same shape).
        if (training_pass) exec::cpu::matmul_backward(dinp.data(), dw.data(), nullptr, out.data(), inp.data(), w.data(), m, k, n);
      },
      repeats);
}

}  // namespace zeroplan
