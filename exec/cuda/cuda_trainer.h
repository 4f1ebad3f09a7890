// The CUDA trainers: the transformer block pipeline (GPT-2, Llama) and layer-list networks (ResNet), one rank
// each. Declared without CUDA headers so cli/ can include it.
#pragma once

#include <memory>
#include <string>

#include "exec/comm/communicator.h"
#include "exec/trainer.h"

namespace zeroplan::exec {

// True when a CUDA device can be used; otherwise `why` (if given) says why not.
bool cuda_device_available(std::string* why = nullptr);
int cuda_device_count();
// One rank on the current GPU (the communicator's, which called cudaSetDevice); comm null means one rank.
// Throws DeviceOutOfMemory (exec/cuda/device_allocator.h) naming the tensor when the model does not fit.
// A layer-list network (config.network set) gets the network trainer (exec/cuda/cuda_network_trainer.cu).
std::unique_ptr<Trainer> make_cuda_trainer(const ExecConfig& config, Communicator* comm = nullptr);
std::unique_ptr<Trainer> make_cuda_network_trainer(const ExecConfig& config, Communicator* comm);

}  // namespace zeroplan::exec
