#include "model/gemm_backend.hpp"

#include <cstdint>

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
namespace {

void eigen_gemm_tn(ConstMatView a, ConstMatView b, MatView c, bool accumulate) {
  // Eigen's c = a^T b is c.setZero() and then c += a^T b: the same bits as accumulating onto zeros.
  if (accumulate)
    c.noalias() += a.transpose() * b;
  else
    c.noalias() = a.transpose() * b;
}

void eigen_gemm_nn(ConstMatView a, ConstMatView b, MatView c) { c.noalias() = a * b; }

void eigen_gemm_nt(ConstMatView a, ConstMatView b, MatView c) { c.noalias() = a * b.transpose(); }

#ifdef DIVSIM_HAVE_OPENBLAS
blasint dim(Eigen::Index v) { return static_cast<blasint>(v); }

std::string openblas_description() {
  return std::string(openblas_get_config()) + ", core " + openblas_get_corename();
}

// OpenBLAS outruns Eigen only with kernels as wide as Eigen's. OpenBLAS picks its kernels at load time,
// by its own CPU table or by OPENBLAS_CORETYPE (an environment that sets OPENBLAS_CORETYPE=Haswell keeps
// it on AVX2 on an AVX-512 CPU); an -march=native build of Eigen uses AVX-512 there, and its backward
// products then ran 1.45x faster than OpenBLAS's (bench/divsim_gemm_rate, AMD EPYC: 150-166 against
// 106-116 GFLOP/s). So OpenBLAS takes the products unless Eigen has AVX-512 and OpenBLAS's
// core does not. A function of the build, the CPU and the environment, fixed for the process: runs
// compared bit for bit need the same of all three, as before, and `env` records the choice.
bool on_openblas() {
  static const bool use = [] {
#ifdef EIGEN_VECTORIZE_AVX512
    const std::string core = openblas_get_corename();
    return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
#else
    return true;
#endif
  }();
  return use;
}
#endif

}  // namespace

#ifdef DIVSIM_HAVE_OPENBLAS
void gemm_tn(ConstMatView a, ConstMatView b, MatView c, bool accumulate) {
  if (!on_openblas()) return eigen_gemm_tn(a, b, c, accumulate);
  // beta = 0 makes OpenBLAS clear c before it accumulates the products: bit for bit beta = 1 on zeros.
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dim(c.rows()), dim(c.cols()), dim(a.rows()), 1.0f, a.data(),
              dim(a.cols()), b.data(), dim(b.cols()), accumulate ? 1.0f : 0.0f, c.data(), dim(c.cols()));
}

void gemm_nn(ConstMatView a, ConstMatView b, MatView c) {
  if (!on_openblas()) return eigen_gemm_nn(a, b, c);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim(c.rows()), dim(c.cols()), dim(a.cols()), 1.0f, a.data(),
              dim(a.cols()), b.data(), dim(b.cols()), 0.0f, c.data(), dim(c.cols()));
}

void gemm_nt(ConstMatView a, ConstMatView b, MatView c) {
  if (!on_openblas()) return eigen_gemm_nt(a, b, c);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, dim(c.rows()), dim(c.cols()), dim(a.cols()), 1.0f, a.data(),
              dim(a.cols()), b.data(), dim(b.cols()), 0.0f, c.data(), dim(c.cols()));
}

void use_one_gemm_thread() { openblas_set_num_threads(1); }

std::string gemm_backend() {
  if (on_openblas()) return openblas_description();
  return "Eigen (not " + openblas_description() + ": no AVX-512 kernels)";
}
#else
void gemm_tn(ConstMatView a, ConstMatView b, MatView c, bool accumulate) { eigen_gemm_tn(a, b, c, accumulate); }

void gemm_nn(ConstMatView a, ConstMatView b, MatView c) { eigen_gemm_nn(a, b, c); }

void gemm_nt(ConstMatView a, ConstMatView b, MatView c) { eigen_gemm_nt(a, b, c); }

void use_one_gemm_thread() {}

std::string gemm_backend() { return "Eigen"; }
#endif

namespace {
// The probes' input: a fixed pattern in [-1, 1) with full mantissas and both signs (not a random draw).
RowMatrix probe_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t salt) {
  RowMatrix x(rows, cols);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const std::uint32_t h = (static_cast<std::uint32_t>(i) + salt) * 2654435761u;
    x.data()[i] = static_cast<float>(static_cast<std::int32_t>(h >> 8) - (1 << 23)) * 0x1p-23f;
  }
  return x;
}
}  // namespace

bool accumulate_adds_rounded_product(Eigen::Index k, Eigen::Index m, Eigen::Index n) {
  use_one_gemm_thread();  // the kernels the step runs
  const RowMatrix a = probe_matrix(k, m, 1), b = probe_matrix(k, n, 2);
  RowMatrix c = probe_matrix(m, n, 3), product(m, n);
  const RowMatrix before = c;
  gemm_tn(ConstMatView(a.data(), k, m), ConstMatView(b.data(), k, n), MatView(product.data(), m, n), false);
  gemm_tn(ConstMatView(a.data(), k, m), ConstMatView(b.data(), k, n), MatView(c.data(), m, n), true);
  for (Eigen::Index i = 0; i < c.size(); ++i)
    if (c.data()[i] != before.data()[i] + product.data()[i]) return false;
  return true;
}

bool rows_do_not_depend_on_row_count(Eigen::Index rows, Eigen::Index chunk, Eigen::Index k, Eigen::Index n) {
  if (chunk <= 0 || rows % chunk != 0) return false;
  use_one_gemm_thread();
  const RowMatrix a = probe_matrix(rows, k, 4), b = probe_matrix(n, k, 5), g = probe_matrix(rows, n, 6);
  RowMatrix whole_nt(rows, n), whole_nn(rows, k), part_nt(rows, n), part_nn(rows, k);
  gemm_nt(ConstMatView(a.data(), rows, k), ConstMatView(b.data(), n, k), MatView(whole_nt.data(), rows, n));
  gemm_nn(ConstMatView(g.data(), rows, n), ConstMatView(b.data(), n, k), MatView(whole_nn.data(), rows, k));
  for (Eigen::Index r = 0; r + chunk <= rows; r += chunk) {
    gemm_nt(ConstMatView(a.data() + r * k, chunk, k), ConstMatView(b.data(), n, k), MatView(part_nt.data() + r * n, chunk, n));
    gemm_nn(ConstMatView(g.data() + r * n, chunk, n), ConstMatView(b.data(), n, k), MatView(part_nn.data() + r * k, chunk, k));
  }
  return whole_nt == part_nt && whole_nn == part_nn;
}

}  // namespace divsim
