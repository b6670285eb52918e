#include "torch_peer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include "layer_bench.hpp"
#include "numerics/philox.hpp"

namespace divsim::test {

std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "float.fromhex('%a')", v);
  return buf;
}

std::string hex_list(std::span<const float> v) {
  std::string out;
  char buf[64];
  for (const float x : v) {
    std::snprintf(buf, sizeof buf, "%a ", static_cast<double>(x));
    out += buf;
  }
  return out;
}

std::map<std::string, std::vector<double>> run_python(const std::string& script, std::string& raw) {
  // Through a file: a script holding a few images in hex is longer than one command-line argument may be.
  char path[] = "/tmp/divsim_torch_peer_XXXXXX.py";
  const int fd = mkstemps(path, 3);
  if (fd < 0) throw std::runtime_error("cannot create a temporary script file");
  const bool written = write(fd, script.data(), script.size()) == static_cast<ssize_t>(script.size());
  close(fd);
  if (!written) throw std::runtime_error(std::string("cannot write ") + path);
  const std::string cmd = std::string("/usr/bin/python3 ") + path + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot start /usr/bin/python3");
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe.get()) != nullptr) raw += buf;
  std::map<std::string, std::vector<double>> out;
  std::istringstream lines(raw);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string key, tok;
    in >> key;
    auto& values = out[key];
    while (in >> tok) values.push_back(std::strtod(tok.c_str(), nullptr));  // strtod reads float.hex()
  }
  unlink(path);
  return out;
}

namespace {

std::string shape_tuple(std::int64_t rows, const Shape& s) {
  std::string out = "(" + std::to_string(rows);
  for (const std::int64_t d : s) out += ", " + std::to_string(d);
  return out + ")";
}

}  // namespace

void expect_close(const std::string& what, std::span<const float> got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.size(), want.size()) << what << ": torch printed another size";
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  const double tol = rel * scale;
  std::printf("[ check    ] %-32s max abs err %.3g (max |torch| %.3g, tol %.3g): %s\n", what.c_str(), err, scale,
              tol, err <= tol ? "OK" : "NOT OK");
  EXPECT_LE(err, tol) << what;
}

bool check_model_step_against_torch(const TorchModelStep& t, const DivsimStep& d, std::string& skipped) {
  std::string script = std::string(kImportTorch) +
      "nn = torch.nn\n"
      "F = nn.functional\n"
      "torch.set_num_threads(1)\n"
      "h = lambda s: [float.fromhex(v) for v in s.split()]\n"
      "out = lambda key, t: print(key, ' '.join(float(v).hex() for v in t.detach().double().flatten().tolist()))\n" +
      t.net + "\nparams = {\n";
  for (const ParamTensor& p : d.model.tensors())
    script += "  '" + p.key() + "': h('" + hex_list(d.init.subspan(p.offset, p.size)) + "'),\n";
  script += "}\n" + t.inputs + "\n" +
      "names = [n for n, _ in net.named_parameters()]\n"
      "assert names == list(params), (names, list(params))\n"
      "print('same_keys_in_order 1')\n"
      "with torch.no_grad():\n"
      "    for n, p in net.named_parameters(): p.copy_(torch.tensor(params[n], dtype=torch.float32).reshape(p.shape))\n"
      "loss = " + t.loss + "\n"
      "loss.backward()\n"
      "out('loss', loss)\n"
      "for n, p in net.named_parameters(): out(n, p.grad)\n";
  std::string raw;
  const auto torch = run_python(script, raw);
  if (torch.contains("NO_TORCH")) {
    skipped = "torch cannot be imported: " + raw;
    return false;
  }
  if (!torch.contains("same_keys_in_order") || !torch.contains("loss")) {
    ADD_FAILURE() << "unexpected python output:\n" << raw;
    return true;
  }
  const double loss = torch.at("loss").at(0);
  std::printf("[ torch    ] loss divsim %.9g torch %.9g; eval loss divsim %.9g\n", d.loss, loss, d.eval_loss);
  EXPECT_NEAR(d.loss, loss, 1e-6 * loss);
  EXPECT_NEAR(d.eval_loss, loss, 1e-6 * loss);
  for (const ParamTensor& p : d.model.tensors()) {
    if (!torch.contains(p.key())) {
      ADD_FAILURE() << p.key() << " missing:\n" << raw;
      continue;
    }
    expect_close("torch " + p.key(), d.grad.subspan(p.offset, p.size), torch.at(p.key()), 1e-5);
  }
  return true;
}

