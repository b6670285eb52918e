// model.type = resnet: a small ResNet for images, torchvision's layout at CIFAR scale. A 3x3 stem
// (conv1, bn1, relu), then one stage per entry of model.channels, each of model.blocks basic blocks:
//   conv3x3(stride) -> BatchNorm2d -> ReLU -> conv3x3 -> BatchNorm2d, plus the shortcut, then ReLU;
// the first block of every stage after the first halves the resolution (stride 2), and a block whose
// shape changes takes a 1x1 projection shortcut (conv, BatchNorm2d: torchvision's downsample.0/.1).
// Then a global average pool and a Linear classifier (fc). Convolutions have no bias (BatchNorm follows).
// State-dict names are torchvision's: conv1.weight, layer2.0.downsample.0.weight, fc.bias, ...
#include <string>

#include "config/config_error.hpp"
#include "model/model.hpp"

namespace divsim {
namespace {

void build_resnet(ModelBuilder& b) {
  const ModelSection& c = b.config;
  if (b.shape(ModelBuilder::input()).size() != 3)
    throw ConfigError("model.type", "resnet needs images (data.source=fashion-mnist, or hdf5 with [N, height, width] images)");
  const std::map<std::string, double> bn_settings = {{"momentum", c.bn_momentum}, {"eps", c.bn_eps}};
  auto conv = [&](const std::string& name, int x, std::int64_t out, int kernel, int stride) {
    return b.add("conv2d", name, {x},
                 {{"out", static_cast<double>(out)}, {"kernel", kernel}, {"stride", stride}, {"padding", kernel / 2}, {"bias", 0}});
  };
  auto bn = [&](const std::string& name, int x) { return b.add("batchnorm2d", name, {x}, bn_settings); };

  int x = b.add("relu", "relu", {bn("bn1", conv("conv1", ModelBuilder::input(), c.channels[0], 3, 1))});
  for (std::size_t s = 0; s < c.channels.size(); ++s) {
    const std::int64_t width = c.channels[s];
    for (std::int64_t j = 0; j < c.blocks; ++j) {
      const std::string n = "layer" + std::to_string(s + 1) + "." + std::to_string(j);
      const int stride = s > 0 && j == 0 ? 2 : 1;
      int h = b.add("relu", n + ".relu1", {bn(n + ".bn1", conv(n + ".conv1", x, width, 3, stride))});
      h = bn(n + ".bn2", conv(n + ".conv2", h, width, 3, 1));
      int shortcut = x;
      if (stride != 1 || b.shape(x)[0] != width) shortcut = bn(n + ".downsample.1", conv(n + ".downsample.0", x, width, 1, stride));
      x = b.add("relu", n + ".relu2", {b.add("add", n + ".add", {h, shortcut})});
    }
  }
  x = b.add("avgpool", "avgpool", {x});
  b.add("linear", "fc", {x}, {{"out", static_cast<double>(b.classes)}});
  // A 28x28 sample's activations, gradients and saved tensors take a few MB: evaluate 100 at a time.
  b.eval_batch(100);
}

}  // namespace

DIVSIM_REGISTER_MODEL("resnet", build_resnet);

}  // namespace divsim
