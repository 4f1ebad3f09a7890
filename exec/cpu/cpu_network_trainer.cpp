// The CPU reference trainer of a layer-list network (ExecConfig::network, core/layer_ops.h: ResNet-101 on CIFAR-10
// as the DeepSpeed ZeRO tutorial trains it): the description's ops run in fp32 with exec/cpu/cnn_ops.h, one unit per
// layer through the same ZeRO engine as the transformers (exec/zero/zero_engine.h), every stage over MPI. BatchNorm's
// running statistics are buffers each rank keeps whole (DeepSpeed leaves buffers out of its partitions), updated
// from the rank's own micro-batches, as torch.nn.BatchNorm2d in training mode does without SyncBatchNorm.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "exec/cpu/cnn_ops.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cpu/cpu_zero_device.h"
#include "exec/loss_scaler.h"
#include "exec/engine_trainer.h"
#include "exec/network_trainer.h"
#include "exec/network_plan.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan::exec {

namespace {

using i64 = std::int64_t;

class CpuNetworkTrainer final : public NetworkTrainer {
 public:
  CpuNetworkTrainer(const ExecConfig& config, Communicator* comm)
      : config_(config),
        own_comm_(comm ? nullptr : std::make_unique<SelfCommunicator>()),
        comm_(comm ? *comm : *own_comm_),
        layout_(*config.network, zero_alignment(comm_.world())),
        scaler_(config.precision, config.loss_scale) {
    if (!config_.network) throw std::invalid_argument("executor: a layer-list trainer needs a network");
    if (config_.micro_batch < 1 || config_.grad_accum < 1)
      throw std::invalid_argument("executor: micro_batch and grad_accum must be >= 1");
    device_ = std::make_unique<CpuZeroDevice>(
        layout_, config_.seed, offload::optimizer_threads(config_.zero.cpu_optimizer_threads, comm_.world()));
    engine_ = std::make_unique<ZeroEngine>(config_, layout_, *device_, comm_);
    attach(*engine_, scaler_);
    plan_ops();
  }

  const ExecConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  std::string backend() const override { return "cpu"; }
  std::string device_name() const override { return "CPU (Eigen, fp32)"; }
  int rank() const override { return comm_.rank(); }
  int world() const override { return comm_.world(); }
  CommCounters comm_counters() const override { return comm_.counters(); }

  StepResult step_images(const std::vector<float>& images, const std::vector<std::int32_t>& labels) override {
    const i64 B = config_.micro_batch, sample = config_.network->input.elements();
    const i64 need = config_.grad_accum * B;
    check_images(images, labels, need);
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    StepResult r;
    // Each rank's loss gradient is 1/(samples of the global batch): the sum over ranks is the global mean.
    const double global = static_cast<double>(need * comm_.world());
    const float dloss = static_cast<float>(scaler_.scale() / global);
    r.loss_scale = scaler_.scale();
    double fwd = 0, bwd = 0, loss = 0, correct = 0;
    engine_->begin_step();
    for (i64 k = 0; k < config_.grad_accum; ++k) {
      engine_->begin_micro_step(k);
      const auto a = clock::now();
      i64 right = 0;
      loss += forward(images.data() + k * B * sample, labels.data() + k * B, dloss, right) * static_cast<double>(B);
      correct += static_cast<double>(right);
      const auto b = clock::now();
      backward(images.data() + k * B * sample);
      const auto c = clock::now();
      fwd += std::chrono::duration<double>(b - a).count();
      bwd += std::chrono::duration<double>(c - b).count();
    }
    const auto o0 = clock::now();
    double sums[2] = {loss, correct};
    engine_->sum_over_ranks(sums, 2);
    r.loss = sums[0] / global;
    r.correct = static_cast<std::int64_t>(std::llround(sums[1]));
    finish_host_step(r, fwd, bwd, t0, o0);
    return r;
  }

  double evaluate_images(const std::vector<float>& images, const std::vector<std::int32_t>& labels,
                         std::int64_t& correct) override {
    const i64 B = config_.micro_batch;
    check_images(images, labels, B);  // one micro-batch
    engine_->begin_forward_only();
    i64 right = 0;
    const double mean = forward(images.data(), labels.data(), 0.0f, right, /*train=*/false);
    correct += right;
    return mean * static_cast<double>(B);
  }

  std::vector<float> logits() const override { return outputs_.empty() ? std::vector<float>{} : outputs_.back(); }

