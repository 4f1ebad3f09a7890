#include "core/layer_ops.h"

#include <map>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/json_input.h"
#include "core/model_description.h"

namespace zeroplan {

std::string to_string(LayerOpKind kind) {
  switch (kind) {
    case LayerOpKind::conv2d: return "conv2d";
    case LayerOpKind::batch_norm: return "batch_norm";
    case LayerOpKind::relu: return "relu";
    case LayerOpKind::max_pool2d: return "max_pool2d";
    case LayerOpKind::add: return "add";
    case LayerOpKind::adaptive_avg_pool2d: return "adaptive_avg_pool2d";
    case LayerOpKind::flatten: return "flatten";
    case LayerOpKind::linear: return "linear";
  }
  return "?";
}

std::int64_t LayerOp::params() const {
  switch (kind) {
    case LayerOpKind::conv2d:
      return out_channels * (in_channels / groups) * kernel * kernel + (bias ? out_channels : 0);
    case LayerOpKind::batch_norm: return 2 * channels;  // weight (gamma) and bias (beta)
    case LayerOpKind::linear: return out_features * in_features + (bias ? out_features : 0);
    case LayerOpKind::relu:
    case LayerOpKind::max_pool2d:
    case LayerOpKind::add:
    case LayerOpKind::adaptive_avg_pool2d:
    case LayerOpKind::flatten: return 0;
  }
  return 0;
}

namespace {

const std::vector<std::string> kOpKinds = {"conv2d", "batch_norm", "relu", "max_pool2d", "add",
                                           "adaptive_avg_pool2d", "flatten", "linear"};

// Keys each op kind reads (others are refused: a typo must not become a silent default).
std::vector<std::string> keys_of(LayerOpKind kind) {
  std::vector<std::string> keys = {"op", "output"};
  switch (kind) {
    case LayerOpKind::conv2d:
      keys.insert(keys.end(), {"name", "input", "in_channels", "out_channels", "kernel", "stride", "padding",
                               "dilation", "groups", "bias"});
      break;
    case LayerOpKind::batch_norm: keys.insert(keys.end(), {"name", "input", "channels", "eps", "momentum"}); break;
    case LayerOpKind::max_pool2d: keys.insert(keys.end(), {"input", "kernel", "stride", "padding"}); break;
    case LayerOpKind::add: keys.push_back("inputs"); break;
    case LayerOpKind::linear: keys.insert(keys.end(), {"name", "input", "in_features", "out_features", "bias"}); break;
    case LayerOpKind::relu:
    case LayerOpKind::adaptive_avg_pool2d:
    case LayerOpKind::flatten: keys.push_back("input"); break;
  }
  return keys;
}

// Bounds that keep every product of the shapes inside int64 (channels x channels x kernel^2 <= 2^60): a description
// past them is absurd, refused rather than overflowed.
constexpr std::int64_t kMaxChannels = std::int64_t{1} << 20;
constexpr std::int64_t kMaxWindow = std::int64_t{1} << 10;  // kernel, stride, dilation
std::int64_t bounded(const JsonFields& f, const std::string& key, std::int64_t value, std::int64_t most) {
  if (value > most) f.fail(key, "absurd size: " + std::to_string(value) + " exceeds " + std::to_string(most));
  return value;
}

LayerOp op_from_json(const JsonFields& f) {
  LayerOp op;
  const std::string kind = f.one_of("op", kOpKinds);
  for (std::size_t i = 0; i < kOpKinds.size(); ++i)
    if (kOpKinds[i] == kind) op.kind = static_cast<LayerOpKind>(i);
  const std::vector<std::string> unknown = f.unknown_keys(keys_of(op.kind));
  if (!unknown.empty()) f.fail(unknown.front(), "not a field of a " + kind + " op");
  op.output = f.string("output");
  if (op.output.empty()) f.fail("output", "expected a tensor name");
  if (op.kind == LayerOpKind::add) {
    const nlohmann::json& inputs = f.raw("inputs");
    if (!inputs.is_array() || inputs.size() != 2 || !inputs[0].is_string() || !inputs[1].is_string())
      f.fail("inputs", "expected the two tensor names the add sums");
    op.inputs = {inputs[0].get<std::string>(), inputs[1].get<std::string>()};
  } else {
    op.inputs = {f.string("input")};
  }
  switch (op.kind) {
    case LayerOpKind::conv2d:
      op.name = f.string("name");
      op.in_channels = bounded(f, "in_channels", f.positive_integer("in_channels"), kMaxChannels);
      op.out_channels = bounded(f, "out_channels", f.positive_integer("out_channels"), kMaxChannels);
      op.kernel = bounded(f, "kernel", f.positive_integer("kernel"), kMaxWindow);
      op.stride = bounded(f, "stride", f.positive_integer_or("stride", 1), kMaxWindow);
      op.padding = bounded(f, "padding", f.non_negative_integer_or("padding", 0), kMaxWindow);
      op.dilation = bounded(f, "dilation", f.positive_integer_or("dilation", 1), kMaxWindow);
      op.groups = f.positive_integer_or("groups", 1);
      op.bias = f.boolean_or("bias", false);
      if (op.in_channels % op.groups != 0 || op.out_channels % op.groups != 0)
        f.fail("groups", std::to_string(op.groups) + " does not divide in_channels " + std::to_string(op.in_channels) +
                             " and out_channels " + std::to_string(op.out_channels));
      break;
    case LayerOpKind::batch_norm:
      op.name = f.string("name");
      op.channels = bounded(f, "channels", f.positive_integer("channels"), kMaxChannels);
      op.eps = f.positive_number_or("eps", 1e-5);
      op.momentum = f.non_negative_number_or("momentum", 0.1);
      if (op.momentum > 1) f.fail("momentum", "expected a fraction in [0, 1]");
      break;
    case LayerOpKind::max_pool2d:
      op.kernel = bounded(f, "kernel", f.positive_integer("kernel"), kMaxWindow);
      op.stride = bounded(f, "stride", f.positive_integer_or("stride", op.kernel), kMaxWindow);  // MaxPool2d's default
      op.padding = f.non_negative_integer_or("padding", 0);
      if (2 * op.padding > op.kernel) f.fail("padding", "expected at most half the kernel (PyTorch's rule)");
      break;
    case LayerOpKind::linear:
      op.name = f.string("name");
      op.in_features = bounded(f, "in_features", f.positive_integer("in_features"), kMaxChannels * kMaxChannels);
      op.out_features = bounded(f, "out_features", f.positive_integer("out_features"), kMaxChannels);
      op.bias = f.boolean_or("bias", true);
      break;
    case LayerOpKind::relu:
    case LayerOpKind::add:
    case LayerOpKind::adaptive_avg_pool2d:
    case LayerOpKind::flatten: break;
  }
  return op;
}

}  // namespace

std::vector<LayerOp> layer_ops_from_json(const nlohmann::json& ops, const std::string& source,
                                         const std::string& field_prefix) {
  if (!ops.is_array() || ops.empty())
    throw InputError(source, field_prefix, "expected a non-empty array of operations");
  std::vector<LayerOp> out;
  for (std::size_t i = 0; i < ops.size(); ++i)
    out.push_back(op_from_json(JsonFields(ops[i], source, field_prefix + "[" + std::to_string(i) + "]")));
  return out;
}

nlohmann::json layer_ops_to_json(const std::vector<LayerOp>& ops) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayerOp& op : ops) {
    nlohmann::json j = {{"op", to_string(op.kind)}, {"output", op.output}};
    if (op.kind == LayerOpKind::add) j["inputs"] = op.inputs;
    else j["input"] = op.inputs.front();
    switch (op.kind) {
      case LayerOpKind::conv2d:
        j.update({{"name", op.name}, {"in_channels", op.in_channels}, {"out_channels", op.out_channels},
                  {"kernel", op.kernel}, {"stride", op.stride}, {"padding", op.padding}, {"dilation", op.dilation},
                  {"groups", op.groups}, {"bias", op.bias}});
        break;
      case LayerOpKind::batch_norm:
        j.update({{"name", op.name}, {"channels", op.channels}, {"eps", op.eps}, {"momentum", op.momentum}});
        break;
      case LayerOpKind::max_pool2d:
        j.update({{"kernel", op.kernel}, {"stride", op.stride}, {"padding", op.padding}});
        break;
      case LayerOpKind::linear:
        j.update({{"name", op.name}, {"in_features", op.in_features}, {"out_features", op.out_features},
                  {"bias", op.bias}});
        break;
      case LayerOpKind::relu:
      case LayerOpKind::add:
      case LayerOpKind::adaptive_avg_pool2d:
      case LayerOpKind::flatten: break;
    }
    out.push_back(j);
  }
  return out;
}

