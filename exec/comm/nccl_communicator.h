// The CUDA backend's communicator: NCCL collectives on a dedicated communication stream of the rank's GPU, so
// gradient reductions overlap the backward pass (the compute stream and this stream are ordered with events by
// the ZeRO engine). Every NCCL and CUDA call is checked and reports file:line.
//
// Failures across ranks, as the NCCL user guide's "Fault Tolerance" and "Error handling and communicator abort"
// sections describe: the communicator is created non-blocking (ncclConfig_t.blocking = 0), so no NCCL call can
// wait forever: a call that answers ncclInProgress is polled with ncclCommGetAsyncError against the collective
// timeout. A CUDA event recorded after each collective lets a watchdog thread (exec/comm/collective_watchdog.h)
// see which collective the rank waits for and since when, as PyTorch's ProcessGroupNCCL watchdog does; past the
// timeout, or on an asynchronous NCCL error, it writes one line naming the rank, the collective, the step and
// the error, calls ncclCommAbort (which ends the kernels that wait for a dead peer) and stops the process, so
// that the launcher ends the others. A communicator destroyed while an exception propagates is aborted, never
// destroyed (ncclCommDestroy would wait for collectives that peers never join).
#pragma once

#include <memory>
#include <string>

#include "exec/comm/communicator.h"

namespace zeroplan::exec {

// NCCL's 128-byte unique id as 256 hex characters, so a launcher can hand it to its workers in the environment.
std::string make_nccl_unique_id_hex();

// One rank of `world` on GPU `device` (cudaSetDevice is called), joined through the id from
// make_nccl_unique_id_hex() (every rank the same). `mpi`, when not null and the id is empty, is used to
// broadcast a fresh id from rank 0 (the mpirun path). Initialization that does not complete within the watch's
// timeout (a peer never joined) is aborted and thrown. copy_engine_gathers: the communicator is created with NCCL's
// zero-CTA policy and allocate_window registers symmetric windows, so that all-gathers into them run on the copy
// engines. The runs asked for it (run/training_run.cpp: stage 3 of a transformer, one process a GPU) are the ones
// measured with it (bench/llama/results/2026-11-30-h200x2/call7, call8); ranks as threads of one process (the GPU
// tests) must not: NCCL 2.28.3's window registration failed there (internal error at the first all-gather).
std::unique_ptr<Communicator> make_nccl_communicator(int rank, int world, int device, const std::string& id_hex,
                                                     Communicator* mpi, const CommWatch& watch = {},
                                                     bool copy_engine_gathers = false);

// One rank on the current GPU without NCCL: collectives of one rank are copies (cudaMemcpyAsync on its own
// stream); nothing is counted, as nothing crosses a wire.
std::unique_ptr<Communicator> make_single_gpu_communicator();

}  // namespace zeroplan::exec
