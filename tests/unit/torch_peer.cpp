#include "torch_peer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <stdexcept>

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
  const std::string cmd = "/usr/bin/python3 - 2>&1 <<'DIVSIM_PY'\n" + script + "\nDIVSIM_PY\n";
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
  return out;
}

namespace {

std::vector<float> normal_values(std::size_t n, std::uint32_t what, double scale) {
  const KeyedStream s(20261207, Stream::synthetic, what);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * s.normal(i));
  return v;
}

std::string shape_tuple(std::int64_t rows, const Shape& s) {
  std::string out = "(" + std::to_string(rows);
  for (const std::int64_t d : s) out += ", " + std::to_string(d);
  return out + ")";
}

// got vs want: max abs err <= rel * max |want|, printed either way.
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

}  // namespace

bool check_layer_against_torch(const TorchLayerCase& c, std::string& skipped) {
  const std::unique_ptr<Layer> layer = make_layer(c.spec);
  const std::int64_t rows = c.rows;
  const auto R = static_cast<std::size_t>(rows);

  std::vector<std::size_t> poff, boff;
  std::size_t np = 0, nb = 0;
  for (const ParamSpec& p : layer->params()) {
    poff.push_back(np);
    np += static_cast<std::size_t>(numel(p.shape));
  }
  for (const BufferSpec& b : layer->buffers()) {
    boff.push_back(nb);
    nb += static_cast<std::size_t>(b.size);
  }
  layer->place(0, poff, boff);
  std::vector<float> params = normal_values(np, 1, 0.5), grads(np, 0.0f), buffers(nb);
  for (std::size_t i = 0; i < layer->buffers().size(); ++i)
    std::fill_n(buffers.begin() + static_cast<std::ptrdiff_t>(boff[i]), layer->buffers()[i].size, layer->buffers()[i].value);
  const std::vector<float> buffers_before = buffers;

  const std::size_t nin = layer->input_shapes().size();
  std::vector<std::vector<float>> xs(nin), dxs(nin);
  for (std::size_t i = 0; i < nin; ++i) {
    const auto n = R * static_cast<std::size_t>(layer->in_features(i));
    const bool ids = std::find(c.integer_inputs.begin(), c.integer_inputs.end(), static_cast<int>(i)) != c.integer_inputs.end();
    xs[i] = normal_values(n, 10 + static_cast<std::uint32_t>(i), c.input_scale);
    if (ids) {
      const KeyedStream s(20261207, Stream::synthetic, 30 + static_cast<std::uint32_t>(i));
      for (std::size_t k = 0; k < n; ++k)
        xs[i][k] = static_cast<float>(std::min<std::int64_t>(c.integer_bound - 1, static_cast<std::int64_t>(s.uniform(k) * static_cast<float>(c.integer_bound))));
    } else {
      dxs[i].assign(n, 0.0f);
    }
  }
  const std::size_t nout = R * static_cast<std::size_t>(layer->out_features());
  std::vector<float> y(nout), y_eval(nout);
  const std::vector<float> dy = normal_values(nout, 20, 1.0);
  std::vector<std::vector<float>> saved;
  for (const SavedSpec& s : layer->saved()) saved.emplace_back(static_cast<std::size_t>(s.per_sample * rows + s.per_replica));
  std::vector<float*> saved_ptrs;
  for (auto& s : saved) saved_ptrs.push_back(s.data());
  std::vector<std::int64_t> samples(R);
  for (std::size_t i = 0; i < R; ++i) samples[i] = static_cast<std::int64_t>(i);
  std::size_t scratch_size = 0;
  for (std::size_t i = 0; i < nin; ++i) scratch_size = std::max(scratch_size, xs[i].size());
  scratch_size = std::max({scratch_size, nout, np});
  std::vector<float> s0(scratch_size), s1(scratch_size), s2(scratch_size);
  const OperandRounding round(MatmulFormat::fp32, {std::span<float>(s0), std::span<float>(s1), std::span<float>(s2)});

  Pass p;
  p.rows = rows;
  for (std::size_t i = 0; i < nin; ++i) p.x[i] = xs[i].data();
  p.y = y.data();
  p.saved = saved_ptrs;
  p.params = params.data();
  p.buffers = buffers.data();
  p.keys = {1, 0, samples.data()};
  p.round = &round;
  p.dy = dy.data();
  for (std::size_t i = 0; i < nin; ++i) p.dx[i] = dxs[i].empty() ? nullptr : dxs[i].data();
  p.grads = grads.data();
  p.write = GradWrite::overwrite;

  if (const StatisticsPhases* st = layer->statistics()) {
    const std::size_t w = st->forward_width();
    std::vector<double> totals(w * static_cast<std::size_t>(st->forward_phases()), 0.0);
    for (int ph = 0; ph < st->forward_phases(); ++ph)
      st->forward_partial(ph, p, std::span<const double>(totals.data(), w * static_cast<std::size_t>(ph)),
                          static_cast<double>(rows), std::span<double>(totals.data() + w * static_cast<std::size_t>(ph), w));
    st->forward_finish(p, totals, static_cast<double>(rows));
    std::vector<double> back(st->backward_width(), 0.0);
    st->backward_partial(p, back);
    st->backward_finish(p, back, static_cast<double>(rows));
  } else {
    layer->forward(p);
    layer->backward_params(p);
    layer->backward_input(p);
  }
  Pass e = p;
  e.y = y_eval.data();
  e.saved = {};
  layer->forward_eval(e);

  std::string script =
      "import sys\n"
      "try:\n"
      "    import torch\n"
      "except Exception:\n"
      "    print('NO_TORCH'); sys.exit(0)\n"
      "F = torch.nn.functional\n"
      "torch.set_num_threads(1)\n"
      "def h(s): return torch.tensor([float.fromhex(v) for v in s.split()], dtype=torch.float32)\n"
      "def out(k, t): print(k, ' '.join(float(v).hex() for v in t.detach().double().flatten().tolist()))\n";
  script += c.module + "\n";
  script += "m = m.float()\nwith torch.no_grad():\n";
  for (std::size_t i = 0; i < layer->params().size(); ++i) {
    const ParamSpec& ps = layer->params()[i];
    script += "    m.get_parameter('" + ps.name + "').copy_(h('" +
              hex_list(std::span<const float>(params.data() + poff[i], static_cast<std::size_t>(numel(ps.shape)))) +
              "').reshape(m.get_parameter('" + ps.name + "').shape))\n";
  }
  for (std::size_t i = 0; i < layer->buffers().size(); ++i) {
    const BufferSpec& bs = layer->buffers()[i];
    script += "    m.get_buffer('" + bs.name + "').copy_(h('" +
              hex_list(std::span<const float>(buffers_before.data() + boff[i], static_cast<std::size_t>(bs.size))) +
              "').reshape(m.get_buffer('" + bs.name + "').shape))\n";
  }
  script += "    pass\nxs = []\n";
  for (std::size_t i = 0; i < nin; ++i) {
    const bool ids = dxs[i].empty();
    script += "xs.append(h('" + hex_list(xs[i]) + "').reshape" + shape_tuple(rows, layer->input_shapes()[i]) +
              (ids ? ".long())\n" : ".requires_grad_())\n");
  }
  script += "m.train()\ny = m(*xs)\nout('y', y)\ny.backward(h('" + hex_list(dy) + "').reshape(y.shape))\n";
  for (std::size_t i = 0; i < nin; ++i)
    if (!dxs[i].empty()) script += "out('dx" + std::to_string(i) + "', xs[" + std::to_string(i) + "].grad)\n";
  for (const ParamSpec& ps : layer->params())
    script += "out('g:" + ps.name + "', m.get_parameter('" + ps.name + "').grad)\n";
  for (const BufferSpec& bs : layer->buffers()) script += "out('b:" + bs.name + "', m.get_buffer('" + bs.name + "'))\n";
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
  expect_close(n + "y", y, torch.at("y"), c.rel);
  for (std::size_t i = 0; i < nin; ++i)
    if (!dxs[i].empty()) expect_close(n + "dx" + std::to_string(i), dxs[i], torch.at("dx" + std::to_string(i)), c.rel);
  for (std::size_t i = 0; i < layer->params().size(); ++i) {
    const ParamSpec& ps = layer->params()[i];
    expect_close(n + "grad " + ps.name,
                 std::span<const float>(grads.data() + poff[i], static_cast<std::size_t>(numel(ps.shape))),
                 torch.at("g:" + ps.name), c.rel);
  }
  for (std::size_t i = 0; i < layer->buffers().size(); ++i) {
    const BufferSpec& bs = layer->buffers()[i];
    expect_close(n + bs.name, std::span<const float>(buffers.data() + boff[i], static_cast<std::size_t>(bs.size)),
                 torch.at("b:" + bs.name), c.rel);
  }
  if (c.check_eval) expect_close(n + "eval", y_eval, torch.at("eval"), c.rel);
  return true;
}

}  // namespace divsim::test
