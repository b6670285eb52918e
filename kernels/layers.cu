// CUDA kernels and cuBLAS calls of the GPU layers (layers_gpu.hpp), each mirroring its CPU twin in
// model/layers.cpp line for line. Kept plain on purpose: one thread per element, or one per feature
// column where the CPU sums over rows (that keeps the summation order, and so the bits, of those sums).
// No fusion, no shared-memory tiling: an MLP's layers are small and the GEMMs dominate.
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>

#include "config/run_config.hpp"
#include "cuda_util.hpp"
#include "layers_gpu.hpp"
#include "philox.cuh"

namespace divsim::gpu {
namespace {

constexpr int kThreads = 256;

// At least one block: an empty launch is an error, and the kernels' bounds checks make extra threads idle.
unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::max<std::size_t>(1, (n + kThreads - 1) / kThreads));
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

__device__ std::size_t thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// cuBLAS is column-major: a row-major [r, c] matrix is, to cuBLAS, its [c, r] transpose with leading
// dimension c. C[m,n] = op(A)[m,k] op(B)[k,n] + beta C, all float, in the math mode of `blas`.
void gemm(const Blas& blas, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  const float alpha = 1.0f;
  const bool tf32 = blas.math == GemmMath::tf32;
  check(cublasSetMathMode(blas.handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  check(cublasGemmEx(blas.handle, ta, tb, m, n, k, &alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, &beta, c,
                     CUDA_R_32F, ldc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

__global__ void add_bias_kernel(float* y, const float* b, int rows, int cols) {
  const std::size_t t = thread_index();
  if (t < static_cast<std::size_t>(rows) * cols) y[t] += b[t % cols];
}

__global__ void bias_grad_kernel(const float* dy, int rows, int cols, float* db) {
  const std::size_t c = thread_index();
  if (c >= static_cast<std::size_t>(cols)) return;
  float acc = db[c];
  for (int i = 0; i < rows; ++i) acc += dy[static_cast<std::size_t>(i) * cols + c];
  db[c] = acc;
}

__global__ void relu_forward_kernel(const float* x, float* y, std::size_t n) {
  const std::size_t t = thread_index();
  if (t < n) y[t] = x[t] < 0.0f ? 0.0f : x[t];  // std::max(x, 0): NaN stays NaN, as in PyTorch
}

__global__ void relu_backward_kernel(const float* dy, const float* y, float* dx, std::size_t n) {
  const std::size_t t = thread_index();
  if (t < n) dx[t] = y[t] > 0.0f ? dy[t] : 0.0f;
}

// One thread per Philox block (4 draws) of one row.
__global__ void keyed_uniform_rows_kernel(StreamKey key, std::uint32_t w1, const std::int64_t* w2, std::uint32_t w3,
                                          int rows, int cols, float* out) {
  const std::size_t blocks_per_row = (static_cast<std::size_t>(cols) + 3) / 4;
  const std::size_t t = thread_index();
  if (t >= rows * blocks_per_row) return;
  const std::size_t i = t / blocks_per_row;
  const auto block = static_cast<std::uint32_t>(t % blocks_per_row);
  const PhiloxWords words = fill_uniform_block(key, block, w1, static_cast<std::uint32_t>(w2[i]), w3);
  for (std::size_t k = 0; k < 4 && 4 * block + k < static_cast<std::size_t>(cols); ++k)
    out[i * cols + 4 * block + k] = uniform_from_word(words.v[k]);
}

__global__ void dropout_mask_kernel(float* mask, std::size_t n, float keep, float scale) {
  const std::size_t t = thread_index();
  if (t < n) mask[t] = mask[t] < keep ? scale : 0.0f;
}

__global__ void multiply_kernel(const float* x, const float* m, float* y, std::size_t n) {
  const std::size_t t = thread_index();
  if (t < n) y[t] = x[t] * m[t];
}

// Round to nearest even at `mantissa_bits`, Inf/NaN unchanged: for 7 bits numerics/bits.hpp's round_bf16
// on every finite value (a NaN keeps its payload here, where PyTorch's CPU conversion writes 0xFFFF).
__device__ float round_mantissa(float x, int mantissa_bits) {
  const std::uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  const int drop = 23 - mantissa_bits;
  const std::uint32_t lsb = (u >> drop) & 1u;
  const std::uint32_t rounding = (1u << (drop - 1)) - 1u + lsb;
  return __uint_as_float((u + rounding) & ~((1u << drop) - 1u));
}

__global__ void round_bf16_kernel(const float* x, float* y, std::size_t n) {
  const std::size_t t = thread_index();
  if (t < n) y[t] = round_mantissa(x[t], 7);
}

__global__ void round_fp16_kernel(const float* x, float* y, std::size_t n) {
  const std::size_t t = thread_index();
  if (t < n) y[t] = __half2float(__float2half_rn(x[t]));
}

__global__ void bn_sum_kernel(const float* x, int rows, int cols, double* sum) {
  const std::size_t c = thread_index();
  if (c >= static_cast<std::size_t>(cols)) return;
  double s = 0.0;
  for (int i = 0; i < rows; ++i) s += x[static_cast<std::size_t>(i) * cols + c];
  sum[c] = s;
}

__global__ void bn_sqdev_kernel(const float* x, int rows, int cols, const double* mean, double* sqdev) {
  const std::size_t c = thread_index();
  if (c >= static_cast<std::size_t>(cols)) return;
  double s = 0.0;
  for (int i = 0; i < rows; ++i) {
    const double d = x[static_cast<std::size_t>(i) * cols + c] - mean[c];
    s += d * d;
  }
  sqdev[c] = s;
}

__global__ void bn_normalize_kernel(const float* x, int rows, int cols, const float* mean, const float* invstd,
                                    const float* gamma, const float* beta, float* xhat, float* y) {
  const std::size_t t = thread_index();
  if (t >= static_cast<std::size_t>(rows) * cols) return;
  const std::size_t c = t % cols;
  const float h = (x[t] - mean[c]) * invstd[c];
  xhat[t] = h;
  y[t] = h * gamma[c] + beta[c];
}

__global__ void bn_forward_eval_kernel(const float* x, int rows, int cols, const float* running_mean,
                                       const float* running_var, double eps, const float* gamma, const float* beta,
                                       float* y) {
  const std::size_t t = thread_index();
  if (t >= static_cast<std::size_t>(rows) * cols) return;
  const std::size_t c = t % cols;
  const auto invstd = static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  y[t] = (x[t] - running_mean[c]) * invstd * gamma[c] + beta[c];
}

__global__ void bn_backward_sums_kernel(const float* dy, const float* xhat, int rows, int cols, double* sum_dy,
                                        double* sum_dy_xhat, float* dgamma, float* dbeta) {
  const std::size_t c = thread_index();
  if (c >= static_cast<std::size_t>(cols)) return;
  double s = 0.0, sx = 0.0;
  for (int i = 0; i < rows; ++i) {
    const std::size_t t = static_cast<std::size_t>(i) * cols + c;
    s += dy[t];
    sx += static_cast<double>(dy[t]) * xhat[t];  // exact product: no rounding for a fused add to skip
  }
  sum_dy[c] = s;
  sum_dy_xhat[c] = sx;
  dbeta[c] += static_cast<float>(s);
  dgamma[c] += static_cast<float>(sx);
}

__global__ void bn_backward_dx_kernel(const float* dy, const float* xhat, int rows, int cols, const float* invstd,
                                      const float* gamma, const double* sum_dy, const double* sum_dy_xhat, double n,
                                      float* dx) {
  const std::size_t t = thread_index();
  if (t >= static_cast<std::size_t>(rows) * cols) return;
  const std::size_t c = t % cols;
  const auto mean_dy = static_cast<float>(sum_dy[c] / n);
  const auto mean_dy_xhat = static_cast<float>(sum_dy_xhat[c] / n);
  const float scale = gamma[c] * invstd[c];
  dx[t] = scale * (dy[t] - mean_dy - xhat[t] * mean_dy_xhat);
}

}  // namespace

void linear_forward(const Blas& blas, const float* x, const float* w, const float* b, int rows, int in, int out,
                    float* y) {
  // y^T[OUT,B] = w[OUT,IN] x^T[IN,B]: cuBLAS sees w as [IN,OUT] (transposed back) and x^T as [IN,B].
  gemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, w, in, x, in, 0.0f, y, out);
  add_bias_kernel<<<blocks_for(static_cast<std::size_t>(rows) * out), kThreads, 0, blas.stream>>>(y, b, rows, out);
  check_launch("add_bias_kernel");
}

void linear_backward(const Blas& blas, const float* dy, const float* x, const float* w, int rows, int in, int out,
                     float* dw, float* db, float* dx) {
  // dw^T[IN,OUT] += x^T[IN,B] dy[B,OUT]: cuBLAS sees x^T as is and dy as [OUT,B] (transposed back).
  gemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, x, in, dy, out, 1.0f, dw, in);
  bias_grad_kernel<<<blocks_for(static_cast<std::size_t>(out)), kThreads, 0, blas.stream>>>(dy, rows, out, db);
  check_launch("bias_grad_kernel");
  // dx^T[IN,B] = w^T[IN,OUT] dy^T[OUT,B]: both are what cuBLAS sees already.
  if (dx) gemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, w, in, dy, out, 0.0f, dx, in);
}

void relu_forward(const float* x, float* y, std::size_t n, cudaStream_t stream) {
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  check_launch("relu_forward_kernel");
}

void relu_backward(const float* dy, const float* y, float* dx, std::size_t n, cudaStream_t stream) {
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, y, dx, n);
  check_launch("relu_backward_kernel");
}

void keyed_uniform_rows(std::uint64_t seed, std::uint32_t purpose, std::uint32_t w1, const std::int64_t* w2,
                        std::uint32_t w3, int rows, int cols, float* out, cudaStream_t stream) {
  const std::size_t threads = static_cast<std::size_t>(rows) * ((static_cast<std::size_t>(cols) + 3) / 4);
  keyed_uniform_rows_kernel<<<blocks_for(threads), kThreads, 0, stream>>>(stream_key(seed, purpose), w1, w2, w3,
                                                                          rows, cols, out);
  check_launch("keyed_uniform_rows_kernel");
}

void dropout_mask(float* mask, std::size_t n, float keep, float scale, cudaStream_t stream) {
  dropout_mask_kernel<<<blocks_for(n), kThreads, 0, stream>>>(mask, n, keep, scale);
  check_launch("dropout_mask_kernel");
}

void dropout_apply(const float* x, const float* mask, float* y, std::size_t n, cudaStream_t stream) {
  multiply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, mask, y, n);
  check_launch("multiply_kernel");
}

