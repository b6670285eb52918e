// CUDA kernels of the training and evaluation losses (loss_gpu.hpp), mirroring model/loss.cpp line for
// line: row reductions in double, dlogits rounded to float at the end. One thread per row: C is the
// number of classes (10 for Fashion-MNIST), far too few to share out.
#include "cuda_util.hpp"
#include "loss_gpu.hpp"

namespace divsim::gpu {
namespace {

constexpr int kThreads = 128;

unsigned blocks_for(int rows) { return static_cast<unsigned>(rows > 0 ? (rows + kThreads - 1) / kThreads : 1); }

__device__ int row_index() { return static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); }

struct RowSoftmax {
  double max = 0.0, log_sum_exp = 0.0;  // log p_c = logit_c - max - log_sum_exp
  int argmax = 0;
};

__device__ RowSoftmax row_softmax(const float* z, int classes) {
  RowSoftmax r;
  r.max = z[0];
  for (int c = 1; c < classes; ++c)
    if (z[c] > r.max) {
      r.max = z[c];
      r.argmax = c;
    }
  double s = 0.0;
  for (int c = 0; c < classes; ++c) s += exp(z[c] - r.max);
  r.log_sum_exp = log(s);
  return r;
}

__global__ void cross_entropy_kernel(const float* logits, const std::int32_t* labels, int rows, int classes,
                                     double label_smoothing, float grad_scale, float* dlogits, double* terms,
                                     std::int32_t* correct) {
  const int i = row_index();
  if (i >= rows) return;
  const float* z = logits + static_cast<std::size_t>(i) * classes;
  float* dz = dlogits + static_cast<std::size_t>(i) * classes;
  const RowSoftmax r = row_softmax(z, classes);
  const int y = labels[i];
  const double off = label_smoothing / static_cast<double>(classes);  // target mass on every class
  double sum_neg_logp = 0.0;
  for (int c = 0; c < classes; ++c) {
    const double logp = z[c] - r.max - r.log_sum_exp;
    sum_neg_logp -= logp;
    const double target = off + (c == y ? 1.0 - label_smoothing : 0.0);
    dz[c] = grad_scale * static_cast<float>(exp(logp) - target);
  }
  const double nll = -(z[y] - r.max - r.log_sum_exp);
  terms[i] = (1.0 - label_smoothing) * nll + off * sum_neg_logp;
  correct[i] = r.argmax == y;
}

__global__ void asl_kernel(const float* logits, const std::int32_t* labels, int rows, int classes, double gamma_pos,
                           double gamma_neg, double margin, float grad_scale, float* dlogits, double* terms,
                           std::int32_t* correct) {
  const int i = row_index();
  if (i >= rows) return;
  const std::size_t row = static_cast<std::size_t>(i) * classes;
  const float* z_row = logits + row;
  int argmax = 0;
  for (int c = 0; c < classes; ++c) {
    const double z = z_row[c];
    if (z > z_row[argmax]) argmax = c;
    const double p = 1.0 / (1.0 + exp(-z));
    double value = 0.0, grad = 0.0;  // loss term and its derivative w.r.t. z
    if (c == labels[i]) {
      // d/dz of -(1-p)^g log p = (1-p)^g (g p log p - (1 - p))
      const double log_p = -log1p(exp(-z));  // log sigmoid, stable
      const double q = pow(1.0 - p, gamma_pos);
      value = -q * log_p;
      grad = q * (gamma_pos * p * log_p - (1.0 - p));
    } else {
      const double pm = p - margin < 0.0 ? 0.0 : p - margin;  // std::max(p - margin, 0.0)
      if (pm > 0.0) {
        // d/dz of -pm^g log(1-pm), with dpm/dz = p (1 - p)
        const double log_1m = log1p(-pm);
        const double w = pow(pm, gamma_neg);
        value = -w * log_1m;
        const double dpm = w / (1.0 - pm) - (gamma_neg > 0.0 ? gamma_neg * pow(pm, gamma_neg - 1.0) * log_1m : 0.0);
        grad = p * (1.0 - p) * dpm;
      }
    }
    terms[row + c] = value;
    dlogits[row + c] = grad_scale * static_cast<float>(grad);
  }
  correct[i] = argmax == labels[i];
}

__global__ void cross_entropy_eval_kernel(const float* logits, const std::int32_t* labels, int rows, int classes,
                                          double* terms, std::int32_t* correct) {
  const int i = row_index();
  if (i >= rows) return;
  const float* z = logits + static_cast<std::size_t>(i) * classes;
  const RowSoftmax r = row_softmax(z, classes);
  terms[i] = -(z[labels[i]] - r.max - r.log_sum_exp);
  correct[i] = r.argmax == labels[i];
}

}  // namespace

void cross_entropy_forward_backward(const float* logits, const std::int32_t* labels, int rows, int classes,
                                    double label_smoothing, float grad_scale, float* dlogits, double* terms,
                                    std::int32_t* correct, cudaStream_t stream) {
  cross_entropy_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logits, labels, rows, classes, label_smoothing,
                                                                  grad_scale, dlogits, terms, correct);
  check(cudaGetLastError(), "cross_entropy_kernel");
}

void asl_forward_backward(const float* logits, const std::int32_t* labels, int rows, int classes, double gamma_pos,
                          double gamma_neg, double margin, float grad_scale, float* dlogits, double* terms,
                          std::int32_t* correct, cudaStream_t stream) {
  asl_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logits, labels, rows, classes, gamma_pos, gamma_neg, margin,
                                                        grad_scale, dlogits, terms, correct);
  check(cudaGetLastError(), "asl_kernel");
}

void cross_entropy_eval(const float* logits, const std::int32_t* labels, int rows, int classes, double* terms,
                        std::int32_t* correct, cudaStream_t stream) {
  cross_entropy_eval_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logits, labels, rows, classes, terms, correct);
  check(cudaGetLastError(), "cross_entropy_eval_kernel");
}

}  // namespace divsim::gpu