  MemoryReport memory() const override {
    std::int64_t act = 0, buffers = 0;
    for (const auto& v : outputs_) act += static_cast<std::int64_t>(v.size()) * 4;
    for (const auto& v : saved_) act += static_cast<std::int64_t>(v.size()) * 4;
    for (const auto& v : indices_) act += static_cast<std::int64_t>(v.size()) * 4;
    for (const auto& v : running_) buffers += static_cast<std::int64_t>(v.size()) * 4;
    MemoryReport r;
    r.peak_by_component = device_->bytes_by_component();
    r.host_by_component = device_->host_bytes_by_component();
    r.nvme_bytes = engine_->nvme_bytes();
    r.peak_by_component.emplace_back("activations", act);
    r.peak_by_component.emplace_back("buffers", buffers);
    for (const auto& [name, b] : r.peak_by_component) r.peak_total += b;
    return r;
  }

  std::vector<float> buffer(const std::string& name) const override {
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      const NetworkOp& p = ops_[k];
      if (p.op.kind != LayerOpKind::batch_norm) continue;
      const auto first = running_[k].begin() + (name == p.op.name + ".running_var" ? p.op.channels : 0);
      if (name == p.op.name + ".running_mean" || name == p.op.name + ".running_var")
        return std::vector<float>(first, first + p.op.channels);
    }
    throw std::invalid_argument("cpu network trainer: no buffer " + name);
  }

