#include "model/gemm_backend.hpp"

#ifdef DIVSIM_HAVE_OPENBLAS
#include <cblas.h>

// OpenBLAS's own extensions (not every cblas.h declares them).
extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}
#endif

namespace divsim {

#ifdef DIVSIM_HAVE_OPENBLAS
namespace {
blasint dim(Eigen::Index v) { return static_cast<blasint>(v); }
}  // namespace

void gemm_tn(ConstMatView a, ConstMatView b, MatView c, bool accumulate) {
  // beta = 0 makes OpenBLAS clear c before it accumulates the products: bit for bit beta = 1 on zeros.
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dim(c.rows()), dim(c.cols()), dim(a.rows()), 1.0f, a.data(),
              dim(a.cols()), b.data(), dim(b.cols()), accumulate ? 1.0f : 0.0f, c.data(), dim(c.cols()));
}

void gemm_nn(ConstMatView a, ConstMatView b, MatView c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim(c.rows()), dim(c.cols()), dim(a.cols()), 1.0f, a.data(),
              dim(a.cols()), b.data(), dim(b.cols()), 0.0f, c.data(), dim(c.cols()));
}

void use_one_gemm_thread() { openblas_set_num_threads(1); }

std::string gemm_backend() { return std::string(openblas_get_config()) + ", core " + openblas_get_corename(); }
#else
void gemm_tn(ConstMatView a, ConstMatView b, MatView c, bool accumulate) {
  // Eigen's c = a^T b is c.setZero() and then c += a^T b: the same bits as accumulating onto zeros.
  if (accumulate)
    c.noalias() += a.transpose() * b;
  else
    c.noalias() = a.transpose() * b;
}

void gemm_nn(ConstMatView a, ConstMatView b, MatView c) { c.noalias() = a * b; }

void use_one_gemm_thread() {}

std::string gemm_backend() { return "Eigen"; }
#endif

}  // namespace divsim
