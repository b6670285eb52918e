#pragma once
// The kernels behind the matrix products. With the CMake option DIVSIM_OPENBLAS (default ON, when
// OpenBLAS is found) the three products of a Linear layer go to OpenBLAS's sgemm, unless its kernels
// are narrower than Eigen's (gemm_backend.cpp); otherwise to Eigen's own kernels. Both are
// deterministic for given shapes, which is what the reproducibility guarantees rest on (deterministic
// mode computes fixed-shape chunks); neither promises that a row's result is independent of how many
// rows share the product, so with OpenBLAS a sample's forward bits depend on the per-rank batch, as
// cuBLAS's do on a GPU (docs/design.md). The bits depend on the backend and on the kernel OpenBLAS
// picks for the CPU, so every trajectory file names it.
#include <string>

#include "model/tensor.hpp"

namespace divsim {

// c[M,N] += a[K,M]^T b[K,N]  (the weight gradient dw += dy^T x), or c = a^T b when !accumulate: the
// same bits as adding onto zeros, without clearing c first.
void gemm_tn(ConstMatView a, ConstMatView b, MatView c, bool accumulate);
// Whether gemm_tn's accumulate adds the product, rounded as when it is stored on its own, onto c with one
// rounding per element (c + fl(a^T b)) for a[K,M], b[K,N] of these sizes. Deterministic mode then adds a
// chunk's weight gradient onto its tree sibling's, which is the tree's first sum bit for bit. Not so
// where a kernel splits K into blocks and adds each block's partial to c, or starts from c: probed once
// per call on a fixed pattern with this process's kernels.
bool accumulate_adds_rounded_product(Eigen::Index k, Eigen::Index m, Eigen::Index n);
// Whether the forward product (gemm_nt, a[M,K] b[N,K]^T) and the input-gradient product (gemm_nn,
// a[M,N] b[N,K]) of `rows` rows give every row the bits it gets in products of `chunk` rows: then
// deterministic mode multiplies a rank's whole micro-batch at once, packing the weights once instead of
// once per chunk. Probed on a fixed pattern with this process's kernels, like the one above.
bool rows_do_not_depend_on_row_count(Eigen::Index rows, Eigen::Index chunk, Eigen::Index k, Eigen::Index n);
// c[M,N] = a[M,K] b[K,N]     (the input gradient dx = dy w)
void gemm_nn(ConstMatView a, ConstMatView b, MatView c);
// c[M,N] = a[M,K] b[N,K]^T   (the forward product y = x w^T)
void gemm_nt(ConstMatView a, ConstMatView b, MatView c);

// One BLAS thread per process: MPI processes and logical ranks are divsim's parallelism, and BLAS
// threads would compete with the other processes for the same cores. Idempotent.
void use_one_gemm_thread();

// "Eigen", e.g. "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64, core SkylakeX",
// or "Eigen (not OpenBLAS ... core Haswell: no AVX-512 kernels)" where Eigen's kernels replace OpenBLAS's.
std::string gemm_backend();

}  // namespace divsim
