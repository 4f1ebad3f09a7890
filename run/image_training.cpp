#include "run/image_training.h"

#include <stdexcept>

#include "core/input_error.h"
#include "exec/init_rng.h"

namespace zeroplan {

exec::ImageBatch synthetic_images(const exec::NetworkShape& network, std::int64_t count, std::uint64_t seed,
                                  std::int64_t draw) {
  exec::ImageBatch b;
  b.batch = count;
  const std::uint64_t stream = exec::splitmix64(seed ^ exec::splitmix64(static_cast<std::uint64_t>(draw)));
  b.images.resize(static_cast<std::size_t>(count * network.input.elements()));
  b.labels.resize(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < b.images.size(); ++i) b.images[i] = exec::hash_uniform(stream, i);
  for (std::size_t i = 0; i < b.labels.size(); ++i)
    b.labels[i] = static_cast<std::int32_t>(exec::splitmix64(stream + 0x9E37 + i) %
                                            static_cast<std::uint64_t>(network.classes));
  return b;
}

TestAccuracy evaluate_test_split(const std::string& dir, exec::Trainer& trainer, std::int64_t micro_batch, int world,
                                 int rank, exec::Communicator* comm) {
  exec::CifarDataset test;
  try {
    test = exec::CifarDataset::open(dir, exec::CifarSplit::test, exec::ImageTransforms::deepspeed_cifar());
  } catch (const std::invalid_argument& e) {
    throw InputError(dir, "--eval", e.what());
  }
  const std::int64_t per_step = micro_batch * world, steps = test.size() / per_step;
  double sums[2] = {0, 0};  // loss, correct
  for (std::int64_t s = 0; s < steps; ++s) {
    const exec::ImageBatch b = exec::next_rank_share(test, micro_batch, 1, world, rank);
    std::int64_t correct = 0;
    sums[0] += trainer.evaluate_images(b.images, b.labels, correct);
    sums[1] += static_cast<double>(correct);
  }
  if (comm) comm->all_reduce_host(sums, 2);
  TestAccuracy a;
  a.images = steps * per_step;
  a.correct = static_cast<std::int64_t>(sums[1] + 0.5);
  a.loss = a.images > 0 ? sums[0] / static_cast<double>(a.images) : 0.0;
  a.left_out = test.size() - a.images;
  a.description = test.description();
  return a;
}

}  // namespace zeroplan
