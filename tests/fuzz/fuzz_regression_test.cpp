// Every seed of every fuzz target (fuzz/corpus and the repository's own files, fuzz/parser_inputs.cmake) and every
// input a fuzzer failed on, fed to its parser as the fuzzer fed it (fuzz/parser_inputs.h): each reads cleanly or
// ends in an InputError naming its source. Each finding also has its own test below, checking what its fix does.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/cluster_description.h"
#include "core/input_error.h"
#include "core/json_input.h"
#include "fuzz/parser_inputs.h"

namespace zeroplan::fuzz {
namespace {

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::vector<std::filesystem::path> files_in(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::is_directory(directory)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

enum class Outcome { accepted, refused };

// Feeds one file; a failure names the file. An exception other than InputError fails the test.
Outcome feed_file(const ParserInput& input, const std::filesystem::path& file) {
  try {
    input.feed(read_bytes(file));
    return Outcome::accepted;
  } catch (const InputError& error) {
    EXPECT_FALSE(error.source().empty()) << file << ": an InputError without a source: " << error.what();
    return Outcome::refused;
  }
}

// fuzz-targets.txt (fuzz/parser_inputs.cmake): per line a target's name, then its seed folders.
std::map<std::string, std::vector<std::filesystem::path>> seed_folders() {
  std::map<std::string, std::vector<std::filesystem::path>> folders;
  std::istringstream lines(read_bytes(ZEROPLAN_FUZZ_TARGETS_FILE));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    for (std::string folder; words >> folder;) folders[name].push_back(folder);
  }
  return folders;
}

// The CMake list of targets (what scripts/fuzz.sh runs) and the table of feeds name the same parsers.
TEST(FuzzTargets, EveryTargetHasAFeedAndEveryFeedATarget) {
  const auto folders = seed_folders();
  std::vector<std::string> targets;
  for (const auto& [name, unused] : folders) targets.push_back(name);
  std::vector<std::string> feeds;
  for (const auto& input : parser_inputs()) feeds.push_back(input.name);
  std::sort(feeds.begin(), feeds.end());
  EXPECT_EQ(targets, feeds);
}

class ParserInputs : public testing::TestWithParam<std::string> {};

TEST_P(ParserInputs, EverySeedReadsCleanlyAndSomeAreAccepted) {
  const ParserInput& input = parser_input(GetParam());
  const auto folders = seed_folders();
  ASSERT_TRUE(folders.count(input.name)) << input.name << " is not in fuzz-targets.txt";
  std::vector<std::filesystem::path> seeds;
  for (const auto& folder : folders.at(input.name)) {
    const auto files = files_in(folder);
    seeds.insert(seeds.end(), files.begin(), files.end());
  }
  ASSERT_FALSE(seeds.empty()) << "no seeds for " << input.name << " (fuzz-targets.txt)";
  int accepted = 0;
  for (const auto& seed : seeds) {
    SCOPED_TRACE(seed.string());
    if (feed_file(input, seed) == Outcome::accepted) ++accepted;
  }
  // A corpus of refused files would only fuzz the error paths: the valid seeds must stay valid.
  EXPECT_GT(accepted, 0) << "every seed of " << input.name << " is refused";
}

TEST_P(ParserInputs, EveryKeptFuzzerFindingReadsCleanly) {
  const ParserInput& input = parser_input(GetParam());
  for (const auto& finding : files_in(std::filesystem::path(ZEROPLAN_FUZZ_REGRESSION_DIR) / input.name)) {
    SCOPED_TRACE(finding.string());
    feed_file(input, finding);
  }
}

// Found by the cluster_description target (its round trip): cluster_to_json wrote an "intra_node" link of
// bandwidth 0 for a node of one GPU, which cluster_from_json refuses. Such a cluster now reads back.
TEST(FuzzFindings, ClusterOfOneGpuPerNodeReadsBackWhatItWrites) {
  const std::filesystem::path file =
      std::filesystem::path(ZEROPLAN_FUZZ_REGRESSION_DIR) / "cluster_description" / "one-gpu-per-node-round-trip.json";
  for (const ClusterDescription& cluster :
       {cluster_from_json(read_json_file(file), file.string()), load_cluster("rtx4090")}) {
    SCOPED_TRACE(cluster.name);
    ASSERT_EQ(cluster.gpus_per_node, 1);
    const nlohmann::json written = cluster_to_json(cluster);
    EXPECT_FALSE(written.contains("intra_node"));
    const ClusterDescription again = cluster_from_json(written, "written.json");
    EXPECT_EQ(again.total_gpus(), 1);
    EXPECT_EQ(again.gpu_memory_bytes, cluster.gpu_memory_bytes);
    EXPECT_EQ(again.intra_node.bus_bandwidth, 0.0);
  }
}

// Found by reading run/checkpoint.cpp, confirmed by UBSan through the checkpoint_manifest target: a segment at
// tensor_offset 2^63 - 8 made read() overflow tensor_offset + count (signed overflow, undefined). The manifest is
// now refused when it is read, naming the segment.
TEST(FuzzFindings, CheckpointSegmentPastAnyTensorIsRefused) {
  const std::filesystem::path file =
      std::filesystem::path(ZEROPLAN_FUZZ_REGRESSION_DIR) / "checkpoint_manifest" / "segment-end-overflows.json";
  try {
    parser_input("checkpoint_manifest").feed(read_bytes(file));
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("manifest.json"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("files[0].segments"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("wpe ends past element 2^58"), std::string::npos) << error.what();
  }
}

// Found by the checkpoint_manifest target in a 10-minute run (scripts/fuzz.sh 600, 2026-11-23): pieces of wte at
// [1, 17) and [16, 32) overlap, so read() of [0, 17) counted 17 elements covered and left element 0 unwritten.
// Overlapping pieces are now refused when the manifest is read, naming the tensor and both files.
TEST(FuzzFindings, OverlappingCheckpointPiecesAreRefused) {
  const std::filesystem::path file =
      std::filesystem::path(ZEROPLAN_FUZZ_REGRESSION_DIR) / "checkpoint_manifest" / "segments-overlap.json";
  try {
    parser_input("checkpoint_manifest").feed(read_bytes(file));
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("manifest.json"), std::string::npos) << what;
    EXPECT_NE(what.find("pieces of wte overlap: elements [1, 17) in rank-00000.bin and [16, 32) in rank-00001.bin"),
              std::string::npos)
        << what;
  }
}

std::vector<std::string> parser_names() {
  std::vector<std::string> names;
  for (const auto& input : parser_inputs()) names.push_back(input.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Fuzz, ParserInputs, testing::ValuesIn(parser_names()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace zeroplan::fuzz
