// model.type = mlp: for each hidden width h (model.hidden) Linear -> [BatchNorm1d] -> ReLU -> [Dropout],
// then a Linear to the classes, over the flattened input. Layer names are those of an nn.Sequential
// (fc1, bn1, relu1, drop1, ..., fcN), so its state_dict keys are fc1.weight, bn1.running_mean, ...; the
// layer positions key the dropout masks, so reordering them would change every mlp trajectory.
#include <string>

#include "model/model.hpp"

namespace divsim {
namespace {

void build_mlp(ModelBuilder& b) {
  const ModelSection& c = b.config;
  b.flatten_input();
  int x = b.input();
  for (std::size_t h = 0; h < c.hidden.size(); ++h) {
    const std::string n = std::to_string(h + 1);
    x = b.add("linear", "fc" + n, {x}, {{"out", static_cast<double>(c.hidden[h])}});
    if (c.batchnorm) x = b.add("batchnorm1d", "bn" + n, {x}, {{"momentum", c.bn_momentum}, {"eps", c.bn_eps}});
    x = b.add("relu", "relu" + n, {x});
    if (c.dropout > 0.0) x = b.add("dropout", "drop" + n, {x}, {{"p", c.dropout}});
  }
  b.add("linear", "fc" + std::to_string(c.hidden.size() + 1), {x}, {{"out", static_cast<double>(b.classes)}});
}

}  // namespace

DIVSIM_REGISTER_MODEL("mlp", build_mlp);

}  // namespace divsim
