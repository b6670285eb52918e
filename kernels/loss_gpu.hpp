#pragma once
// GPU twins of model/loss.hpp over device pointers, one thread per row. Instead of summing the losses,
// they write the terms the CPU adds to LossSums::loss, in the CPU's order, so the host can add them up
// exactly as the CPU does: cross-entropy one term per row ([B]), ASL one per class ([B, C]).
// correct[i] = 1 when the row's argmax is its label.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace divsim::gpu {

// Softmax cross-entropy with label smoothing; dlogits = grad_scale * (p - target).
void cross_entropy_forward_backward(const float* logits, const std::int32_t* labels, int rows, int classes,
                                    double label_smoothing, float grad_scale, float* dlogits, double* terms,
                                    std::int32_t* correct, cudaStream_t stream);
// The asymmetric loss (model/loss.hpp); terms are [rows, classes].
void asl_forward_backward(const float* logits, const std::int32_t* labels, int rows, int classes, double gamma_pos,
                          double gamma_neg, double margin, float grad_scale, float* dlogits, double* terms,
                          std::int32_t* correct, cudaStream_t stream);
// Evaluation: terms[i] = -log p(label), no smoothing.
void cross_entropy_eval(const float* logits, const std::int32_t* labels, int rows, int classes, double* terms,
                        std::int32_t* correct, cudaStream_t stream);

}  // namespace divsim::gpu