  void set_buffer(const std::string& name, const std::vector<float>& values) override {
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      const NetworkOp& p = ops_[k];
      if (p.op.kind != LayerOpKind::batch_norm) continue;
      const bool mean = name == p.op.name + ".running_mean", var = name == p.op.name + ".running_var";
      if (!mean && !var) continue;
      if (static_cast<i64>(values.size()) != p.op.channels)
        throw std::invalid_argument("cpu network trainer: buffer " + name + " has " + std::to_string(values.size()) +
                                    " values, the op " + std::to_string(p.op.channels) + " channels");
      std::copy(values.begin(), values.end(), running_[k].begin() + (mean ? 0 : p.op.channels));
      return;
    }
    throw std::invalid_argument("cpu network trainer: no buffer " + name);
  }

  // BatchNorm's running mean and variance of op k (tests; the eval path).
  const std::vector<float>& running_statistics(std::size_t op) const { return running_[op]; }

 private:
  // Shapes, producers and parameter tensors of every op, in forward order (exec/network_plan.h); the host keeps
  // one output and one gradient buffer per op.
  void plan_ops() {
    const NetworkShape& net = *config_.network;
    NetworkPlan plan = plan_network(net);
    ops_ = std::move(plan.ops);
    if (plan.param_tensors != static_cast<int>(layout_.tensors().size()))
      throw std::logic_error("cpu network trainer: the ops own " + std::to_string(plan.param_tensors) + " tensors, the layout " +
                             std::to_string(layout_.tensors().size()));
    const i64 B = config_.micro_batch;
    outputs_.resize(ops_.size());
    grads_.resize(ops_.size());
    saved_.resize(ops_.size());
    indices_.resize(ops_.size());
    running_.resize(ops_.size());
    i64 widest = net.input.elements() * B;
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      const NetworkOp& p = ops_[k];
      outputs_[k].assign(static_cast<std::size_t>(p.out.elements() * B), 0.0f);
      grads_[k].assign(outputs_[k].size(), 0.0f);
      widest = std::max(widest, p.in.elements() * B);
      if (p.op.kind == LayerOpKind::batch_norm) {
        saved_[k].assign(static_cast<std::size_t>(2 * p.op.channels), 0.0f);  // mean, rstd of the micro-batch
        running_[k].assign(static_cast<std::size_t>(2 * p.op.channels), 0.0f);
        std::fill(running_[k].begin() + p.op.channels, running_[k].end(), 1.0f);  // BatchNorm2d: var starts at 1
      }
      if (p.op.kind == LayerOpKind::max_pool2d) indices_[k].assign(outputs_[k].size(), 0);
    }
    scratch_.assign(static_cast<std::size_t>(widest), 0.0f);
    losses_.assign(static_cast<std::size_t>(B), 0.0f);
  }

  cpu::Conv2dGeom geometry(const NetworkOp& p) const {
    const LayerOp& op = p.op;
    return cpu::conv2d_geom(config_.micro_batch, p.in.channels, p.in.height, p.in.width, op.out_channels, op.kernel,
                            op.stride, op.padding, op.dilation, op.groups);
  }

  // Parameter tensors by their op-order index (NetworkOp::first_tensor, + 1 for the bias).
  const float* P(int tensor) const {
    return static_cast<const float*>(engine_->param_at(layout_.tensors()[layout_.network_tensor(tensor)].offset));
  }
  float* G(int tensor) { return static_cast<float*>(engine_->grad_at(layout_.tensors()[layout_.network_tensor(tensor)].offset)); }
  const float* input_of(std::size_t k, std::size_t which, const float* images) const {
    const int producer = ops_[k].producers[which];
    return producer < 0 ? images : outputs_[static_cast<std::size_t>(producer)].data();
  }
  void need_unit(std::size_t layer) {
    const ParamUnit& u = layout_.units()[layer];
    engine_->params_needed(u.begin, u.end);
  }

  // Forward of one micro-batch and its loss (mean over the B samples); dlogits (scaled) written for backward.
  // train: BatchNorm normalises by the micro-batch and updates its running statistics; else by the running ones.
  double forward(const float* images, const std::int32_t* labels, float dloss, i64& correct, bool train = true) {
    const i64 B = config_.micro_batch;
    std::size_t layer = static_cast<std::size_t>(-1);
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      const NetworkOp& p = ops_[k];
      if (p.layer != layer) need_unit(layer = p.layer);
      const float* x = input_of(k, 0, images);
      float* y = outputs_[k].data();
      const i64 hw = p.in.height * p.in.width;
      switch (p.op.kind) {
        case LayerOpKind::conv2d:
          cpu::conv2d_forward(y, x, P(p.first_tensor), p.op.bias ? P(p.first_tensor + 1) : nullptr, geometry(p));
          break;
        case LayerOpKind::batch_norm:
          if (!train) {
            cpu::batch_norm_forward_eval(y, x, running_[k].data(), running_[k].data() + p.op.channels,
                                         P(p.first_tensor), P(p.first_tensor + 1), B, p.op.channels, hw,
                                         static_cast<float>(p.op.eps));
            break;
          }
          cpu::batch_norm_forward_train(y, saved_[k].data(), saved_[k].data() + p.op.channels, running_[k].data(),
                                        running_[k].data() + p.op.channels, x, P(p.first_tensor),
                                        P(p.first_tensor + 1), B, p.op.channels, hw,
                                        static_cast<float>(p.op.momentum), static_cast<float>(p.op.eps));
          break;
        case LayerOpKind::relu: cpu::relu_forward(y, x, p.out.elements() * B); break;
        case LayerOpKind::max_pool2d:
          cpu::max_pool2d_forward(y, indices_[k].data(), x, B, p.in.channels, p.in.height, p.in.width, p.op.kernel,
                                  p.op.stride, p.op.padding);
          break;
        case LayerOpKind::add: {
          const float* x2 = input_of(k, 1, images);
          for (i64 i = 0; i < p.out.elements() * B; ++i) y[i] = x[i] + x2[i];
          break;
        }
        case LayerOpKind::adaptive_avg_pool2d:
          cpu::adaptive_avg_pool2d_forward(y, x, B, p.in.channels, p.in.height, p.in.width, 1, 1);
          break;
        case LayerOpKind::flatten: std::copy_n(x, p.out.elements() * B, y); break;
        case LayerOpKind::linear:
          cpu::matmul_forward(y, x, P(p.first_tensor), p.op.bias ? P(p.first_tensor + 1) : nullptr, B,
                              p.op.in_features, p.op.out_features);
          break;
      }
    }
    // Softmax cross-entropy over the classes (the last op's output); its gradient written into that op's
    // gradient buffer, scaled by the loss scale.
    const i64 classes = config_.network->classes;
    std::vector<float>& logits = outputs_.back();
    for (i64 b = 0; b < B; ++b)
      correct += std::max_element(logits.begin() + b * classes, logits.begin() + (b + 1) * classes) -
                     (logits.begin() + b * classes) == labels[b];
    cpu::crossentropy_forward_backward(losses_.data(), train ? grads_.back().data() : nullptr, logits.data(), labels, B,
                                       classes, classes,
                                       dloss);
    double sum = 0;
    for (float v : losses_) sum += v;
    return sum / static_cast<double>(B);
  }

  // Adds `n` values of src into the gradient of op k's input `which` (the network's input needs none).
  void add_to_input_grad(std::size_t k, std::size_t which, const float* src, i64 n) {
    const int producer = ops_[k].producers[which];
    if (producer < 0) return;
    float* g = grads_[static_cast<std::size_t>(producer)].data();
    for (i64 i = 0; i < n; ++i) g[i] += src[i];
  }

  void backward(const float* images) {
    const i64 B = config_.micro_batch;
    // Every op's output gradient starts at 0 but the last's (the loss wrote it); each op adds into its inputs'.
    for (std::size_t k = 0; k + 1 < grads_.size(); ++k) std::fill(grads_[k].begin(), grads_[k].end(), 0.0f);
    std::size_t layer = ops_.back().layer + 1;
    for (std::size_t k = ops_.size(); k-- > 0;) {
      const NetworkOp& p = ops_[k];
      if (p.layer != layer) backward_enter_layer(*engine_, layout_, layer, p.layer);
      const float* x = input_of(k, 0, images);
      const float* dy = grads_[k].data();
      float* dx = scratch_.data();
      const i64 n_in = p.in.elements() * B, hw = p.in.height * p.in.width;
      switch (p.op.kind) {
        case LayerOpKind::conv2d: {
          const bool first = p.producers[0] < 0;  // the image needs no gradient
          cpu::conv2d_backward(first ? nullptr : dx, G(p.first_tensor), p.op.bias ? G(p.first_tensor + 1) : nullptr, dy,
                               x, P(p.first_tensor), geometry(p));
          if (!first) add_to_input_grad(k, 0, dx, n_in);
          break;
        }
        case LayerOpKind::batch_norm:
          cpu::batch_norm_backward(dx, G(p.first_tensor), G(p.first_tensor + 1), dy, x, P(p.first_tensor),
                                   saved_[k].data(), saved_[k].data() + p.op.channels, B, p.op.channels, hw);
          add_to_input_grad(k, 0, dx, n_in);
          break;
        case LayerOpKind::relu:
          cpu::relu_backward(dx, outputs_[k].data(), dy, n_in);
          add_to_input_grad(k, 0, dx, n_in);
          break;
        case LayerOpKind::max_pool2d:
          cpu::max_pool2d_backward(dx, dy, indices_[k].data(), B, p.in.channels, p.in.height, p.in.width,
                                   p.out.height, p.out.width);
          add_to_input_grad(k, 0, dx, n_in);
          break;
        case LayerOpKind::add:
          add_to_input_grad(k, 0, dy, n_in);
          add_to_input_grad(k, 1, dy, n_in);
          break;
        case LayerOpKind::adaptive_avg_pool2d:
          cpu::adaptive_avg_pool2d_backward(dx, dy, B, p.in.channels, p.in.height, p.in.width, 1, 1);
          add_to_input_grad(k, 0, dx, n_in);
          break;
        case LayerOpKind::flatten: add_to_input_grad(k, 0, dy, n_in); break;
        case LayerOpKind::linear:
          cpu::matmul_backward(dx, G(p.first_tensor), p.op.bias ? G(p.first_tensor + 1) : nullptr, dy, x,
                               P(p.first_tensor), B, p.op.in_features, p.op.out_features);
          add_to_input_grad(k, 0, dx, n_in);
          break;
      }
    }
    engine_->gradients_final_from(0);
  }

  ExecConfig config_;
  std::unique_ptr<Communicator> own_comm_;
  Communicator& comm_;
  ParamLayout layout_;
  LossScaler scaler_;
  std::unique_ptr<CpuZeroDevice> device_;
  std::unique_ptr<ZeroEngine> engine_;
  std::vector<NetworkOp> ops_;
  std::vector<std::vector<float>> outputs_, grads_;  // per op, (B, shape) fp32
  std::vector<std::vector<float>> saved_;            // BatchNorm: the micro-batch's mean and rstd
  std::vector<std::vector<float>> running_;          // BatchNorm: running mean and variance (buffers)
  std::vector<std::vector<int>> indices_;            // max pool: argmax of each output
  std::vector<float> scratch_, losses_;
};

}  // namespace

std::unique_ptr<Trainer> make_cpu_network_trainer(const ExecConfig& config, Communicator* comm) {
  return std::make_unique<CpuNetworkTrainer>(config, comm);
}

}  // namespace zeroplan::exec