void round_to_format(const float* x, float* y, std::size_t n, MatmulFormat format, cudaStream_t stream) {
  switch (format) {
    case MatmulFormat::bf16:
      round_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
      break;
    case MatmulFormat::fp16:
      round_fp16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
      break;
    case MatmulFormat::fp32:
    case MatmulFormat::tf32:
      throw std::invalid_argument("gpu::round_to_format: " + std::string(name_of(format)) +
                                  " inputs are not rounded by a kernel");
  }
  check_launch("round_to_format");
}

void bn_partial_sum(const float* x, int rows, int cols, double* sum, cudaStream_t stream) {
  bn_sum_kernel<<<blocks_for(static_cast<std::size_t>(cols)), kThreads, 0, stream>>>(x, rows, cols, sum);
  check_launch("bn_sum_kernel");
}

void bn_partial_sqdev(const float* x, int rows, int cols, const double* mean, double* sqdev, cudaStream_t stream) {
  bn_sqdev_kernel<<<blocks_for(static_cast<std::size_t>(cols)), kThreads, 0, stream>>>(x, rows, cols, mean, sqdev);
  check_launch("bn_sqdev_kernel");
}

void bn_normalize(const float* x, int rows, int cols, const float* mean, const float* invstd, const float* gamma,
                  const float* beta, float* xhat, float* y, cudaStream_t stream) {
  bn_normalize_kernel<<<blocks_for(static_cast<std::size_t>(rows) * cols), kThreads, 0, stream>>>(
      x, rows, cols, mean, invstd, gamma, beta, xhat, y);
  check_launch("bn_normalize_kernel");
}

