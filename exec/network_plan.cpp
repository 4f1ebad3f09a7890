#include "exec/network_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace zeroplan::exec {

namespace {

using i64 = std::int64_t;

std::string op_label(const NetworkShape& net, const NetworkOp& p) {
  return "layer " + net.layer_names.at(p.layer) + " op " + to_string(p.op.kind) +
         (p.op.name.empty() ? "" : " " + p.op.name) + " (output " + p.op.output + ")";
}

// Whether an op's backward reads its input (convolution, linear: for the weight gradient; BatchNorm: to rebuild
// the normalised input) or its output (ReLU: torch's threshold_backward after an in-place ReLU). Max pooling's
// backward reads only its argmax indices, average pooling, add and flatten read nothing of the forward.
bool backward_reads_input(LayerOpKind k) {
  return k == LayerOpKind::conv2d || k == LayerOpKind::linear || k == LayerOpKind::batch_norm;
}
bool backward_reads_output(LayerOpKind k) { return k == LayerOpKind::relu; }
bool is_view(const NetworkOp& p) { return p.op.kind == LayerOpKind::flatten && p.in.height * p.in.width == 1; }

}  // namespace

std::int64_t window_output_size(i64 in, i64 kernel, i64 stride, i64 padding, i64 dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

TensorShape op_output_shape(const LayerOp& op, const TensorShape& in) {
  TensorShape y = in;
  switch (op.kind) {
    case LayerOpKind::conv2d:
      y.channels = op.out_channels;
      y.height = window_output_size(in.height, op.kernel, op.stride, op.padding, op.dilation);
      y.width = window_output_size(in.width, op.kernel, op.stride, op.padding, op.dilation);
      break;
    case LayerOpKind::max_pool2d:
      y.height = window_output_size(in.height, op.kernel, op.stride, op.padding);
      y.width = window_output_size(in.width, op.kernel, op.stride, op.padding);
      break;
    case LayerOpKind::adaptive_avg_pool2d: y.height = y.width = 1; break;
    case LayerOpKind::flatten: y = TensorShape{in.elements(), 1, 1, true}; break;
    case LayerOpKind::linear: y = TensorShape{op.out_features, 1, 1, true}; break;
    case LayerOpKind::batch_norm:
    case LayerOpKind::relu:
    case LayerOpKind::add: break;
  }
  return y;
}

NetworkPlan plan_network(const NetworkShape& net) {
  NetworkPlan plan;
  std::vector<NetworkOp>& ops = plan.ops;
  // Op list, producers, shapes and parameter tensors, in forward order.
  std::vector<std::pair<std::string, int>> latest{{"input", -1}};  // tensor name -> the op that wrote it last
  int tensor = 0;
  for (std::size_t l = 0; l < net.layers.size(); ++l)
    for (const LayerOp& op : net.layers[l]) {
      NetworkOp p;
      p.op = op;
      p.layer = l;
      for (const std::string& name : op.inputs) {
        auto it = std::find_if(latest.rbegin(), latest.rend(), [&](const auto& e) { return e.first == name; });
        if (it == latest.rend())
          throw std::invalid_argument("executor: " + op_label(net, p) + " reads tensor " + name +
                                      " before any op writes it");
        p.producers.push_back(it->second);
      }
      if (p.producers.empty()) throw std::invalid_argument("executor: " + op_label(net, p) + " reads no tensor");
      if (p.producers.size() == 2 && p.producers[0] == p.producers[1])
        throw std::invalid_argument("executor: " + op_label(net, p) + " adds a tensor to itself");
      p.in = p.producers[0] < 0 ? net.input : ops[static_cast<std::size_t>(p.producers[0])].out;
      p.out = op_output_shape(op, p.in);
      const int owned = op.kind == LayerOpKind::batch_norm                                   ? 2
                        : op.kind == LayerOpKind::conv2d || op.kind == LayerOpKind::linear ? 1 + op.bias
                                                                                           : 0;
      if (owned > 0) p.first_tensor = tensor;
      tensor += owned;
      latest.emplace_back(op.output, static_cast<int>(ops.size()));
      plan.widest_elements = std::max({plan.widest_elements, p.in.elements(), p.out.elements()});
      ops.push_back(std::move(p));
    }
  if (ops.empty()) throw std::invalid_argument("executor: the network has no ops");
  plan.param_tensors = tensor;
  const int n = static_cast<int>(ops.size()), last = n - 1;
  for (int k = 0; k < n; ++k)
    for (int producer : ops[k].producers)
      if (producer >= 0) ops[producer].consumers.push_back(k);
  for (int k = 0; k < last; ++k)
    if (ops[k].consumers.empty())
      throw std::invalid_argument("executor: " + op_label(net, ops[k]) +
                                  " writes a tensor no later op reads (only the last op's output, the logits, may)");

  // Which outputs a backward reads (the logits too: the loss writes their gradient over them).
  std::vector<bool> needed(n, false);
  for (int k = 0; k < n; ++k) {
    if (backward_reads_output(ops[k].op.kind) || k == last) needed[k] = true;
    for (int c : ops[k].consumers)
      if (backward_reads_input(ops[c].op.kind)) needed[k] = true;
  }

  // Forward storage: in place over the first input when the op may overwrite it, a view for flatten of 1x1 maps.
  std::vector<std::pair<int, int>> live;  // per buffer: first op writing it, last op reading it
  for (int k = 0; k < n; ++k) {
    NetworkOp& p = ops[k];
    const int in0 = p.producers[0];
    const bool in_place = in0 >= 0 && (p.op.kind == LayerOpKind::relu || p.op.kind == LayerOpKind::add) &&
                          ops[in0].consumers.size() == 1 && !needed[in0];
    if (in0 >= 0 && (in_place || is_view(p))) {
      p.buffer = ops[in0].buffer;
    } else {
      p.buffer = static_cast<int>(plan.buffers.size());
      plan.buffers.push_back(NetworkBuffer{});
      live.emplace_back(k, k);
    }
    NetworkBuffer& b = plan.buffers[static_cast<std::size_t>(p.buffer)];
    b.elements = std::max(b.elements, p.out.elements());
    b.saved = b.saved || needed[k];
    for (int c : p.consumers) live[static_cast<std::size_t>(p.buffer)].second = std::max(live[p.buffer].second, c);
  }
  // Transient buffers share slots: a slot is free again after the last read of the buffer it held (a buffer is
  // taken before the op's inputs are released, so an op never writes over its own input).
  std::vector<int> slot_free_after;  // per slot: the op after which it is free, n when held
  for (int k = 0; k < n; ++k) {
    const int b = ops[k].buffer;
    NetworkBuffer& buf = plan.buffers[static_cast<std::size_t>(b)];
    if (!buf.saved && buf.slot < 0 && live[b].first == k) {
      auto it = std::find_if(slot_free_after.begin(), slot_free_after.end(), [&](int f) { return f < k; });
      if (it == slot_free_after.end()) it = slot_free_after.insert(slot_free_after.end(), n);
      buf.slot = static_cast<int>(it - slot_free_after.begin());
      *it = live[b].second;
      plan.transient_slot_elements = std::max(plan.transient_slot_elements, buf.elements);
    }
  }
  plan.transient_slots = static_cast<i64>(slot_free_after.size());

  // Gradients: an input's gradient is the output's own when the op is a ReLU (in place), a view, or an add's first
  // input, and nothing else reads that input; the chain of such tensors is one gradient group.
  std::vector<int> group(n, -1);  // per op output: its gradient group (the op heading the chain)
  for (int k = last; k >= 0; --k) {
    NetworkOp& p = ops[k];
    p.grad_aliases_output.assign(p.producers.size(), false);
    p.grad_first_write.assign(p.producers.size(), false);
    if (group[k] < 0) group[k] = k;
    for (std::size_t i = 0; i < p.producers.size(); ++i) {
      const int in = p.producers[i];
      if (in < 0) continue;
      const bool alias = k != last && ops[in].consumers.size() == 1 &&
                         (p.op.kind == LayerOpKind::relu || is_view(p) || (p.op.kind == LayerOpKind::add && i == 0));
      p.grad_aliases_output[i] = alias;
      if (alias) group[in] = group[k];
      else p.grad_first_write[i] = ops[in].consumers.back() == k;
    }
  }
  // Each group is live in backward from its head's last consumer (the first backward to write it) down to the
  // backward of its earliest member; greedy colouring in backward order gives the fewest slots.
  struct Interval { int head, hi, lo; i64 elements; };
  std::vector<Interval> groups;
  for (int k = 0; k < last; ++k)
    if (group[k] == k) groups.push_back({k, ops[k].consumers.empty() ? k : ops[k].consumers.back(), k, 0});
  for (int k = 0; k < last; ++k)
    for (Interval& g : groups)
      if (g.head == group[k]) {
        g.lo = std::min(g.lo, k);
        g.elements = std::max(g.elements, ops[k].out.elements());
      }
  std::sort(groups.begin(), groups.end(), [](const Interval& a, const Interval& b) { return a.hi > b.hi; });
  std::vector<int> slot_taken_until;  // per slot: the lowest op index its current group is live at
  std::vector<std::pair<int, int>> head_slot;
  for (const Interval& g : groups) {
    auto it = std::find_if(slot_taken_until.begin(), slot_taken_until.end(), [&](int lo) { return lo > g.hi; });
    if (it == slot_taken_until.end()) it = slot_taken_until.insert(slot_taken_until.end(), g.lo);
    *it = g.lo;
    head_slot.emplace_back(g.head, static_cast<int>(it - slot_taken_until.begin()));
    plan.grad_slot_elements = std::max(plan.grad_slot_elements, g.elements);
  }
  plan.grad_slots = static_cast<i64>(slot_taken_until.size());
  for (int k = 0; k < last; ++k)
    for (const auto& [head, slot] : head_slot)
      if (head == group[k]) ops[k].grad_buffer = slot;
  return plan;
}

bool network_step_replays_cuda_graph(const ZeroSettings& zero) {
  // Host work inside a micro-step rules a graph out (exec/zero/zero_engine.h): offload_param stages every chunk
  // through host memory before its all-gather (and reads NVMe), and stages 1-2 with the optimizer on the CPU run
  // the previous step's AdamW inside the forward (params_needed). fp32 gradient accumulation's conversions have
  // not run under a graph yet.
  return !zero.offload_param && !(zero.offload_optimizer && zero.stage < 3) && !zero.fp32_grad_accumulation;
}

}  // namespace zeroplan::exec
