// `zeroplan run` on a layer-list image classifier: the bundled ResNet-101 description on CIFAR-format files
// (written here: a label byte and 3,072 pixel bytes per image) on the CPU backend, with --eval; torchvision-named
// weights in and gradients out against NumPy; and what is not built for layer lists yet refused by name, exit 2.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include <sys/wait.h>

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
    const std::string command = "/usr/bin/python3 " + std::string(ZEROPLAN_SOURCE_DIR) +
                                "/tests/cli/layer_list_reference.py " + ZEROPLAN_BINARY + " " +
                                fresh(std::string("layer_list_reference_") + stage).string() + " " + stage + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string text;
    char buffer[4096];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) text.append(buffer, n);
    const int raw = ::pclose(pipe);
    EXPECT_EQ(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, 0) << "stage " << stage << ":\n" << text;
    EXPECT_NE(text.find("gradient conv1.weight"), std::string::npos) << text;
  }
}

TEST(ImageRun, WhatLayerListsCannotDoYetIsRefusedByName) {
  const std::filesystem::path data = write_cifar("cifar_refusals", 2);
  const auto refused = [](const std::string& args, const std::string& field, const std::string& what) {
    const CommandResult r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output << r.errors;
    EXPECT_NE(r.errors.find(field), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find(what), std::string::npos) << r.errors;
    EXPECT_EQ(r.errors.find('\n'), r.errors.size() - 1) << "one line: " << r.errors;
  };
  refused("run --model resnet101 --data " + data.string() + " --steps 2", "--backend", "CPU backend");
  refused("run --model resnet101 --backend cpu --steps 2 --save-dir " + fresh("ck").string(), "--save-dir",
          "BatchNorm running statistics");
  refused("run --model resnet101 --backend cpu --steps 2 --eval", "--eval", "needs --data");
  refused("run --model gpt2-124m --backend cpu --steps 2 --eval", "--eval", "transformer");
  // A truncated CIFAR file: the file and the record.
  {
    std::ofstream(data / "data_batch_2.bin", std::ios::binary | std::ios::trunc) << std::string(5000, 'x');
  }
  refused("run --model resnet101 --backend cpu --steps 2 --data " + data.string(), "data_batch_2.bin", "record 1");
  EXPECT_FALSE(std::filesystem::exists(temp_dir() / "ck"));
}

}  // namespace
}  // namespace zeroplan
