// Small layer-list networks and their inputs, shared by the CPU (network_trainer_test.cpp) and GPU
// (network_cuda_test.cu) tests of the network trainers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_description.h"
#include "exec/exec_config.h"
#include "exec/init_rng.h"

namespace zeroplan::exec {

inline NetworkShape network_of(const ModelDescription& model) {
  NetworkShape n;
  for (const LayerDescription& layer : model.layers) {
    n.layer_names.push_back(layer.name);
    n.layers.push_back(layer.ops);
  }
  n.input = *model.input_shape;
  n.classes = model.classes;
  return n;
}

inline LayerOp conv(const std::string& name, const std::string& in, const std::string& out, std::int64_t cin,
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
inline LayerOp simple(LayerOpKind kind, const std::string& in, const std::string& out, const std::string& name = "") {
  LayerOp op;
  op.kind = kind;
  op.name = name;
  op.inputs = {in};
  op.output = out;
  return op;
}
inline LayerOp bn(const std::string& name, const std::string& tensor, std::int64_t channels) {
  LayerOp op = simple(LayerOpKind::batch_norm, tensor, tensor, name);
  op.channels = channels;
  return op;
}

// A small ResNet: stem conv 3x3/2 + BN + ReLU + max pool 2/2, one basic residual block, global pool and fc.
inline NetworkShape small_resnet(std::int64_t side, std::int64_t width) {
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

inline ExecConfig network_config(NetworkShape network, std::int64_t micro_batch, double lr) {
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
inline void random_batch(const NetworkShape& n, std::int64_t count, std::uint64_t seed, std::vector<float>& images,
                  std::vector<std::int32_t>& labels) {
  images.resize(static_cast<std::size_t>(count * n.input.elements()));
  labels.resize(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < images.size(); ++i) images[i] = hash_uniform(seed, i);
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int32_t>(splitmix64(seed ^ (i + 1000003)) % static_cast<std::uint64_t>(n.classes));
}

// small_resnet with a second, strided block whose shortcut is a 1x1 convolution and BatchNorm (torchvision's
// downsample): the add then reads a tensor only it reads (the plan's transient buffers), as every ResNet stage's
// first block does.
inline NetworkShape small_resnet_with_downsample(std::int64_t side, std::int64_t width) {
  NetworkShape n = small_resnet(side, width);
  std::vector<LayerOp> head = n.layers.back();
  n.layers.pop_back();
  n.layer_names.pop_back();
  const std::int64_t w2 = 2 * width;
  LayerOp add = simple(LayerOpKind::add, "down.b", "down.out");
  add.inputs = {"down.b", "down.short"};
  n.layer_names.push_back("down");
  n.layers.push_back({conv("down.conv1", "block.out", "down.a", width, w2, 3, 2, 1), bn("down.bn1", "down.a", w2),
                      simple(LayerOpKind::relu, "down.a", "down.a"),
                      conv("down.conv2", "down.a", "down.b", w2, w2, 3, 1, 1), bn("down.bn2", "down.b", w2),
                      conv("down.downsample.0", "block.out", "down.short", width, w2, 1, 2, 0),
                      bn("down.downsample.1", "down.short", w2), add,
                      simple(LayerOpKind::relu, "down.out", "down.out")});
  head[0].inputs = {"down.out"};
  head[2].in_features = w2;
  n.layer_names.push_back("head");
  n.layers.push_back(head);
  return n;
}

}  // namespace zeroplan::exec
