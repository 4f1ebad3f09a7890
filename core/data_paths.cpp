#include "core/data_paths.h"

#include <cstdlib>

#ifndef ZEROPLAN_SOURCE_DATA_DIR
#error "ZEROPLAN_SOURCE_DATA_DIR must name the source tree (core/CMakeLists.txt defines it)"
#endif

namespace zeroplan {

std::filesystem::path data_directory() {
  // An installed or relocated binary points at its data with $ZEROPLAN_DATA_DIR; a build tree uses its sources.
  if (const char* override_dir = std::getenv("ZEROPLAN_DATA_DIR"); override_dir && *override_dir) {
    return std::filesystem::path(override_dir);
  }
  return std::filesystem::path(ZEROPLAN_SOURCE_DATA_DIR);
}

std::filesystem::path bundled_models_directory() { return data_directory() / "models"; }

std::filesystem::path bundled_clusters_directory() { return data_directory() / "configs" / "clusters"; }

}  // namespace zeroplan
