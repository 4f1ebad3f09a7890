// Checkpoints end to end on the CPU backend (MPI ranks): a resumed run equals an uninterrupted one bit for bit
// at every stage on 1 and 2 ranks, a checkpoint reshards to another world size and stage, damaged files are
// refused by name, nothing complete is overwritten, and the safetensors export is read back by the
// `safetensors` package (tests/cli/export_check.py, Debian's /usr/bin/python3).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"

using namespace zeroplan_test;
namespace fs = std::filesystem;

namespace {

const std::string& kTiny = kTinyGpt2;

std::string run_args(int ranks, int stage, int grad_accum) {
  return "run --model " + kTiny + " --backend cpu --gpus " + std::to_string(ranks) + " --stage " +
         std::to_string(stage) + " --micro-batch 2 --seq 32 --grad-accum " + std::to_string(grad_accum) +
         " --precision fp32 --warmup-steps 0 --lr 3e-3";
}

std::vector<double> losses(const fs::path& report) {
  const nlohmann::json doc = nlohmann::json::parse(read_file(report));
  return doc.at("measured").at("loss").get<std::vector<double>>();
}

// name -> fp32 values of a safetensors file written with --dtype fp32.
std::map<std::string, std::vector<float>> read_safetensors(const fs::path& path) {
  const std::string raw = bytes_of(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  const nlohmann::json header = nlohmann::json::parse(raw.substr(8, n));
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const auto offsets = info.at("data_offsets").get<std::vector<std::int64_t>>();
    std::vector<float> values(static_cast<std::size_t>((offsets[1] - offsets[0]) / 4));
    std::memcpy(values.data(), raw.data() + 8 + n + offsets[0], values.size() * 4);
    out[name] = values;
  }
  return out;
}

}  // namespace

TEST(Checkpoints, ResumeEqualsAnUninterruptedRunBitForBit) {
  for (int ranks : {1, 2})
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("ranks " + std::to_string(ranks) + ", stage " + std::to_string(stage));
      const fs::path whole = fresh("whole"), parts = fresh("parts");
      const fs::path r_whole = temp_dir() / "whole.json", r_parts = temp_dir() / "parts.json";
      const std::string args = run_args(ranks, stage, 2);
      CommandResult a = run(args + " --steps 6 --save-dir " + whole.string() + " --report " + r_whole.string());
      ASSERT_EQ(a.status, 0) << a.output << a.errors;
      CommandResult b = run(args + " --steps 3 --save-every 3 --save-dir " + parts.string());
      ASSERT_EQ(b.status, 0) << b.output << b.errors;
      CommandResult c = run(args + " --steps 6 --resume " + parts.string() + " --save-dir " + parts.string() +
                            " --report " + r_parts.string());
      ASSERT_EQ(c.status, 0) << c.output << c.errors;
      EXPECT_NE(c.output.find("resumed from"), std::string::npos) << c.output;
      const auto la = losses(r_whole), lc = losses(r_parts);
      ASSERT_EQ(la.size(), 6u);
      ASSERT_EQ(lc.size(), 3u);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(la[3 + i], lc[i]) << "loss of step " << 4 + i;
      // Same world and stage: every rank's states are the same bytes.
      for (int r = 0; r < ranks; ++r) {
        const std::string name = rank_file(r);
        EXPECT_EQ(bytes_of(whole / "step-00000006" / name), bytes_of(parts / "step-00000006" / name)) << name;
      }
    }
}

