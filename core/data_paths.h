// Where bundled data (models/, configs/) is found: $ZEROPLAN_DATA_DIR when set, else the source tree the
// program was built from (compile definition ZEROPLAN_SOURCE_DATA_DIR).
#pragma once

#include <filesystem>

namespace zeroplan {

std::filesystem::path data_directory();
std::filesystem::path bundled_models_directory();    // data_directory()/models
std::filesystem::path bundled_clusters_directory();  // data_directory()/configs/clusters

}  // namespace zeroplan