std::int64_t check_layer_ops(const std::vector<LayerDescription>& layers, const TensorShape& input,
                             const std::string& source) {
  std::map<std::string, TensorShape> tensors = {{"input", input}};
  std::string last;
  auto text = [](const TensorShape& s) {
    return s.flat ? "(" + std::to_string(s.channels) + ")"
                  : "(" + std::to_string(s.channels) + ", " + std::to_string(s.height) + ", " + std::to_string(s.width) + ")";
  };
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const LayerDescription& layer = layers[l];
    std::int64_t owned = 0;
    for (std::size_t i = 0; i < layer.ops.size(); ++i) {
      const LayerOp& op = layer.ops[i];
      const std::string field = "layers[" + std::to_string(l) + "].ops[" + std::to_string(i) + "]";
      auto fail = [&](const std::string& what) {
        throw InputError(source, field, "layer " + layer.name + ", " + to_string(op.kind) + " op: " + what);
      };
      std::vector<TensorShape> in;
      for (const std::string& name : op.inputs) {
        const auto it = tensors.find(name);
        if (it == tensors.end()) fail("reads tensor \"" + name + "\", which no earlier op writes");
        in.push_back(it->second);
      }
      const TensorShape& x = in.front();
      TensorShape y = x;
      auto spatial = [&](std::int64_t size, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                         std::int64_t dilation) {
        const std::int64_t out = (size + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
        if (size + 2 * padding - dilation * (kernel - 1) - 1 < 0 || out < 1)
          fail("the input " + text(x) + " is smaller than the kernel's window");
        return out;
      };
      switch (op.kind) {
        case LayerOpKind::conv2d:
          if (x.flat || x.channels != op.in_channels)
            fail("in_channels " + std::to_string(op.in_channels) + " but its input is " + text(x));
          y.channels = op.out_channels;
          y.height = spatial(x.height, op.kernel, op.stride, op.padding, op.dilation);
          y.width = spatial(x.width, op.kernel, op.stride, op.padding, op.dilation);
          break;
        case LayerOpKind::batch_norm:
          if (x.flat || x.channels != op.channels)
            fail("channels " + std::to_string(op.channels) + " but its input is " + text(x));
          break;
        case LayerOpKind::max_pool2d:
          if (x.flat) fail("its input " + text(x) + " has no spatial dimensions");
          y.height = spatial(x.height, op.kernel, op.stride, op.padding, 1);
          y.width = spatial(x.width, op.kernel, op.stride, op.padding, 1);
          break;
        case LayerOpKind::add:
          if (in[0].channels != in[1].channels || in[0].height != in[1].height || in[0].width != in[1].width ||
              in[0].flat != in[1].flat)
            fail("adds " + text(in[0]) + " and " + text(in[1]) + ", which differ");
          break;
        case LayerOpKind::adaptive_avg_pool2d:
          if (x.flat) fail("its input " + text(x) + " has no spatial dimensions");
          y.height = y.width = 1;
          break;
        case LayerOpKind::flatten:
          y = TensorShape{x.elements(), 1, 1, true};
          break;
        case LayerOpKind::relu:
          break;
        case LayerOpKind::linear:
          if (!x.flat || x.channels != op.in_features)
            fail("in_features " + std::to_string(op.in_features) + " but its input is " + text(x) +
                 (x.flat ? "" : " (flatten it first)"));
          y = TensorShape{op.out_features, 1, 1, true};
          break;
      }
      if (tensors.count(op.output) && op.output != op.inputs.front())
        fail("writes tensor \"" + op.output + "\", which an earlier op wrote already (only an op on its own input "
             "may reuse the name)");
      tensors[op.output] = y;
      last = op.output;
      if (__builtin_add_overflow(owned, op.params(), &owned)) fail("absurd size: the layer's parameters overflow");
    }
    if (owned != layer.params)
      throw InputError(source, "layers[" + std::to_string(l) + "].params",
                       "layer " + layer.name + " states " + std::to_string(layer.params) + " params but its ops own " +
                           std::to_string(owned));
  }
  const TensorShape& logits = tensors.at(last);
  if (!logits.flat)
    throw InputError(source, "layers", "the last op's output " + last + " is " + text(logits) +
                                           ", not the logits (a flat vector: end with linear)");
  return logits.channels;
}

}  // namespace zeroplan
