// The GPU training step of a layer-list network (ExecConfig::network: torchvision's ResNet-101 on CIFAR-10, the
// DeepSpeed ZeRO tutorial's model): the description's ops run in the plan's order (exec/network_plan.h), one ZeRO
// unit per layer through the same engine as the transformers, channels-last (NHWC) in the model's precision with
// fp32 BatchNorm statistics: convolutions through cuDNN (cudnn_conv.cuh), BatchNorm, pooling and the elementwise
// ops with our kernels, the classifier through cuBLASLt. The CPU reference (exec/cpu/cpu_network_trainer.cpp) runs
// the same op list in fp32; the GPU tests compare the two. BatchNorm's running statistics are buffers each rank
// keeps whole and updates from its own micro-batches, as torch.nn.BatchNorm2d in training mode does without
// SyncBatchNorm (DeepSpeed leaves buffers out of its partitions).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "exec/activation_accounting.h"
#include "exec/comm/nccl_communicator.h"
#include "exec/cuda/batchnorm.cuh"
#include "exec/cuda/crossentropy.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_handles.cuh"
#include "exec/cuda/step_graphs.cuh"
#include "exec/cuda/cuda_trainer.h"
#include "exec/cuda/cuda_zero_device.h"
#include "exec/cuda/cudnn_conv.cuh"
#include "exec/cuda/device_allocator.h"
#include "exec/cuda/matmul.cuh"
#include "exec/cuda/pooling.cuh"
#include "exec/cuda/tensor_ops.cuh"
#include "exec/engine_trainer.h"
#include "exec/network_plan.h"
#include "exec/network_trainer.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan::exec {

namespace {

using i64 = std::int64_t;
using cuda::CudaEvent;
using cuda::CudaStream;
using cuda::PinnedHost;

template <typename T>
class CudaNetworkTrainer final : public NetworkTrainer {
 public:
  CudaNetworkTrainer(const ExecConfig& config, Communicator* comm)
      : config_(config),
        layout_(*config.network, zero_alignment(comm ? comm->world() : 1)),
        scaler_(config.precision, config.loss_scale),
        plan_(plan_network(*config.network)) {
    if (config_.micro_batch < 1 || config_.grad_accum < 1)
      throw std::invalid_argument("executor: micro_batch and grad_accum must be >= 1");
    if (plan_.param_tensors != static_cast<int>(layout_.tensors().size()))
      throw std::logic_error("cuda network trainer: the ops own " + std::to_string(plan_.param_tensors) +
                             " tensors, the layout " + std::to_string(layout_.tensors().size()));
    check_supported();
    if (!comm) own_comm_ = make_single_gpu_communicator();
    comm_ = comm ? comm : own_comm_.get();
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    device_name_ = prop.name;
    try {
      stream_.create();
      alloc_ = std::make_unique<DeviceAllocator>();
      zero_device_ = std::make_unique<CudaZeroDevice>(layout_, config_.seed, element_type(), *alloc_, stream_,
                                                      static_cast<cudaStream_t>(comm_->comm_stream()));
      engine_ = std::make_unique<ZeroEngine>(config_, layout_, *zero_device_, *comm_);
      attach(*engine_, scaler_);
      allocate();
      const bool det = config_.zero.deterministic;
      matmul_ = std::make_unique<cuda::Matmul>(at(dev_.cublas_workspace), static_cast<std::size_t>(kCublasWorkspaceBytes),
                                               /*tune=*/!det);
      convs_ = std::make_unique<cuda::CudnnConvolutions>(config_.precision, stream_, at(dev_.cudnn_workspace),
                                                         static_cast<std::size_t>(kCudnnWorkspaceBytes), det);
      plan_convolutions();
    } catch (...) {
      if (stream_.get()) cudaStreamSynchronize(stream_);
      throw;
    }
  }

  ~CudaNetworkTrainer() override {
    if (stream_.get()) cudaStreamSynchronize(stream_);
  }

  const ExecConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  std::string backend() const override { return "cuda"; }
  std::string device_name() const override { return device_name_; }
  int rank() const override { return comm_->rank(); }
  int world() const override { return comm_->world(); }
  CommCounters comm_counters() const override { return comm_->counters(); }

