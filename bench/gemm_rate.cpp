// divsim_gemm_rate: the single-thread float32 GEMM rates on this machine, compiled with the same flags
// as divsim (it is built in divsim's CMake project), for the three products of one Linear layer:
//   forward  Y[B,out]   = X[B,in] * W[out,in]^T
//   weight   dW[out,in] += dY[B,out]^T * X[B,in]
//   input    dX[B,in]   = dY[B,out] * W[out,in]
// row-major, as src/model/layers.cpp multiplies, with Eigen's kernels and, when divsim is built with
// OpenBLAS (DIVSIM_OPENBLAS), with OpenBLAS's sgemm on one thread. bench/gemm.py compares divsim's
// fwd+bwd rate with the best of them. It measures GEMM kernels only: not multi-threaded BLAS, and it
// checks no results.
//
// usage: divsim_gemm_rate B IN OUT [seconds per product, default 1]
// prints one line per kernel and product: "<eigen|openblas> <product> <M> <K> <N> <GFLOP/s>"
#include <Eigen/Core>
#ifdef DIVSIM_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "model/gemm_backend.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Clock = std::chrono::steady_clock;

// Repeats `product` until `seconds` have passed (after one untimed call that touches every buffer)
// and returns its rate for 2*m*k*n flops per call.
template <class Product>
double rate(Eigen::Index m, Eigen::Index k, Eigen::Index n, double seconds, Product&& product) {
  product();
  long calls = 0;
  const auto t0 = Clock::now();
  double elapsed = 0.0;
  do {
    product();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < seconds);
  return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n) * static_cast<double>(calls) /
         elapsed * 1e-9;
}

Eigen::Index positive(const char* text, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v <= 0) {
    std::fprintf(stderr, "divsim_gemm_rate: %s must be a positive integer, got '%s'\n", what, text);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: divsim_gemm_rate B IN OUT [seconds per product]\n");
    return 2;
  }
  const Eigen::Index b = positive(argv[1], "B"), in = positive(argv[2], "IN"), out = positive(argv[3], "OUT");
  const double seconds = argc == 5 ? std::atof(argv[4]) : 1.0;
  if (!(seconds > 0.0)) {
    std::fprintf(stderr, "divsim_gemm_rate: seconds must be > 0\n");
    return 2;
  }
  Eigen::setNbThreads(1);
  divsim::use_one_gemm_thread();
  const RowMatrix x = RowMatrix::Random(b, in), w = RowMatrix::Random(out, in), dy = RowMatrix::Random(b, out);
  RowMatrix y(b, out), dw = RowMatrix::Zero(out, in), dx(b, in);
  auto report = [&](const char* kernel, auto&& forward, auto&& weight, auto&& input) {
    std::printf("%s forward %ld %ld %ld %.2f\n", kernel, static_cast<long>(b), static_cast<long>(in),
                static_cast<long>(out), rate(b, in, out, seconds, forward));
    std::printf("%s weight %ld %ld %ld %.2f\n", kernel, static_cast<long>(out), static_cast<long>(b),
                static_cast<long>(in), rate(out, b, in, seconds, weight));
    std::printf("%s input %ld %ld %ld %.2f\n", kernel, static_cast<long>(b), static_cast<long>(out),
                static_cast<long>(in), rate(b, out, in, seconds, input));
  };
  report("eigen", [&] { y.noalias() = x * w.transpose(); }, [&] { dw.noalias() += dy.transpose() * x; },
         [&] { dx.noalias() = dy * w; });
#ifdef DIVSIM_HAVE_OPENBLAS
  const auto B = static_cast<blasint>(b), I = static_cast<blasint>(in), O = static_cast<blasint>(out);
  report("openblas",
         [&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, O, I, 1.0f, x.data(), I, w.data(), I, 0.0f, y.data(), O); },
         [&] { cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, I, B, 1.0f, dy.data(), O, x.data(), I, 1.0f, dw.data(), I); },
         [&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, I, O, 1.0f, dy.data(), O, w.data(), I, 0.0f, dx.data(), I); });
#endif
  // Keeps the products observable, so none is optimised away.
  std::fprintf(stderr, "checksum %g\n", static_cast<double>(y.sum() + dw.sum() + dx.sum()));
  return 0;
}