bool check_layer_against_torch(const TorchLayerCase& c, std::string& skipped) {
  LayerBench bench(c.spec, c.rows, c.input_scale);
  const Layer& layer = bench.layer();
  const std::int64_t rows = c.rows;
  const std::size_t nin = layer.input_shapes().size();
  for (const int i : c.integer_inputs) bench.token_ids(static_cast<std::size_t>(i), c.integer_bound);
  const std::vector<float> buffers_before = bench.buffers;
  bench.forward();
  bench.backward(GradWrite::overwrite);
  std::vector<float> y_eval;
  bench.forward_eval(y_eval);
  const std::vector<float>& params = bench.params;

  std::string script = std::string(kImportTorch) +
      "F = torch.nn.functional\n"
      "torch.set_num_threads(1)\n"
      "def h(s): return torch.tensor([float.fromhex(v) for v in s.split()], dtype=torch.float32)\n"
      "def out(k, t): print(k, ' '.join(float(v).hex() for v in t.detach().double().flatten().tolist()))\n";
  script += c.module + "\n";
  script += "m = m.float()\nwith torch.no_grad():\n";
  for (std::size_t i = 0; i < layer.params().size(); ++i) {
    const ParamSpec& ps = layer.params()[i];
    script += "    m.get_parameter('" + ps.name + "').copy_(h('" +
              hex_list(std::span<const float>(params.data() + bench.param_offset(i), static_cast<std::size_t>(numel(ps.shape)))) +
              "').reshape(m.get_parameter('" + ps.name + "').shape))\n";
  }
  for (std::size_t i = 0; i < layer.buffers().size(); ++i) {
    const BufferSpec& bs = layer.buffers()[i];
    script += "    m.get_buffer('" + bs.name + "').copy_(h('" +
              hex_list(std::span<const float>(buffers_before.data() + bench.buffer_offset(i), static_cast<std::size_t>(bs.size))) +
              "').reshape(m.get_buffer('" + bs.name + "').shape))\n";
  }
  script += "    pass\nxs = []\n";
  for (std::size_t i = 0; i < nin; ++i) {
    const bool ids = bench.dx[i].empty();
    script += "xs.append(h('" + hex_list(bench.x[i]) + "').reshape" + shape_tuple(rows, layer.input_shapes()[i]) +
              (ids ? ".long())\n" : ".requires_grad_())\n");
  }
  script += "m.train()\ny = m(*xs)\nout('y', y)\ny.backward(h('" + hex_list(bench.dy) + "').reshape(y.shape))\n";
  for (std::size_t i = 0; i < nin; ++i)
    if (!bench.dx[i].empty()) script += "out('dx" + std::to_string(i) + "', xs[" + std::to_string(i) + "].grad)\n";
  for (const ParamSpec& ps : layer.params())
    script += "out('g:" + ps.name + "', m.get_parameter('" + ps.name + "').grad)\n";
  for (const BufferSpec& bs : layer.buffers()) script += "out('b:" + bs.name + "', m.get_buffer('" + bs.name + "'))\n";
  script += "m.eval()\nwith torch.no_grad():\n    out('eval', m(*xs))\n";

  std::string raw;
  const auto torch = run_python(script, raw);
  if (torch.contains("NO_TORCH")) {
    skipped = "torch cannot be imported: " + raw;
    return false;
  }
  if (!torch.contains("y")) {
    ADD_FAILURE() << "the torch script failed:\n" << raw;
    return true;
  }
  const std::string n = c.spec.name + " ";
  expect_close(n + "y", bench.y, torch.at("y"), c.rel);
  for (std::size_t i = 0; i < nin; ++i)
    if (!bench.dx[i].empty()) expect_close(n + "dx" + std::to_string(i), bench.dx[i], torch.at("dx" + std::to_string(i)), c.rel);
  for (std::size_t i = 0; i < layer.params().size(); ++i) {
    const ParamSpec& ps = layer.params()[i];
    expect_close(n + "grad " + ps.name,
                 std::span<const float>(bench.grads.data() + bench.param_offset(i), static_cast<std::size_t>(numel(ps.shape))),
                 torch.at("g:" + ps.name), c.rel);
  }
  for (std::size_t i = 0; i < layer.buffers().size(); ++i) {
    const BufferSpec& bs = layer.buffers()[i];
    expect_close(n + bs.name, std::span<const float>(bench.buffers.data() + bench.buffer_offset(i), static_cast<std::size_t>(bs.size)),
                 torch.at("b:" + bs.name), c.rel);
  }
  if (c.check_eval) expect_close(n + "eval", y_eval, torch.at("eval"), c.rel);
  return true;
}

}  // namespace divsim::test
