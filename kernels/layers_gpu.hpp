#pragma once
// GPU twins of the mlp's layer styles (model/layers/: linear, batchnorm, relu, dropout), over device
// pointers to row-major [B, C] activations (B = rows, IN/OUT/C = features). Same formulas, same
// precision of every intermediate as the CPU reference; tests/gpu compare each against it.
// All work is enqueued on `stream`; linear layers run cuBLAS on the stream of the handle in Blas.
//
// What is bitwise equal to the CPU: dropout draws and masks, bf16/fp16 rounding, bias gradients and the
// BatchNorm sums of x and dy (fixed per-column order). Everything else equals it up to the order of
// float operations (cuBLAS's GEMM blocking, fused multiply-adds).
//
// Differences in contract, where the engine wants them: the BatchNorm sums OVERWRITE their outputs (the
// CPU accumulates chunk partials), and bn_backward_sums also adds its sums to dgamma/dbeta (the CPU
// engine does that step itself).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "numerics/bits.hpp"

namespace divsim::gpu {

// fp32: CUBLAS_COMPUTE_32F_PEDANTIC (IEEE float multiply-adds, no tensor-core down-conversion);
// tf32: CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores with TF32 inputs, float accumulation).
enum class GemmMath { fp32_pedantic, tf32 };

struct Blas {
  cublasHandle_t handle;
  cudaStream_t stream;  // the handle's stream: bias kernels follow the GEMMs on it
  GemmMath math;
};

// y[B,OUT] = x[B,IN] w[OUT,IN]^T + b[OUT]
void linear_forward(const Blas& blas, const float* x, const float* w, const float* b, int rows, int in, int out,
                    float* y);
// dw[OUT,IN] += dy^T x ; db[OUT] += column sums of dy (rows in order) ; dx[B,IN] = dy w (skipped if null)
void linear_backward(const Blas& blas, const float* dy, const float* x, const float* w, int rows, int in, int out,
                     float* dw, float* db, float* dx);

void relu_forward(const float* x, float* y, std::size_t n, cudaStream_t stream);
void relu_backward(const float* dy, const float* y, float* dx, std::size_t n, cudaStream_t stream);

// out[i, j] = KeyedStream(seed, purpose, w1, uint32(w2[i]), w3) draw j of fill_uniform, for j < cols.
void keyed_uniform_rows(std::uint64_t seed, std::uint32_t purpose, std::uint32_t w1, const std::int64_t* w2,
                        std::uint32_t w3, int rows, int cols, float* out, cudaStream_t stream);
// In place: m = m < keep ? scale : 0 (inverted dropout's mask from uniform draws).
void dropout_mask(float* mask, std::size_t n, float keep, float scale, cudaStream_t stream);
void dropout_apply(const float* x, const float* mask, float* y, std::size_t n, cudaStream_t stream);

// y = x rounded like numerics/bits round_to_format; bf16 and fp16 only (tf32 is the tensor cores' job).
// Throws std::invalid_argument for other formats.
void round_to_format(const float* x, float* y, std::size_t n, MatmulFormat format, cudaStream_t stream);

// BatchNorm1d, training mode. sum[C] = sum_i x_ic (double, rows in order).
void bn_partial_sum(const float* x, int rows, int cols, double* sum, cudaStream_t stream);
// sqdev[C] = sum_i (x_ic - mean_c)^2 (double).
void bn_partial_sqdev(const float* x, int rows, int cols, const double* mean, double* sqdev, cudaStream_t stream);
// xhat = (x - mean) * invstd ; y = gamma * xhat + beta
void bn_normalize(const float* x, int rows, int cols, const float* mean, const float* invstd, const float* gamma,
                  const float* beta, float* xhat, float* y, cudaStream_t stream);
// Eval mode: normalise with the running statistics.
void bn_forward_eval(const float* x, int rows, int cols, const float* running_mean, const float* running_var,
                     double eps, const float* gamma, const float* beta, float* y, cudaStream_t stream);
// sum_dy[C] = sum_i dy ; sum_dy_xhat[C] = sum_i dy*xhat (double, rows in order);
// then dbeta += float(sum_dy), dgamma += float(sum_dy_xhat).
void bn_backward_sums(const float* dy, const float* xhat, int rows, int cols, double* sum_dy, double* sum_dy_xhat,
                      float* dgamma, float* dbeta, cudaStream_t stream);
// dx = gamma * invstd * (dy - sum_dy/n - xhat * sum_dy_xhat/n), with the sums over all n rows that shared
// the statistics (device arrays).
void bn_backward_dx(const float* dy, const float* xhat, int rows, int cols, const float* invstd, const float* gamma,
                    const double* sum_dy, const double* sum_dy_xhat, double n, float* dx, cudaStream_t stream);

}  // namespace divsim::gpu
