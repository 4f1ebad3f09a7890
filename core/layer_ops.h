// The operations of a layer-list model (ResNet-101 on CIFAR-10, the DeepSpeed ZeRO tutorial's model): what each
// layer of a generic model description computes, so that the executor can run the description itself and the
// parameters it partitions are the description's. A layer's "ops" name their input and output tensors, so a
// residual connection is an "add" of two named tensors; "input" is the network's input, the last op's output the
// logits. Parameterised ops carry the module name their parameters have in the framework's checkpoints
// (torchvision's "layer1.0.conv1", "fc"), which export and --init-from use.
//
// JSON (a layer's "ops" array; the model's "input_shape": [C, H, W]):
//   {"op": "conv2d", "name": "conv1", "input": "input", "output": "stem.conv1", "in_channels": 3,
//    "out_channels": 64, "kernel": 7, "stride": 2, "padding": 3, "dilation": 1, "groups": 1, "bias": false}
//   {"op": "batch_norm", "name": "bn1", "input": ..., "output": ..., "channels": 64, "eps": 1e-5, "momentum": 0.1}
//   {"op": "relu", "input": ..., "output": ...}
//   {"op": "max_pool2d", "input": ..., "output": ..., "kernel": 3, "stride": 2, "padding": 1}
//   {"op": "add", "inputs": [a, b], "output": ...}
//   {"op": "adaptive_avg_pool2d", "input": ..., "output": ...}      (to 1x1, torchvision's ResNet head)
//   {"op": "flatten", "input": ..., "output": ...}
//   {"op": "linear", "name": "fc", "input": ..., "output": ..., "in_features": 2048, "out_features": 10, "bias": true}
// Semantics are PyTorch's (torch.nn.Conv2d, BatchNorm2d, MaxPool2d, AdaptiveAvgPool2d, Linear); stride defaults
// to 1 (conv) or the kernel (max pool), padding to 0, dilation and groups to 1, bias to true for linear and false
// for conv (torchvision's convolutions have none), eps to 1e-5 and momentum to 0.1 (BatchNorm2d's defaults).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zeroplan {

enum class LayerOpKind { conv2d, batch_norm, relu, max_pool2d, add, adaptive_avg_pool2d, flatten, linear };
std::string to_string(LayerOpKind kind);

struct LayerOp {
  LayerOpKind kind = LayerOpKind::relu;
  std::string name;                 // module name (parameterised ops), e.g. "layer1.0.downsample.0"
  std::vector<std::string> inputs;  // one, or two for add
  std::string output;
  // conv2d
  std::int64_t in_channels = 0, out_channels = 0, kernel = 1, stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = false;                // conv2d, linear
  // batch_norm
  std::int64_t channels = 0;
  double eps = 1e-5, momentum = 0.1;
  // linear
  std::int64_t in_features = 0, out_features = 0;

  // Parameters the op owns (weights, biases, BatchNorm's weight and bias; running statistics are buffers).
  std::int64_t params() const;
  // BatchNorm's running mean and variance (buffers, replicated on every rank as DeepSpeed keeps them).
  std::int64_t buffer_elements() const { return kind == LayerOpKind::batch_norm ? 2 * channels : 0; }
};

// The shape of a tensor between ops: (channels, height, width) of one sample, or (features, 1, 1) after flatten.
struct TensorShape {
  std::int64_t channels = 0, height = 0, width = 0;
  bool flat = false;
  std::int64_t elements() const { return channels * height * width; }
};

// Reads one layer's "ops" (field_prefix names them in errors: "layers[3].ops"). Throws InputError.
std::vector<LayerOp> layer_ops_from_json(const nlohmann::json& ops, const std::string& source,
                                         const std::string& field_prefix);
nlohmann::json layer_ops_to_json(const std::vector<LayerOp>& ops);

// Runs the shapes through every layer's ops from `input` and checks the network: every tensor read was written
// before, channels and features agree, spatial sizes stay >= 1, groups divide the channels, each layer's ops own
// exactly the layer's stated params, and the last op's output is a flat vector (the logits). Returns the logits'
// size (classes). Throws InputError naming the layer, the op and what disagrees.
struct LayerDescription;
std::int64_t check_layer_ops(const std::vector<LayerDescription>& layers, const TensorShape& input,
                             const std::string& source);

}  // namespace zeroplan
