// A layer-list image classifier's data and evaluation in `zeroplan run` (run/training_run.cpp): images drawn from a
// seed when no --data is given, and --eval's accuracy on CIFAR-10's test split.
#pragma once

#include <cstdint>
#include <string>

#include "exec/comm/communicator.h"
#include "exec/exec_config.h"
#include "exec/image_data.h"
#include "exec/trainer.h"

namespace zeroplan {

// `count` images in [-1, 1) and labels, from (seed, draw): the same on every run, each draw different.
exec::ImageBatch synthetic_images(const exec::NetworkShape& network, std::int64_t count, std::uint64_t seed,
                                  std::int64_t draw);

struct TestAccuracy {
  std::int64_t correct = 0, images = 0, left_out = 0;
  double loss = 0;  // mean cross-entropy over the images evaluated
  std::string description;
};
// CIFAR-10's test split under `dir`, each rank its share of every micro_batch x world images, BatchNorm from the
// rank's running statistics (torch's eval mode); the images past the last whole global batch are left out. `comm`
// (null at one rank) sums the ranks' counts. Throws InputError naming --eval for a bad test file.
TestAccuracy evaluate_test_split(const std::string& dir, exec::Trainer& trainer, std::int64_t micro_batch, int world,
                                 int rank, exec::Communicator* comm);

}  // namespace zeroplan
