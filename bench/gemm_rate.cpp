// divsim_gemm_rate: the single-thread float32 GEMM rate of Eigen on this machine, compiled with the same
// flags as divsim (it is built in divsim's CMake project), for the three products of one Linear layer:
//   forward  Y[B,out]   = X[B,in] * W[out,in]^T
//   weight   dW[out,in] += dY[B,out]^T * X[B,in]
//   input    dX[B,in]   = dY[B,out] * W[out,in]
// row-major, as src/model/layers.cpp multiplies. bench/gemm.py compares divsim's fwd+bwd rate with it.
// It measures Eigen only: not divsim's kernels, not multi-threaded BLAS, and it checks no results.
//
// usage: divsim_gemm_rate B IN OUT [seconds per product, default 1]
// prints one line per product: "<name> <M> <K> <N> <GFLOP/s>"
#include <Eigen/Core>

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
  const RowMatrix x = RowMatrix::Random(b, in), w = RowMatrix::Random(out, in), dy = RowMatrix::Random(b, out);
  RowMatrix y(b, out), dw = RowMatrix::Zero(out, in), dx(b, in);
  std::printf("forward %ld %ld %ld %.2f\n", static_cast<long>(b), static_cast<long>(in), static_cast<long>(out),
              rate(b, in, out, seconds, [&] { y.noalias() = x * w.transpose(); }));
  std::printf("weight %ld %ld %ld %.2f\n", static_cast<long>(out), static_cast<long>(b), static_cast<long>(in),
              rate(out, b, in, seconds, [&] { dw.noalias() += dy.transpose() * x; }));
  std::printf("input %ld %ld %ld %.2f\n", static_cast<long>(b), static_cast<long>(out), static_cast<long>(in),
              rate(b, out, in, seconds, [&] { dx.noalias() = dy * w; }));
  // Keeps the products observable, so none is optimised away.
  std::fprintf(stderr, "checksum %g\n", static_cast<double>(y.sum() + dw.sum() + dx.sum()));
  return 0;
}