  StepResult step_images(const std::vector<float>& images, const std::vector<std::int32_t>& labels) override {
    const i64 B = config_.micro_batch, sample = config_.network->input.elements();
    const i64 need = config_.grad_accum * B;
    check_images(images, labels, need);
    StepResult r;
    const double scale = scaler_.scale();
    r.loss_scale = scale;
    // Each rank's loss gradient is 1/(samples of the global batch): the sum over ranks is the global mean.
    const double global = static_cast<double>(need * comm_->world());
    const float dloss = static_cast<float>(scale / global);
    // Page-locked copies of the step's images and labels (the previous step has finished reading them: finish_step
    // ends synchronized).
    std::copy(images.begin(), images.end(), host_images_.get());
    std::copy(labels.begin(), labels.end(), host_labels_.get());
    *host_dloss_.get() = dloss;
    CUDA_CHECK(cudaMemcpyAsync(at(dev_.dloss), host_dloss_.get(), sizeof(float), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(ev_start_.get(), stream_));
    engine_->begin_step();
    for (i64 k = 0; k < config_.grad_accum; ++k) {
      engine_->begin_micro_step(k);
      CUDA_CHECK(cudaEventRecord(micro_events_[3 * k]->get(), stream_));
      upload(host_images_.get() + k * B * sample, host_labels_.get() + k * B);
      if (graphs_.usable() && steps_run_ > 0) {
        engine_->join_lanes();  // the graph's first node follows every lane's earlier work
        if (graphs_.captured(k)) {
          graphs_.replay(k, stream_);
          engine_->replay_graph_bookkeeping(k);
        } else {
          capture_micro_step(k);
          engine_->follow_graph();
        }
      } else {
        micro_step(k, cudaEventRecordDefault);
      }
      CUDA_CHECK(cudaEventRecord(micro_events_[3 * k + 2]->get(), stream_));
      download_losses(k);
    }
    ++steps_run_;
    r.grad_norm = engine_->finish_step(scale, [&](double norm) {
      r.skipped = scaler_.update(!std::isfinite(norm));
      return r.skipped;
    });
    double loss = 0, correct = 0;
    for (i64 i = 0; i < need; ++i) {
      loss += host_losses_.get()[i];
      correct += host_correct_.get()[i];
    }
    double sums[2] = {loss, correct};
    engine_->sum_over_ranks(sums, 2);
    r.loss = sums[0] / global;
    r.correct = static_cast<std::int64_t>(std::llround(sums[1]));
    CUDA_CHECK(cudaEventRecord(ev_end_.get(), stream_));
    CUDA_CHECK(cudaEventSynchronize(ev_end_.get()));
    double fwd = 0, bwd = 0;
    for (i64 k = 0; k < config_.grad_accum; ++k) {
      fwd += cuda::elapsed_s(*micro_events_[3 * k], *micro_events_[3 * k + 1]);
      bwd += cuda::elapsed_s(*micro_events_[3 * k + 1], *micro_events_[3 * k + 2]);
    }
    r.times.forward_s = fwd;
    r.times.backward_s = bwd;
    r.times.step_s = cuda::elapsed_s(ev_start_, ev_end_);
    r.times.optimizer_s = std::max(0.0, r.times.step_s - fwd - bwd);
    record_engine_times(r.times);
    alloc_->sample();
    return r;
  }

  double evaluate_images(const std::vector<float>& images, const std::vector<std::int32_t>& labels,
                         std::int64_t& correct) override {
    const i64 B = config_.micro_batch;
    check_images(images, labels, B);
    engine_->begin_forward_only();
    upload(images.data(), labels.data());
    forward(false);
    download_losses(0);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    double sum = 0;
    for (i64 i = 0; i < B; ++i) {
      sum += host_losses_.get()[i];
      correct += host_correct_.get()[i];
    }
    return sum;
  }

  // The last forward's logits (B x classes); after a training step the buffer holds their gradient instead.
  std::vector<float> logits() const override {
    return download(logits_, config_.micro_batch * config_.network->classes);
  }

  std::vector<float> buffer(const std::string& name) const override {
    const auto [k, var] = find_buffer(name);
    const i64 C = plan_.ops[k].op.channels;
    std::vector<float> out(static_cast<std::size_t>(C));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaMemcpy(out.data(), running(k) + (var ? C : 0), C * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
  }

  void set_buffer(const std::string& name, const std::vector<float>& values) override {
    const auto [k, var] = find_buffer(name);
    const i64 C = plan_.ops[k].op.channels;
    if (static_cast<i64>(values.size()) != C)
      throw std::invalid_argument("cuda network trainer: buffer " + name + " has " + std::to_string(values.size()) +
                                  " values, the op " + std::to_string(C) + " channels");
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaMemcpy(running(k) + (var ? C : 0), values.data(), C * sizeof(float), cudaMemcpyHostToDevice));
  }

  MemoryReport memory() const override {
    MemoryReport r;
    r.peak_by_component = alloc_->peaks();
    r.peak_total = alloc_->peak_total();
    r.device_total = alloc_->device_total();
    r.device_used_baseline = alloc_->baseline_used();
    r.device_used_peak = alloc_->peak_used();
    r.host_by_component = zero_device_->host_bytes_by_component();
    r.nvme_bytes = engine_->nvme_bytes();
    return r;
  }

 private:
  static CommDtype element_type() {
    if constexpr (std::is_same_v<T, float>) return CommDtype::f32;
    else if constexpr (std::is_same_v<T, __half>) return CommDtype::f16;
    else return CommDtype::bf16;
  }

  // What the GPU path does not do, refused before anything is allocated.
  void check_supported() const {
    for (const NetworkOp& p : plan_.ops) {
      if (p.op.kind == LayerOpKind::linear)
        for (int in : p.producers)
          if (in >= 0 && plan_.ops[static_cast<std::size_t>(in)].consumers.size() != 1)
            throw std::invalid_argument("executor: the CUDA backend needs the input of linear layer " + p.op.name +
                                        " to be read by that layer only (its gradient is written, not added)");
      if (p.op.kind == LayerOpKind::max_pool2d && p.op.dilation != 1)
        throw std::invalid_argument("executor: the CUDA backend's max pooling takes dilation 1 (op " + p.op.name + ")");
    }
  }

  void* at(int allocation) const { return allocation < 0 ? nullptr : bases_[static_cast<std::size_t>(allocation)]; }
  char* bytes_at(int allocation, i64 offset) const { return static_cast<char*>(at(allocation)) + offset; }

  void allocate() {
    dev_ = network_device_layout(config_, plan_);
    for (const DeviceAllocation& a : dev_.allocations) bases_.push_back(alloc_->allocate(a.component, a.what, a.bytes));
    input_ = static_cast<T*>(at(dev_.input));
    logits_ = static_cast<T*>(at(dev_.logits));
    // Running variance starts at 1, the mean at 0 (BatchNorm2d's reset_running_stats).
    for (std::size_t k = 0; k < plan_.ops.size(); ++k)
      if (plan_.ops[k].op.kind == LayerOpKind::batch_norm) {
        const i64 C = plan_.ops[k].op.channels;
        std::vector<float> init(static_cast<std::size_t>(2 * C), 0.0f);
        std::fill(init.begin() + C, init.end(), 1.0f);
        CUDA_CHECK(cudaMemcpy(running(k), init.data(), 2 * C * sizeof(float), cudaMemcpyHostToDevice));
      }
    host_losses_.allocate(static_cast<std::size_t>(config_.grad_accum * config_.micro_batch));
    host_correct_.allocate(static_cast<std::size_t>(config_.grad_accum * config_.micro_batch));
    host_images_.allocate(static_cast<std::size_t>(config_.grad_accum * config_.micro_batch *
                                                   config_.network->input.elements()));
    host_labels_.allocate(static_cast<std::size_t>(config_.grad_accum * config_.micro_batch));
    host_dloss_.allocate(1);
    // A micro-step replays as one CUDA graph where nothing in it changes from step to step (exec/network_plan.h).
    graphs_.enable(network_step_replays_cuda_graph(config_.zero));
    for (i64 k = 0; k < 3 * config_.grad_accum; ++k) micro_events_.push_back(std::make_unique<CudaEvent>());
  }

  // Where op k's output lives, and its gradient (the last op's: the logits buffer, which the loss overwrites).
  T* out(std::size_t k) const {
    const int b = plan_.ops[k].buffer;
    if (b == plan_.ops.back().buffer) return logits_;
    const NetworkBuffer& buf = plan_.buffers[static_cast<std::size_t>(b)];
    if (buf.saved) return reinterpret_cast<T*>(bytes_at(dev_.saved, dev_.saved_offset[static_cast<std::size_t>(b)]));
    return reinterpret_cast<T*>(bytes_at(dev_.transient, buf.slot * dev_.transient_slot_bytes));
  }
  T* grad(std::size_t k) const {
    const int slot = plan_.ops[k].grad_buffer;
    return slot < 0 ? logits_ : reinterpret_cast<T*>(bytes_at(dev_.grads, slot * dev_.grad_slot_bytes));
  }
  const T* in(std::size_t k, std::size_t which) const {
    const int producer = plan_.ops[k].producers[which];
    return producer < 0 ? input_ : out(static_cast<std::size_t>(producer));
  }
  // The gradient op k writes for its input `which`: null for the network's input (it needs none).
  T* in_grad(std::size_t k, std::size_t which) const {
    const int producer = plan_.ops[k].producers[which];
    return producer < 0 ? nullptr : grad(static_cast<std::size_t>(producer));
  }
  float* statistics(std::size_t k) const { return reinterpret_cast<float*>(bytes_at(dev_.statistics, dev_.statistics_offset[k])); }
  float* running(std::size_t k) const { return reinterpret_cast<float*>(bytes_at(dev_.running, dev_.running_offset[k])); }
  int* indices(std::size_t k) const { return reinterpret_cast<int*>(bytes_at(dev_.indices, dev_.indices_offset[k])); }
  // Parameter tensors by their op-order index (NetworkOp::first_tensor, + 1 for the bias).
  T* P(int tensor) const {
    return static_cast<T*>(engine_->param_at(layout_.tensors()[layout_.network_tensor(tensor)].offset));
  }
  T* G(int tensor) const {
    return static_cast<T*>(engine_->grad_at(layout_.tensors()[layout_.network_tensor(tensor)].offset));
  }
  void need_unit(std::size_t layer) {
    const ParamUnit& u = layout_.units()[layer];
    engine_->params_needed(u.begin, u.end);
  }

  std::pair<std::size_t, bool> find_buffer(const std::string& name) const {
    for (std::size_t k = 0; k < plan_.ops.size(); ++k) {
      const NetworkOp& p = plan_.ops[k];
      if (p.op.kind != LayerOpKind::batch_norm) continue;
      if (name == p.op.name + ".running_mean") return {k, false};
      if (name == p.op.name + ".running_var") return {k, true};
    }
    throw std::invalid_argument("cuda network trainer: no buffer " + name);
  }

  cuda::ConvShape conv_shape(const NetworkOp& p) const {
    const LayerOp& op = p.op;
    return cuda::ConvShape{config_.micro_batch, p.in.channels, p.in.height, p.in.width, op.out_channels, op.kernel,
                           op.stride,           op.padding,    op.dilation, op.groups};
  }

  // Each convolution's algorithms, measured on this run's own buffers (the search may overwrite them: nothing
  // is in them yet).
  void plan_convolutions() {
    conv_ids_.assign(plan_.ops.size(), -1);
    for (std::size_t k = 0; k < plan_.ops.size(); ++k)
      if (plan_.ops[k].op.kind == LayerOpKind::conv2d)
        conv_ids_[k] = convs_->plan(conv_shape(plan_.ops[k]), const_cast<T*>(in(k, 0)), at(dev_.conv_weight), out(k));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // A 1x1 filter's (K, C, 1, 1) is its (K, 1, 1, C): cuDNN reads and writes the parameter and its gradient where
  // they are (kept 16-byte aligned by kNetworkTensorAlignment, exec/param_layout.h). Larger filters go through
  // KRSC scratch, transposed from and to torchvision's KCRS order each time (70 of ResNet-101's 104 convolutions are
  // 1x1: 210 of the 311 transposes of its step are left out).
  static bool direct_filter(const NetworkOp& p, const void* tensor) {
    return p.op.kernel == 1 && reinterpret_cast<std::uintptr_t>(tensor) % 16 == 0;
  }
  const void* filter_krsc(const NetworkOp& p) {
    const LayerOp& op = p.op;
    if (direct_filter(p, P(p.first_tensor))) return P(p.first_tensor);
    cuda::filter_to_krsc<T>(static_cast<T*>(at(dev_.conv_weight)), P(p.first_tensor), op.out_channels,
                            p.in.channels / op.groups, op.kernel, op.kernel, stream_);
    return at(dev_.conv_weight);
  }

  // Forward of one micro-batch; the loss kernel writes the scaled dlogits over the logits when training.
  // One micro-batch's images and labels to the device (from page-locked memory in a training step, so that the
  // copies are asynchronous and the step's graph can follow them).
  void upload(const float* images, const std::int32_t* labels) {
    const i64 B = config_.micro_batch;
    CUDA_CHECK(cudaMemcpyAsync(at(dev_.images), images, B * config_.network->input.elements() * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(at(dev_.labels), labels, B * sizeof(int), cudaMemcpyHostToDevice, stream_));
  }
  // The losses and correct-prediction flags of micro-step `micro` to the host.
  void download_losses(i64 micro) {
    const i64 B = config_.micro_batch;
    CUDA_CHECK(cudaMemcpyAsync(host_losses_.get() + micro * B, at(dev_.losses), B * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaMemcpyAsync(host_correct_.get() + micro * B, at(dev_.correct), B * sizeof(int),
                               cudaMemcpyDeviceToHost, stream_));
  }

  // Forward of the uploaded micro-batch and its loss; the loss kernel writes the scaled dlogits over the logits when
  // training.
  void forward(bool train) {
    const i64 B = config_.micro_batch;
    const TensorShape& input = config_.network->input;
    cuda::images_to_nhwc<T>(input_, static_cast<const float*>(at(dev_.images)), B, input.channels, input.height,
                            input.width, stream_);
    std::size_t layer = static_cast<std::size_t>(-1);
    for (std::size_t k = 0; k < plan_.ops.size(); ++k) {
      const NetworkOp& p = plan_.ops[k];
      if (p.layer != layer) need_unit(layer = p.layer);
      const T* x = in(k, 0);
      T* y = out(k);
      const i64 rows = B * p.in.height * p.in.width, n_out = B * p.out.elements();
      switch (p.op.kind) {
        case LayerOpKind::conv2d:
          convs_->forward(conv_ids_[k], y, x, filter_krsc(p));
          if (p.op.bias) cuda::add_channel_bias<T>(y, P(p.first_tensor + 1), B * p.out.height * p.out.width,
                                                   p.op.out_channels, stream_);
          break;
        case LayerOpKind::batch_norm: {
          const float eps = static_cast<float>(p.op.eps);
          if (train)
            cuda::batchnorm_forward_train<T>(y, statistics(k), statistics(k) + p.op.channels, running(k),
                                             running(k) + p.op.channels, x, P(p.first_tensor), P(p.first_tensor + 1),
                                             rows, p.op.channels, static_cast<float>(p.op.momentum), eps,
                                             static_cast<float*>(at(dev_.batchnorm_partials)), stream_);
          else
            cuda::batchnorm_forward_eval<T>(y, x, running(k), running(k) + p.op.channels, P(p.first_tensor),
                                            P(p.first_tensor + 1), rows, p.op.channels, eps, stream_);
          break;
        }
        case LayerOpKind::relu: cuda::relu_forward<T>(y, x, n_out, stream_); break;
        case LayerOpKind::max_pool2d:
          cuda::max_pool2d_forward<T>(y, indices(k), x, B, p.in.channels, p.in.height, p.in.width, p.out.height,
                                      p.out.width, p.op.kernel, p.op.stride, p.op.padding, stream_);
          break;
        case LayerOpKind::add: cuda::add_forward<T>(y, x, in(k, 1), n_out, stream_); break;
        case LayerOpKind::adaptive_avg_pool2d:
          cuda::global_avg_pool_forward<T>(y, x, B, p.in.channels, p.in.height * p.in.width, stream_);
          break;
        case LayerOpKind::flatten:
          if (y != x) cuda::flatten_nhwc_forward<T>(y, x, B, p.in.channels, p.in.height, p.in.width, stream_);
          break;
        case LayerOpKind::linear:
          matmul_->forward<T>(y, x, P(p.first_tensor), p.op.bias ? P(p.first_tensor + 1) : nullptr, nullptr, B,
                              p.op.in_features, p.op.out_features, stream_);
          break;
      }
    }
    cuda::class_crossentropy_forward_backward<T>(static_cast<float*>(at(dev_.losses)), static_cast<int*>(at(dev_.correct)),
                                                 logits_, static_cast<const int*>(at(dev_.labels)), B,
                                                 config_.network->classes, static_cast<const float*>(at(dev_.dloss)),
                                                 train, stream_);
  }

  // Captures micro-step k as a CUDA graph and launches it. A failed capture has advanced the engine's host state
  // part of the way (stage 3's schedule, the buckets reduced, on several ranks the collectives' ordinals): only
  // one rank below stage 2, whose engine does nothing in a micro-step, runs it again eagerly; elsewhere the run
  // stops with the reason.
  void capture_micro_step(i64 k) {
    const bool stateless = comm_->world() == 1 && config_.zero.stage < 2;
    graphs_.capture(
        k, stream_,
        [&] {
          engine_->begin_graph_capture(k);
          micro_step(k, cudaEventRecordExternal);
          engine_->end_graph_capture();
        },
        [&](const std::string& why) {
          engine_->abandon_graph_capture();
          if (!stateless)
            throw std::runtime_error("cuda network trainer: micro-step " + std::to_string(k) +
                                     " could not be captured as a CUDA graph: " + why);
          std::fprintf(stderr, "zeroplan: the micro-step could not be captured as a CUDA graph (%s); it runs kernel "
                               "by kernel from now on\n", why.c_str());
          micro_step(k, cudaEventRecordDefault);
        });
  }

  // A micro-step's forward, loss and backward: the work a CUDA graph replays. The event between forward and
  // backward is recorded with cudaEventRecordExternal inside a capture, so that the replay records it too.
  void micro_step(i64 k, unsigned event_flags) {
    forward(true);
    CUDA_CHECK(cudaEventRecordWithFlags(micro_events_[3 * k + 1]->get(), stream_, event_flags));
    backward();
  }

  // Backward in reverse op order. Parameter gradients are written on the first micro-step and added on the others
  // (ZeroEngine::kernels_accumulate); an input's gradient is written by the first op of the backward that reaches
  // it and added by the others (NetworkOp::grad_first_write), or is the output's gradient itself.
  void backward() {
    const i64 B = config_.micro_batch;
    const bool acc = engine_->kernels_accumulate();
    std::size_t layer = plan_.ops.back().layer + 1;
    for (std::size_t k = plan_.ops.size(); k-- > 0;) {
      const NetworkOp& p = plan_.ops[k];
      if (p.layer != layer) backward_enter_layer(*engine_, layout_, layer, p.layer);
      const T* dy = grad(k);
      T* dx = in_grad(k, 0);
      const bool add0 = !p.grad_first_write[0];
      const i64 rows = B * p.in.height * p.in.width, n_in = B * p.in.elements();
      switch (p.op.kind) {
        case LayerOpKind::conv2d: {
          const LayerOp& op = p.op;
          if (T* g = G(p.first_tensor); direct_filter(p, g)) {
            convs_->backward_filter(conv_ids_[k], g, dy, in(k, 0), acc);
          } else {
            T* dw = static_cast<T*>(at(dev_.conv_weight_grad));
            convs_->backward_filter(conv_ids_[k], dw, dy, in(k, 0), false);
            cuda::filter_grad_to_kcrs<T>(g, dw, op.out_channels, p.in.channels / op.groups, op.kernel, op.kernel, acc,
                                         stream_);
          }
          if (op.bias)
            cuda::bias_grad<T>(G(p.first_tensor + 1), dy, B * p.out.height * p.out.width, op.out_channels, acc,
                               static_cast<float*>(at(dev_.bias_partials)), stream_);
          if (dx) convs_->backward_data(conv_ids_[k], dx, dy, filter_krsc(p), add0);
          break;
        }
        case LayerOpKind::batch_norm:
          cuda::batchnorm_backward<T>(dx, G(p.first_tensor), G(p.first_tensor + 1), dy, in(k, 0), P(p.first_tensor),
                                      statistics(k), statistics(k) + p.op.channels, rows, p.op.channels, add0, acc,
                                      static_cast<float*>(at(dev_.batchnorm_partials)), stream_);
          break;
        case LayerOpKind::relu:
          // In place when the input's gradient is this one (dx == dy): threshold_backward over it.
          if (dx) cuda::relu_backward<T>(dx, out(k), dy, n_in, add0 && !p.grad_aliases_output[0], stream_);
          break;
        case LayerOpKind::max_pool2d:
          if (dx)
            cuda::max_pool2d_backward<T>(dx, dy, indices(k), B, p.in.channels, p.in.height, p.in.width, p.out.height,
                                         p.out.width, p.op.kernel, p.op.stride, p.op.padding, add0, stream_);
          break;
        case LayerOpKind::add:
          for (std::size_t i = 0; i < 2; ++i)
            if (T* d = in_grad(k, i); d && !p.grad_aliases_output[i])
              cuda::copy_or_accumulate<T>(d, dy, n_in, !p.grad_first_write[i], stream_);
          break;
        case LayerOpKind::adaptive_avg_pool2d:
          if (dx) cuda::global_avg_pool_backward<T>(dx, dy, B, p.in.channels, p.in.height * p.in.width, add0, stream_);
          break;
        case LayerOpKind::flatten:
          if (!dx || p.grad_aliases_output[0]) break;
          if (out(k) == in(k, 0)) cuda::copy_or_accumulate<T>(dx, dy, n_in, add0, stream_);  // a view
          else cuda::flatten_nhwc_backward<T>(dx, dy, B, p.in.channels, p.in.height, p.in.width, add0, stream_);
          break;
        case LayerOpKind::linear:
          matmul_->backward_weight<T>(G(p.first_tensor), dy, in(k, 0), B, p.op.in_features, p.op.out_features, acc,
                                      stream_);
          if (p.op.bias)
            cuda::bias_grad<T>(G(p.first_tensor + 1), dy, B, p.op.out_features, acc,
                               static_cast<float*>(at(dev_.bias_partials)), stream_);
          if (dx) matmul_->backward_input<T>(dx, dy, P(p.first_tensor), B, p.op.in_features, p.op.out_features, stream_);
          break;
      }
    }
    engine_->gradients_final_from(0);
  }

  std::vector<float> download(const T* src, i64 n) const {
    std::vector<T> raw(static_cast<std::size_t>(n));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaMemcpy(raw.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> values(static_cast<std::size_t>(n));
    for (i64 i = 0; i < n; ++i) values[i] = cuda::host_to_float(raw[i]);
    return values;
  }

  ExecConfig config_;
  ParamLayout layout_;
  LossScaler scaler_;
  NetworkPlan plan_;
  NetworkDeviceLayout dev_;
  std::string device_name_;
  std::unique_ptr<Communicator> own_comm_;
  Communicator* comm_ = nullptr;
  // declaration order is release order reversed: host buffers, events, cuDNN and cuBLASLt, the engine, device
  // memory, the stream, the communicator
  CudaStream stream_;
  std::unique_ptr<DeviceAllocator> alloc_;
  std::unique_ptr<CudaZeroDevice> zero_device_;
  std::unique_ptr<ZeroEngine> engine_;
  std::unique_ptr<cuda::Matmul> matmul_;
  std::unique_ptr<cuda::CudnnConvolutions> convs_;
  CudaEvent ev_start_, ev_end_;
  std::vector<std::unique_ptr<CudaEvent>> micro_events_;  // per micro-step: forward start, backward start, end
  std::vector<void*> bases_;  // per NetworkDeviceLayout allocation
  std::vector<int> conv_ids_;  // per op: its cuDNN plan
  T* input_ = nullptr;
  T* logits_ = nullptr;
  PinnedHost<float> host_losses_;
  PinnedHost<int> host_correct_;
  PinnedHost<float> host_images_;
  PinnedHost<std::int32_t> host_labels_;
  PinnedHost<float> host_dloss_;  // the step's loss gradient scale, uploaded before the micro-steps
  cuda::StepGraphs graphs_;  // declared last: destroyed first, before the buffers its graphs name
  std::int64_t steps_run_ = 0;
};

}  // namespace

std::unique_ptr<Trainer> make_cuda_network_trainer(const ExecConfig& config, Communicator* comm) {
  switch (config.precision) {
    case ExecPrecision::fp32: return std::make_unique<CudaNetworkTrainer<float>>(config, comm);
    case ExecPrecision::fp16: return std::make_unique<CudaNetworkTrainer<__half>>(config, comm);
    case ExecPrecision::bf16: return std::make_unique<CudaNetworkTrainer<__nv_bfloat16>>(config, comm);
  }
  throw std::invalid_argument("executor: unknown precision");
}

}  // namespace zeroplan::exec
