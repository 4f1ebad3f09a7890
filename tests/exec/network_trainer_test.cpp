// The CPU trainer of a layer-list network (exec/cpu/cpu_network_trainer.cpp): the bundled ResNet-101 description
// trains a step; a small residual network's gradients equal finite differences of its loss (the graph's wiring:
// residual adds, pooling, BatchNorm, convolutions, the head); and it learns a CIFAR-format set whose class decides a
// colour pattern (exec/image_data.h write_synthetic_cifar).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "core/model_description.h"
#include "exec/image_data.h"
#include "exec/init_rng.h"
#include "exec/trainer.h"

namespace zeroplan::exec {
namespace {

NetworkShape network_of(const ModelDescription& model) {
  NetworkShape n;
  for (const LayerDescription& layer : model.layers) {
    n.layer_names.push_back(layer.name);
    n.layers.push_back(layer.ops);
  }
  n.input = *model.input_shape;
  n.classes = model.classes;
  return n;
}

LayerOp conv(const std::string& name, const std::string& in, const std::string& out, std::int64_t cin,
             std::int64_t cout, std::int64_t k, std::int64_t stride, std::int64_t padding) {
  LayerOp op;
  op.kind = LayerOpKind::conv2d;
  op.name = name;
  op.inputs = {in};
  op.output = out;
  op.in_channels = cin;
  op.out_channels = cout;
  op.kernel = k;
  op.stride = stride;
  op.padding = padding;
  return op;
}
LayerOp simple(LayerOpKind kind, const std::string& in, const std::string& out, const std::string& name = "") {
  LayerOp op;
  op.kind = kind;
  op.name = name;
  op.inputs = {in};
  op.output = out;
  return op;
}
LayerOp bn(const std::string& name, const std::string& tensor, std::int64_t channels) {
  LayerOp op = simple(LayerOpKind::batch_norm, tensor, tensor, name);
  op.channels = channels;
  return op;
}

// A small ResNet: stem conv 3x3/2 + BN + ReLU + max pool 2/2, one basic residual block, global pool and fc.
NetworkShape small_resnet(std::int64_t side, std::int64_t width) {
  NetworkShape n;
  n.input = TensorShape{3, side, side};
  n.classes = 10;
  LayerOp pool = simple(LayerOpKind::max_pool2d, "stem", "stem.pool");
  pool.kernel = pool.stride = 2;
  n.layer_names = {"stem", "block", "head"};
  n.layers.push_back({conv("conv1", "input", "stem", 3, width, 3, 2, 1), bn("bn1", "stem", width),
                      simple(LayerOpKind::relu, "stem", "stem"), pool});
  LayerOp add = simple(LayerOpKind::add, "block.b", "block.out");
  add.inputs = {"block.b", "stem.pool"};
  n.layers.push_back({conv("block.conv1", "stem.pool", "block.a", width, width, 3, 1, 1), bn("block.bn1", "block.a", width),
                      simple(LayerOpKind::relu, "block.a", "block.a"),
                      conv("block.conv2", "block.a", "block.b", width, width, 3, 1, 1), bn("block.bn2", "block.b", width),
                      add, simple(LayerOpKind::relu, "block.out", "block.out")});
  LayerOp fc = simple(LayerOpKind::linear, "head.features", "logits", "fc");
  fc.in_features = width;
  fc.out_features = 10;
  fc.bias = true;
  n.layers.push_back({simple(LayerOpKind::adaptive_avg_pool2d, "block.out", "head.pool"),
                      simple(LayerOpKind::flatten, "head.pool", "head.features"), fc});
  return n;
}

ExecConfig network_config(NetworkShape network, std::int64_t micro_batch, double lr) {
  ExecConfig c;
  c.network = std::move(network);
  c.micro_batch = micro_batch;
  c.precision = ExecPrecision::fp32;
  c.optimizer.learning_rate = lr;
  c.optimizer.weight_decay = 0.0;
  c.optimizer.grad_clip = 0.0;
  c.seed = 3;
  return c;
}

// Images in [-1, 1) and labels from a seed.
void random_batch(const NetworkShape& n, std::int64_t count, std::uint64_t seed, std::vector<float>& images,
                  std::vector<std::int32_t>& labels) {
  images.resize(static_cast<std::size_t>(count * n.input.elements()));
  labels.resize(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < images.size(); ++i) images[i] = hash_uniform(seed, i);
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int32_t>(splitmix64(seed ^ (i + 1000003)) % static_cast<std::uint64_t>(n.classes));
}

TEST(NetworkTrainer, BundledResNet101TrainsAStepOnTheCpu) {
  const ModelDescription model = load_model("resnet101");
  ASSERT_TRUE(model.has_ops());
  const ExecConfig c = network_config(network_of(model), 2, 1e-3);
  auto trainer = make_cpu_trainer(c);
  std::int64_t params = 0;
  for (const ParamTensor& t : trainer->layout().tensors()) params += t.numel();
  EXPECT_EQ(params, model.params());  // the description's parameters are the ones partitioned
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  random_batch(*c.network, 2, 7, images, labels);
  const StepResult a = trainer->step_images(images, labels);
  // A fresh network's loss is near ln(10) (torchvision's init: small logits from the fc layer).
  EXPECT_TRUE(std::isfinite(a.loss));
  EXPECT_NEAR(a.loss, std::log(10.0), 1.0);
  EXPECT_GE(a.correct, 0);
  EXPECT_LE(a.correct, 2);
  EXPECT_GT(a.grad_norm, 0);
  const StepResult b = trainer->step_images(images, labels);
  EXPECT_NE(a.loss, b.loss);
}

// Central differences of the loss against the trainer's gradients, for elements of every kind of tensor (conv
// weights before and after the residual add, BatchNorm weight and bias, the fc's weight and bias): every element
// of the small ones, a third of the way apart in the others. h = 1e-3: at 1e-2 the ReLUs and max pool after a
// BatchNorm cross their kinks and the differences of its last channel missed by 20-30%. AdamW with lr 0
// leaves the parameters as they were, so each step only measures; BatchNorm in training mode uses the batch's own
// statistics, so the running ones it updates do not change the loss.
TEST(NetworkTrainer, GradientsEqualFiniteDifferencesOfTheLoss) {
  const ExecConfig c = network_config(small_resnet(12, 4), 4, 0.0);
  auto trainer = make_cpu_trainer(c);
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  random_batch(*c.network, 4, 11, images, labels);
  trainer->step_images(images, labels);
  const std::vector<float> grads = trainer->grads();
  const std::vector<float> base = trainer->params();
  int checked = 0;
  for (const ParamTensor& t : trainer->layout().tensors()) {
    for (std::int64_t i = 0; i < t.numel(); i += (t.numel() > 8 ? t.numel() / 3 : 1)) {
      const std::int64_t at = t.offset + i;
      const float h = 1e-3f;
      std::vector<float> p = base;
      p[at] = base[at] + h;
      trainer->set_params(p);
      const double up = trainer->step_images(images, labels).loss;
      p[at] = base[at] - h;
      trainer->set_params(p);
      const double down = trainer->step_images(images, labels).loss;
      const double fd = (up - down) / (2.0 * h);
      EXPECT_NEAR(grads[at], fd, 2e-3 + 5e-2 * std::fabs(fd)) << t.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 3 * static_cast<int>(trainer->layout().tensors().size()));
}

// The learnable CIFAR-format set (class k: its own colour and stripes, per-pixel noise), DeepSpeed's normalisation,
// batches of 32: the small network reaches 95% accuracy on a training batch within 40 steps (measured: step 8; see the
// printed step).
TEST(NetworkTrainer, LearnsTheSyntheticCifarSet) {
  const std::string dir = ::testing::TempDir() + "/network_trainer_cifar";
  std::filesystem::remove_all(dir);
  write_synthetic_cifar(dir, 200, 50, 5);
  CifarDataset data = CifarDataset::open(dir, CifarSplit::train);
  ExecConfig c = network_config(small_resnet(32, 16), 32, 1e-2);
  auto trainer = make_cpu_trainer(c);
  int reached = -1;
  for (int step = 0; step < 40 && reached < 0; ++step) {
    const ImageBatch b = data.next_batch(32);
    const StepResult r = trainer->step_images(b.images, b.labels);
    if (r.correct >= 31) reached = step;  // 31 of 32 = 96.9%
  }
  std::printf("  95%% of a batch of 32 first reached at step %d\n", reached);
  EXPECT_GE(reached, 0) << "the network did not learn the set in 40 steps";
}

}  // namespace
}  // namespace zeroplan::exec

namespace zeroplan::exec {
namespace {

// A rank's chunk initializes from its range alone (ParamLayout::initialize_range, what CpuZeroDevice does per
// bucket chunk) with the values the whole buffer's initialization gives there: transformer and layer-list layouts,
// aligned for 4 ranks, ranges cutting tensors anywhere.
TEST(ParamLayoutInit, ARangeEqualsTheWholeBuffersSlice) {
  ModelShape llama = make_llama_shape(256, 64, 2, 4, 2, 160, 32);
  llama.qkv_bias = true;
  const ParamLayout layouts[] = {ParamLayout(make_shape(257, 64, 2, 2, 32), 256), ParamLayout(llama, 256),
                                 ParamLayout(small_resnet(12, 4), 256)};
  for (const ParamLayout& layout : layouts) {
    std::vector<float> whole(static_cast<std::size_t>(layout.total()));
    layout.initialize(9, whole.data());
    for (const auto& [begin, n] : {std::pair<std::int64_t, std::int64_t>{0, layout.total()},
                                   {1, 333},
                                   {layout.total() / 3, layout.total() / 3},
                                   {layout.total() - 77, 77}}) {
      std::vector<float> range(static_cast<std::size_t>(n));
      layout.initialize_range(9, begin, n, range.data());
      EXPECT_TRUE(std::equal(range.begin(), range.end(), whole.begin() + begin)) << "range " << begin << " + " << n;
    }
  }
}

}  // namespace
}  // namespace zeroplan::exec
