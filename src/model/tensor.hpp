#pragma once
// Row-major float32 matrix views (samples are rows, as in PyTorch's [B, C] activations). The model owns
// its buffers elsewhere; these are non-owning Eigen maps over them.
#include <Eigen/Core>

namespace divsim {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatView = Eigen::Map<RowMatrix>;
using ConstMatView = Eigen::Map<const RowMatrix>;
using VecView = Eigen::Map<Eigen::VectorXf>;
using ConstVecView = Eigen::Map<const Eigen::VectorXf>;

}  // namespace divsim
