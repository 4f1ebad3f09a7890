// core/layer_ops.h: what a layer-list model computes. The bundled ResNet-101 (scripts/resnet_ops.py wrote its ops in
// torchvision's module names) checks out to torchvision's shapes on CIFAR-10, and every inconsistency in a user's
// ops is one InputError naming the layer, the op and what disagrees.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/json_input.h"
#include "core/model_description.h"

namespace zeroplan {
namespace {

const ModelDescription& resnet101() {
  static const ModelDescription model = load_model("resnet101");  // read once: a const description, no handle
  return model;
}

TEST(LayerOps, BundledResNet101IsTorchvisionsNetworkOnCifar) {
  const ModelDescription& m = resnet101();
  ASSERT_TRUE(m.has_ops());
  ASSERT_TRUE(m.input_shape.has_value());
  EXPECT_EQ(m.input_shape->elements(), 3 * 32 * 32);
  EXPECT_EQ(m.classes, 10);
  // torchvision resnet101(num_classes=10): 44,549,160 with the 1000-class head less 2,049,000 plus 20,490.
  EXPECT_EQ(m.params(), 42520650);
  std::map<LayerOpKind, int> counts;
  std::int64_t buffers = 0;
  for (const LayerDescription& layer : m.layers)
    for (const LayerOp& op : layer.ops) {
      ++counts[op.kind];
      buffers += op.buffer_elements();
    }
  // 1 stem conv + 33 blocks x 3 + 4 downsample convs; a BatchNorm after each; 33 residual adds; one fc.
  EXPECT_EQ(counts[LayerOpKind::conv2d], 104);
  EXPECT_EQ(counts[LayerOpKind::batch_norm], 104);
  EXPECT_EQ(counts[LayerOpKind::add], 33);
  EXPECT_EQ(counts[LayerOpKind::linear], 1);
  EXPECT_EQ(counts[LayerOpKind::max_pool2d], 1);
  // BatchNorm's running mean and variance: as many elements as its weight and bias (torchvision's state_dict).
  std::int64_t bn_params = 0;
  for (const LayerDescription& layer : m.layers)
    for (const LayerOp& op : layer.ops)
      if (op.kind == LayerOpKind::batch_norm) bn_params += op.params();
  EXPECT_EQ(buffers, bn_params);
  // v1.5: the stride sits on the 3x3 convolution; the first block of layer2 halves 8x8 to 4x4 there.
  const LayerDescription& block = m.layers[4];
  ASSERT_EQ(block.name, "layer2.0");
  EXPECT_EQ(block.ops[3].name, "layer2.0.conv2");
  EXPECT_EQ(block.ops[3].stride, 2);
  EXPECT_EQ(block.ops[0].stride, 1);
}

// The bundled description with one change, read back: the error's field and message.
std::string error_of(const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json doc = model_to_json(resnet101());
  doc.erase("source");
  doc.erase("family");
  doc.erase("params");
  doc.erase("largest_layer_params");
  change(doc);
  try {
    model_from_json(doc, "changed.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(LayerOps, TheDescriptionRoundTripsThroughJson) {
  EXPECT_EQ(error_of([](nlohmann::json&) {}), "");
}

TEST(LayerOps, EachInconsistencyNamesTheLayerTheOpAndWhat) {
  const auto expect = [](const std::string& message, const std::vector<std::string>& parts) {
    ASSERT_FALSE(message.empty());
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  expect(error_of([](nlohmann::json& d) { d["layers"][1]["ops"][0]["out_channels"] = 65; }),
         {"changed.json", "layers[1].ops[1]", "layer1.0", "batch_norm", "channels 64", "(65, 8, 8)"});
  expect(error_of([](nlohmann::json& d) { d["layers"][2]["ops"][0]["input"] = "nope"; }),
         {"layers[2].ops[0]", "layer1.1", "\"nope\"", "no earlier op"});
  expect(error_of([](nlohmann::json& d) { d["layers"][3]["params"] = 70399; }),
         {"layers[3].params", "layer1.2", "states 70399 params", "ops own 70400"});
  expect(error_of([](nlohmann::json& d) { d["layers"][5].erase("ops"); }), {"layers[5].ops", "missing", "every layer"});
  expect(error_of([](nlohmann::json& d) { d["input_shape"] = {3, 32, 31}; }), {"input_shape", "2976", "3072"});
  expect(error_of([](nlohmann::json& d) { d["layers"][1]["ops"][0]["kernal"] = 3; }),
         {"layers[1].ops[0].kernal", "not a field of a conv2d op"});
  expect(error_of([](nlohmann::json& d) { d["layers"][1]["ops"][0]["op"] = "conv3d"; }),
         {"layers[1].ops[0].op", "conv2d"});
  expect(error_of([](nlohmann::json& d) { d["layers"][1]["ops"][10]["inputs"][1] = "layer1.0.conv1"; }),
         {"layer1.0", "add op", "(256, 8, 8)", "(64, 8, 8)"});
  expect(error_of([](nlohmann::json& d) { d["layers"][1]["ops"][0]["groups"] = 3; }),
         {"layers[1].ops[0].groups", "does not divide"});
  expect(error_of([](nlohmann::json& d) {
           auto& head = d["layers"][34];
           head["ops"].erase(head["ops"].size() - 1);  // linear
           head["ops"].erase(head["ops"].size() - 1);  // flatten
           for (const char* key : {"params", "largest_module_params", "small_module_params", "module_count"}) head[key] = 0;
         }),
         {"last op", "(2048, 1, 1)", "not the logits"});
  expect(error_of([](nlohmann::json& d) { d["layers"][34]["ops"][2]["in_features"] = 1024; }),
         {"linear op", "in_features 1024", "(2048)"});
  // An unpadded 7x7 stem on a 4x4 image: the window does not fit.
  expect(error_of([](nlohmann::json& d) {
           d["layers"][0]["ops"][0]["padding"] = 0;
           d["input_shape"] = {3, 4, 4};
           d["input_elements_per_sample"] = 48;
         }),
         {"layer stem", "conv2d", "smaller than the kernel"});
}

}  // namespace
}  // namespace zeroplan
