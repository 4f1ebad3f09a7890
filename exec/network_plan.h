// How a layer-list network (exec_config.h NetworkShape: ResNet-101 as torchvision builds it) runs, decided once
// from the description: every op's input and output shapes, which op wrote each input and which ops read each
// output, the parameter tensors it owns, and where the GPU keeps each tensor and its gradient. Both backends walk
// the same op list (exec/cpu/cpu_network_trainer.cpp keeps one host buffer per op); the CUDA trainer
// (exec/cuda/cuda_network_trainer.cu) allocates exactly the buffers named here, and exec/activation_accounting.cpp
// counts the same buffers for the planner, so a prediction and a run agree by construction.
//
// Device storage follows what PyTorch's autograd keeps for torchvision's ResNet (the description's
// activation_elements_per_sample counts those tensors): a tensor some backward reads is SAVED (a buffer of its own
// for the whole step): a convolution's or linear's input, a BatchNorm's input, a ReLU's output. ReLU and add run in
// place over their first input when nothing else reads it and no backward needs it (torchvision's
// ReLU(inplace=True) and `out += identity`), so BatchNorm's output, the residual sum and the ReLU after it share one
// buffer; flatten of a 1x1 map is a view. Every other tensor is TRANSIENT (the downsample BatchNorm's output, read
// once by the add): it lives in one of a few shared slots from its write to its last read. Gradients live in
// shared slots from the first backward that writes them to their producer's backward; a ReLU's, an add's first
// input's and a view's gradient is the output's gradient itself (the in-place backward of autograd).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "exec/exec_config.h"

namespace zeroplan::exec {

struct NetworkOp {
  LayerOp op;
  std::size_t layer = 0;       // the description's layer (the ZeRO unit) the op belongs to
  std::vector<int> producers;  // per input: the op that wrote it, -1 for the network's input
  std::vector<int> consumers;  // the ops reading this op's output, in forward order
  TensorShape in, out;         // one sample's input (the first) and output shapes
  int first_tensor = -1;       // its first parameter tensor in op order (ParamLayout::network_tensor), -1: none
  // Device storage (elements are per sample; the trainer multiplies by the micro-batch).
  int buffer = -1;             // NetworkPlan::buffers index of the output
  int grad_buffer = -1;        // NetworkPlan::grad_slot index of the output's gradient, -1 for the last op's (logits)
  // Per input: whether its gradient is this op's output gradient itself (no work), and otherwise whether this
  // op's backward is the first to write that gradient (write) or adds to what a later op wrote (accumulate).
  std::vector<bool> grad_aliases_output;
  std::vector<bool> grad_first_write;
};

struct NetworkBuffer {
  std::int64_t elements = 0;  // per sample: the largest tensor held
  bool saved = false;         // kept from forward to backward (else a transient slot)
  int slot = -1;              // transient: its slot index in NetworkPlan::transient_slots
};

struct NetworkPlan {
  std::vector<NetworkOp> ops;
  std::vector<NetworkBuffer> buffers;
  std::int64_t transient_slots = 0, transient_slot_elements = 0;  // per sample
  std::int64_t grad_slots = 0, grad_slot_elements = 0;            // per sample
  std::int64_t widest_elements = 0;                               // per sample, any op's input or output
  int param_tensors = 0;                                          // parameter tensors the ops own
};

// Plans `network` (shapes checked as core/layer_ops.h check_layer_ops does; throws std::invalid_argument naming the
// op when a tensor is read before it is written or an add reads one tensor twice).
NetworkPlan plan_network(const NetworkShape& network);

// Output shape of an op (conv2d and pooling: PyTorch's floor formula; adaptive average pooling: 1x1).
TensorShape op_output_shape(const LayerOp& op, const TensorShape& in);
// Whether the CUDA network trainer replays each micro-step as one CUDA graph (exec/cuda/step_graphs.cuh), the ZeRO
// engine's collectives and copies inside it: wherever the engine does no host work within a micro-step
// (ZeroEngine::graph_replayable). Elsewhere it launches every kernel from the host.
bool network_step_replays_cuda_graph(const ZeroSettings& zero);

// PyTorch's output size of a convolution or pooling window (torch.nn.Conv2d / MaxPool2d "Shape"):
//   (in + 2*padding - dilation*(kernel - 1) - 1) / stride + 1
std::int64_t window_output_size(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t padding,
                                std::int64_t dilation = 1);

}  // namespace zeroplan::exec
