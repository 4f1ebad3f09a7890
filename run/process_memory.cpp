#include "run/process_memory.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

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

}  // namespace zeroplan
