// The CUDA backend's communicator: NCCL collectives on a dedicated communication stream of the rank's GPU, so
// gradient reductions overlap the backward pass (the compute stream and this stream are ordered with events by
// the ZeRO engine). Every NCCL and CUDA call is checked and reports file:line.
#pragma once

#include <memory>
#include <string>

#include "exec/comm/communicator.h"

namespace zeroplan::exec {

// NCCL's 128-byte unique id as 256 hex characters, so a launcher can hand it to its workers in the environment.
std::string make_nccl_unique_id_hex();

// One rank of `world` on GPU `device` (cudaSetDevice is called), joined through the id from
// make_nccl_unique_id_hex() (every rank the same). `mpi`, when not null and the id is empty, is used to
// broadcast a fresh id from rank 0 (the mpirun path).
std::unique_ptr<Communicator> make_nccl_communicator(int rank, int world, int device, const std::string& id_hex,
                                                     Communicator* mpi);

// One rank on the current GPU without NCCL: collectives of one rank are copies (cudaMemcpyAsync on its own
// stream); nothing is counted, as nothing crosses a wire.
std::unique_ptr<Communicator> make_single_gpu_communicator();

}  // namespace zeroplan::exec