TEST(Checkpoints, ReshardsBetweenWorldSizesAndStages) {
  // The same global batch (4 rows per step) on 1 rank x 2 micro-steps and on 2 ranks x 1: a checkpoint of
  // either continues on the other, at another stage, and ends where the uninterrupted 1-rank run ends
  // (fp32 reassociation of the gradient sums only).
  const fs::path reference = fresh("ref"), from_two = fresh("from_two"), from_one = fresh("from_one");
  const fs::path report = temp_dir() / "ref.json";
  ASSERT_EQ(run(run_args(1, 0, 2) + " --steps 6 --save-dir " + reference.string() + " --report " + report.string()).status, 0);
  ASSERT_EQ(run(run_args(2, 2, 1) + " --steps 3 --save-dir " + from_two.string()).status, 0);
  CommandResult to_one = run(run_args(1, 1, 2) + " --steps 6 --resume " + from_two.string() + " --save-dir " + from_two.string());
  ASSERT_EQ(to_one.status, 0) << to_one.output << to_one.errors;
  ASSERT_EQ(run(run_args(1, 3, 2) + " --steps 3 --save-dir " + from_one.string()).status, 0);
  CommandResult to_two = run(run_args(2, 3, 1) + " --steps 6 --resume " + from_one.string() + " --save-dir " + from_one.string());
  ASSERT_EQ(to_two.status, 0) << to_two.output << to_two.errors;

  const fs::path ref_st = temp_dir() / "ref.safetensors";
  ASSERT_EQ(run("export --checkpoint " + reference.string() + " --out " + ref_st.string()).status, 0);
  const auto want = read_safetensors(ref_st);
  for (const fs::path& dir : {from_two, from_one}) {
    const fs::path st = temp_dir() / (dir.filename().string() + ".safetensors");
    CommandResult e = run("export --checkpoint " + dir.string() + " --out " + st.string());
    ASSERT_EQ(e.status, 0) << e.errors;
    const auto got = read_safetensors(st);
    ASSERT_EQ(got.size(), want.size());
    double diff = 0, ref = 0;
    for (const auto& [name, values] : want) {
      const auto& other = got.at(name);
      ASSERT_EQ(other.size(), values.size()) << name;
      for (std::size_t i = 0; i < values.size(); ++i) {
        diff += (static_cast<double>(other[i]) - values[i]) * (static_cast<double>(other[i]) - values[i]);
        ref += static_cast<double>(values[i]) * values[i];
      }
    }
    // As in tests/exec/test_zero_mpi.cpp: reassociated fp32 gradient sums, amplified by AdamW, stay < 1e-5.
    EXPECT_LT(std::sqrt(diff / ref), 1e-5) << dir;
  }
}

TEST(Checkpoints, DamagedOrIncompleteCheckpointsAreRefusedByName) {
  const fs::path dir = fresh("damaged");
  ASSERT_EQ(run(run_args(2, 2, 1) + " --steps 2 --save-dir " + dir.string()).status, 0);
  const fs::path step = dir / "step-00000002";
  const fs::path shard = step / "rank-00001.bin";
  const std::string good = bytes_of(shard);

  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << flipped;
  expect_one_line_error(run(run_args(2, 2, 1) + " --steps 4 --resume " + dir.string()), {shard.string(), "CRC-32"});

  std::ofstream(shard, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() - 100);
  expect_one_line_error(run(run_args(2, 2, 1) + " --steps 4 --resume " + dir.string()), {shard.string(), "truncated"});

  std::ofstream(shard, std::ios::binary | std::ios::trunc) << good;
  // A save that died before its manifest is not a checkpoint.
  fs::rename(step / "manifest.json", step / "manifest.json.tmp");
  expect_one_line_error(run(run_args(2, 2, 1) + " --steps 4 --resume " + dir.string()),
                        {dir.string(), "no complete checkpoint"});
  fs::rename(step / "manifest.json.tmp", step / "manifest.json");

  // Nothing complete is overwritten; a checkpoint of another model is refused.
  expect_one_line_error(run(run_args(2, 2, 1) + " --steps 2 --save-dir " + dir.string()), {"--save-dir", "already holds"});
  expect_one_line_error(run("run --model gpt2-124m --backend cpu --micro-batch 1 --seq 32 --steps 4 --resume " + dir.string()),
                        {"this run's model differs"});
  expect_one_line_error(run(run_args(1, 0, 1) + " --steps 2 --resume " + dir.string()), {"--steps"});
  expect_one_line_error(run(run_args(1, 0, 1) + " --steps 4 --save-every 2"), {"--save-every", "--save-dir"});
  expect_one_line_error(run("export --checkpoint " + dir.string() + " --out /tmp/x.safetensors --dtype int8"), {"--dtype"});
}

TEST(Checkpoints, ExportIsReadBackByTheSafetensorsPackage) {
  const fs::path dir = fresh("export");
  ASSERT_EQ(run(run_args(2, 3, 1) + " --steps 2 --save-dir " + dir.string()).status, 0);
  for (const char* dtype : {"fp32", "bf16"}) {
    const fs::path out = temp_dir() / (std::string("model-") + dtype + ".safetensors");
    CommandResult e = run("export --checkpoint " + dir.string() + " --out " + out.string() + " --dtype " + dtype);
    ASSERT_EQ(e.status, 0) << e.errors;
    const CommandResult check = run_command("/usr/bin/python3 " + std::string(ZEROPLAN_SOURCE_DIR) +
                                            "/tests/cli/export_check.py " + (dir / "step-00000002").string() + " " +
                                            out.string() + " " + dtype);
    EXPECT_EQ(check.status, 0) << check.output << check.errors;
    EXPECT_NE(check.output.find("tensors equal"), std::string::npos) << check.output << check.errors;
  }
}
