// The CUDA trainer: GPT-2 on one GPU (world size 1; the flat parameter/gradient/optimizer buffers are the
// partitions ZeRO will split). Declared without CUDA headers so cli/ can include it.
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
std::unique_ptr<Trainer> make_cuda_trainer(const ExecConfig& config, Communicator* comm = nullptr);

}  // namespace zeroplan::exec
