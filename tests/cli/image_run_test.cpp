// `zeroplan run` on a layer-list image classifier: the bundled ResNet-101 description on CIFAR-format files
// (written here: a label byte and 3,072 pixel bytes per image) on the CPU backend, with --eval; torchvision-named
// weights in and gradients out against NumPy; and what is not built for layer lists yet refused by name, exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_support.h"

namespace zeroplan {
using namespace zeroplan_test;
namespace {

// CIFAR-10's binary layout: per image one label byte, then the red, green and blue 32x32 planes.
std::filesystem::path write_cifar(const std::string& name, int images_per_file) {
  const std::filesystem::path dir = fresh(name);
  std::filesystem::create_directories(dir);
  std::uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (const std::string file : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                                 "data_batch_5.bin", "test_batch.bin"}) {
    std::ofstream out(dir / file, std::ios::binary);
    for (int i = 0; i < images_per_file; ++i) {
      const unsigned char label = static_cast<unsigned char>(next() % 10);
      out.put(static_cast<char>(label));
      for (int c = 0; c < 3; ++c)
        for (int p = 0; p < 1024; ++p) out.put(static_cast<char>((label * 25 * (c + 1) + next() % 32) & 0xFF));
    }
  }
  return dir;
}

TEST(ImageRun, ResNet101TrainsOnCifarFilesAndReportsTestAccuracy) {
  const std::filesystem::path data = write_cifar("cifar_ok", 8);
  const CommandResult r =
      run("run --model resnet101 --backend cpu --data " + data.string() + " --micro-batch 4 --steps 2 --stage 3 --eval");
  ASSERT_EQ(r.status, 0) << r.output << r.errors;
  EXPECT_NE(r.output.find("CIFAR-10 train split"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step    2/2 | loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| acc "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("samples/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test accuracy "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of 8 images of CIFAR-10 test split"), std::string::npos) << r.output;
}

// --init-from a torchvision state_dict and --save-grads on a small layer list, against NumPy
// (tests/cli/layer_list_reference.py: step 1's loss within 1e-5, gradients within 1e-4 relative L2, the evaluation
// loss with the checkpoint's BatchNorm running statistics, and bad checkpoints refused in one line), at stages 0
// and 3.
TEST(ImageRun, TorchvisionWeightsInGiveNumPysLossAndGradients) {
  for (const char* stage : {"0", "3"}) {
    const CommandResult r = run_command("/usr/bin/python3 " + std::string(ZEROPLAN_SOURCE_DIR) +
                                        "/tests/cli/layer_list_reference.py " + ZEROPLAN_BINARY + " " +
                                        fresh(std::string("layer_list_reference_") + stage).string() + " " + stage);
    EXPECT_EQ(r.status, 0) << "stage " << stage << ":\n" << r.output << r.errors;
    EXPECT_NE(r.output.find("gradient conv1.weight"), std::string::npos) << r.output << r.errors;
  }
}

// Checkpoints of a layer list carry its BatchNorm running statistics: saved at step 2 and resumed to step 4 (on
// the CIFAR files, whose stream position is saved too), the run ends with the uninterrupted run's losses and state
// bit for bit, the evaluation (which reads the running statistics) equal; at stages 0 and 3. A checkpoint whose
// buffers file is damaged is refused by name.
TEST(ImageRun, CheckpointsResumeALayerListBitForBit) {
  const std::filesystem::path data = write_cifar("cifar_ck", 8);
  for (const char* stage : {"0", "3"}) {
    const std::string base = "run --model resnet101 --backend cpu --micro-batch 2 --data " + data.string() +
                             " --stage " + stage + " --deterministic --warmup-steps 0 --eval";
    const std::filesystem::path whole = fresh(std::string("ck_whole_") + stage),
                                parts = fresh(std::string("ck_parts_") + stage);
    const CommandResult a = run(base + " --steps 4 --save-dir " + whole.string() + " --report " +
                                (whole.string() + ".json"));
    ASSERT_EQ(a.status, 0) << a.output << a.errors;
    ASSERT_EQ(run(base + " --steps 2 --save-dir " + parts.string()).status, 0);
    const CommandResult b = run(base + " --steps 4 --resume " + parts.string() + " --save-dir " + parts.string() +
                                " --report " + (parts.string() + ".json"));
    ASSERT_EQ(b.status, 0) << b.output << b.errors;
    const auto losses = [](const std::filesystem::path& report) {
      std::ifstream in(report);
      return nlohmann::json::parse(in).at("measured").at("loss");
    };
    const nlohmann::json all = losses(whole.string() + ".json"), resumed = losses(parts.string() + ".json");
    ASSERT_EQ(resumed.size(), 2u);
    EXPECT_EQ(resumed[0], all[2]) << "stage " << stage;
    EXPECT_EQ(resumed[1], all[3]) << "stage " << stage;
    for (const char* file : {"rank-00000.bin", "buffers.bin"}) {
      std::ifstream x(whole / "step-00000004" / file, std::ios::binary), y(parts / "step-00000004" / file, std::ios::binary);
      const std::string bx((std::istreambuf_iterator<char>(x)), {}), by((std::istreambuf_iterator<char>(y)), {});
      EXPECT_FALSE(bx.empty()) << file;
      EXPECT_TRUE(bx == by) << file << " differs after resuming (stage " << stage << ")";
    }
    const auto accuracy = [](const std::string& out) {
      const std::size_t at = out.find("test accuracy");
      return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
    };
    EXPECT_FALSE(accuracy(a.output).empty()) << a.output;
    EXPECT_EQ(accuracy(a.output), accuracy(b.output));
    if (std::string(stage) == "0") {
      // A checkpoint that lists its tensors in another order (written before each layer's tensors were placed
      // largest first) restores the same: its segments name their tensors. Resumed from step 2 with the list
      // reversed, the run ends where the uninterrupted one did.
      const std::filesystem::path reordered = fresh("ck_reordered");
      ASSERT_EQ(run(base + " --steps 2 --save-dir " + reordered.string()).status, 0);
      const std::filesystem::path manifest = reordered / "step-00000002" / "manifest.json";
      nlohmann::json m;
      {
        std::ifstream in(manifest);
        m = nlohmann::json::parse(in);
      }
      nlohmann::json& tensors = m.at("network_tensors");
      ASSERT_GT(tensors.size(), 1u);
      std::reverse(tensors.begin(), tensors.end());
      std::ofstream(manifest) << m.dump(2);
      const CommandResult c = run(base + " --steps 4 --resume " + reordered.string() + " --report " +
                                  (reordered.string() + ".json"));
      ASSERT_EQ(c.status, 0) << c.output << c.errors;
      const nlohmann::json again = losses(reordered.string() + ".json");
      ASSERT_EQ(again.size(), 2u);
      EXPECT_EQ(again[1], all[3]);
    }
    if (std::string(stage) == "3") {
      {
        std::ofstream(parts / "step-00000004" / "buffers.bin", std::ios::binary | std::ios::in) << "xx";
      }
      const CommandResult bad = run(base + " --steps 6 --resume " + parts.string());
      EXPECT_EQ(bad.status, 2) << bad.output << bad.errors;
      EXPECT_NE(bad.errors.find("buffers.bin"), std::string::npos) << bad.errors;
      EXPECT_NE(bad.errors.find("CRC-32"), std::string::npos) << bad.errors;
    }
  }
}

TEST(ImageRun, BadImageRunsAreRefusedByName) {
  const std::filesystem::path data = write_cifar("cifar_refusals", 2);
  const auto refused = [](const std::string& args, const std::string& field, const std::string& what) {
    const CommandResult r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output << r.errors;
    EXPECT_NE(r.errors.find(field), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find(what), std::string::npos) << r.errors;
    EXPECT_EQ(r.errors.find('\n'), r.errors.size() - 1) << "one line: " << r.errors;
  };
  refused("run --model resnet101 --backend cpu --steps 2 --eval", "--eval", "needs --data");
  refused("run --model resnet101 --backend cpu --steps 2 --augment", "--augment", "needs --data");
  refused("run --model gpt2-124m --backend cpu --steps 2 --augment", "--augment", "transformer");
  // --augment takes torchvision's CIFAR recipe, and the run says so where it names its data.
  {
    const CommandResult r = run("run --model resnet101 --backend cpu --data " + data.string() +
                                " --micro-batch 2 --steps 1 --augment");
    EXPECT_EQ(r.status, 0) << r.output << r.errors;
    EXPECT_NE(r.output.find("RandomCrop(32, padding=4), RandomHorizontalFlip(), ToTensor()"), std::string::npos)
        << r.output;
  }
  refused("run --model gpt2-124m --backend cpu --steps 2 --eval", "--eval", "transformer");
  // A truncated CIFAR file: the file and the record.
  {
    std::ofstream(data / "data_batch_2.bin", std::ios::binary | std::ios::trunc) << std::string(5000, 'x');
  }
  refused("run --model resnet101 --backend cpu --steps 2 --data " + data.string(), "data_batch_2.bin", "record 1");
}

}  // namespace
}  // namespace zeroplan
