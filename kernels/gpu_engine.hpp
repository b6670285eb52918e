#pragma once
// The GPU backend's entry point for the step loop (run.device=cuda). Plain C++: no CUDA types, so train/
// includes it without the CUDA headers. The engine mirrors train/step_engine.hpp on one GPU per process;
// kernels/gpu_engine.cpp says what matches the CPU bit for bit and what does not.
#include <mpi.h>

#include <memory>

#include "train/engine.hpp"

namespace divsim {

// Collective over comm: each process takes the GPU of its node-local rank (modulo the GPUs it sees)
// and builds the engine for its logical ranks. Throws ConfigError on every process if any process has
// no usable GPU ("run.device"), or for dist.reduce=deterministic, which is CPU-only ("dist.reduce").
// The kernels cover model.type=mlp (ConfigError "run.device" for a model with other layer styles).
// `process` is this process's rank in comm, for messages.
std::unique_ptr<Engine> make_gpu_engine(const Model& model, const Dataset& train, Reducer& reducer,
                                        const EngineSettings& settings, int process, MPI_Comm comm);

}  // namespace divsim
