// The network plan (exec/network_plan.h): what the GPU keeps of a layer list is what PyTorch's autograd keeps for
// torchvision's ResNet (the bundled description's activation_elements_per_sample counts those tensors, from the
// model's own notes: every convolution output, every in-place ReLU output, the block outputs after add and ReLU, the
// max pool's output and indices, the pooled features and the logits), ReLU and add run in place, the downsample
// BatchNorm's output is transient, and each input's gradient is written once before it is added to.
#include <gtest/gtest.h>

#include <numeric>

#include "core/model_description.h"
#include "exec/network_plan.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_partition.h"
#include "tests/exec/network_fixtures.h"

namespace zeroplan::exec {
namespace {

TEST(NetworkPlan, ResNet101KeepsWhatAutogradKeeps) {
  const ModelDescription model = load_model("resnet101");
  const NetworkPlan plan = plan_network(network_of(model));
  std::int64_t saved = 0, indices = 0;
  for (const NetworkBuffer& b : plan.buffers)
    if (b.saved) saved += b.elements;
  for (const NetworkOp& p : plan.ops)
    if (p.op.kind == LayerOpKind::max_pool2d) indices += p.out.elements();
  std::int64_t described = 0;
  for (const LayerDescription& l : model.layers) described += l.activation_elements_per_sample;
  EXPECT_EQ(saved + indices, described);
  // Transient: the four stages' downsample BatchNorm outputs, read once by their add; one slot holds them in turn.
  std::int64_t transient = 0;
  for (const NetworkBuffer& b : plan.buffers) transient += !b.saved;
  EXPECT_EQ(transient, 4);
  EXPECT_EQ(plan.transient_slots, 1);
  // Backward needs few gradient buffers at once: a block's path, its shortcut and the gradient being written.
  EXPECT_LE(plan.grad_slots, 4);
}

TEST(NetworkPlan, InPlaceOpsShareTheirInputsBufferAndGradient) {
  const NetworkPlan plan = plan_network(small_resnet_with_downsample(16, 8));
  for (const NetworkOp& p : plan.ops) {
    if (p.op.kind == LayerOpKind::relu) {
      const NetworkOp& in = plan.ops[static_cast<std::size_t>(p.producers[0])];
      // After a BatchNorm or an add (whose outputs no backward reads) the ReLU overwrites its input.
      if (in.op.kind == LayerOpKind::batch_norm || in.op.kind == LayerOpKind::add) {
        EXPECT_EQ(p.buffer, in.buffer) << p.op.output;
        EXPECT_TRUE(p.grad_aliases_output[0]);
        EXPECT_EQ(p.grad_buffer, in.grad_buffer);
      }
    }
    if (p.op.kind == LayerOpKind::conv2d) {
      // A BatchNorm reads its input (the convolution's output) in backward: a saved buffer of its own.
      EXPECT_TRUE(plan.buffers[static_cast<std::size_t>(p.buffer)].saved) << p.op.name;
    }
  }
  // An input read by two ops (a block's input: its first convolution and the shortcut) gets its gradient written by
  // the later op's backward (the first to run) and added to by the earlier one.
  for (std::size_t k = 0; k < plan.ops.size(); ++k)
    for (std::size_t i = 0; i < plan.ops[k].producers.size(); ++i) {
      const int in = plan.ops[k].producers[i];
      if (in < 0 || plan.ops[k].grad_aliases_output[i]) continue;
      const std::vector<int>& readers = plan.ops[static_cast<std::size_t>(in)].consumers;
      EXPECT_EQ(plan.ops[k].grad_first_write[i], readers.back() == static_cast<int>(k)) << plan.ops[k].op.output;
    }
}

// A layer's tensors are placed largest first, so stage 3 cuts each unit into at most one run of partitioned tensors
// and one of persistent ones, whatever the threshold; the ops still find their own tensors (by op order).
TEST(NetworkLayout, ResNet101UnitsPlaceTheirPersistentTensorsLast) {
  const ModelDescription model = load_model("resnet101");
  const NetworkShape net = network_of(model);
  const NetworkPlan plan = plan_network(net);
  const ParamLayout layout(net, zero_alignment(2));
  // Op order to layout: every op's weight (and bias) is the tensor of that name, inside its layer's unit.
  for (const NetworkOp& p : plan.ops) {
    if (p.first_tensor < 0) continue;
    const ParamTensor& w = layout.tensors()[layout.network_tensor(p.first_tensor)];
    EXPECT_EQ(w.name, p.op.name + ".weight");
    const ParamUnit& u = layout.units()[p.layer];
    EXPECT_GE(w.offset, u.begin);
    EXPECT_LT(w.offset, u.end);
    if (p.op.kind == LayerOpKind::batch_norm || p.op.bias)
      EXPECT_EQ(layout.tensors()[layout.network_tensor(p.first_tensor + 1)].name, p.op.name + ".bias");
  }
  for (std::int64_t threshold : {std::int64_t{0}, std::int64_t{10000}, std::int64_t{100000}, std::int64_t{1000000}}) {
    SCOPED_TRACE(threshold);
    ZeroSettings zero;
    zero.stage = 3;
    zero.param_persistence_threshold = threshold;
    const ZeroPartition partition(layout, 2, 0, partition_rules(zero));
    std::int64_t partitioned_buckets = 0, persistent_buckets = 0;
    for (const ParamUnit& u : layout.units()) {
      std::int64_t partitioned = 0, persistent = 0;
      for (const GradientBucket& b : partition.buckets())
        if (b.begin >= u.begin && b.begin < u.end) (b.persistent ? persistent : partitioned) += 1;
      // The default reduce bucket (5e8 elements) holds any ResNet unit: one bucket of each kind at most.
      EXPECT_LE(partitioned, 1);
      EXPECT_LE(persistent, 1);
      partitioned_buckets += partitioned;
      persistent_buckets += persistent;
    }
    // Every unit has a tensor at or below any positive threshold (its batch norms' weights and biases; the
    // head's 10-element bias), so a positive threshold gives each unit exactly one persistent bucket.
    EXPECT_EQ(partitioned_buckets + persistent_buckets, static_cast<std::int64_t>(partition.buckets().size()));
    if (threshold == 0) EXPECT_EQ(persistent_buckets, 0);
    if (threshold > 0) EXPECT_EQ(persistent_buckets, static_cast<std::int64_t>(layout.units().size()));
  }
}

TEST(NetworkPlan, RefusesWhatItCannotPlan) {
  NetworkShape n = small_resnet(16, 8);
  n.layers[1][0].inputs = {"nowhere"};
  EXPECT_THROW(plan_network(n), std::invalid_argument);
  NetworkShape twice = small_resnet(16, 8);
  for (LayerOp& op : twice.layers[1])
    if (op.kind == LayerOpKind::add) op.inputs = {"block.b", "block.b"};
  EXPECT_THROW(plan_network(twice), std::invalid_argument);
}

}  // namespace
}  // namespace zeroplan::exec