void bn_forward_eval(const float* x, int rows, int cols, const float* running_mean, const float* running_var,
                     double eps, const float* gamma, const float* beta, float* y, cudaStream_t stream) {
  bn_forward_eval_kernel<<<blocks_for(static_cast<std::size_t>(rows) * cols), kThreads, 0, stream>>>(
      x, rows, cols, running_mean, running_var, eps, gamma, beta, y);
  check_launch("bn_forward_eval_kernel");
}

void bn_backward_sums(const float* dy, const float* xhat, int rows, int cols, double* sum_dy, double* sum_dy_xhat,
                      float* dgamma, float* dbeta, cudaStream_t stream) {
  bn_backward_sums_kernel<<<blocks_for(static_cast<std::size_t>(cols)), kThreads, 0, stream>>>(
      dy, xhat, rows, cols, sum_dy, sum_dy_xhat, dgamma, dbeta);
  check_launch("bn_backward_sums_kernel");
}

void bn_backward_dx(const float* dy, const float* xhat, int rows, int cols, const float* invstd, const float* gamma,
                    const double* sum_dy, const double* sum_dy_xhat, double n, float* dx, cudaStream_t stream) {
  bn_backward_dx_kernel<<<blocks_for(static_cast<std::size_t>(rows) * cols), kThreads, 0, stream>>>(
      dy, xhat, rows, cols, invstd, gamma, sum_dy, sum_dy_xhat, n, dx);
  check_launch("bn_backward_dx_kernel");
}

}  // namespace divsim::gpu
