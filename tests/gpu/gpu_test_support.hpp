#pragma once
// Shared by the GPU tests: skipping without a GPU, host <-> device copies, test data, and comparisons
// that print what they compared (max error against its limit, OK / NOT OK) so a failure explains itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cuda_util.hpp"
#include "numerics/philox.hpp"

namespace divsim::gputest {

// Use as the first statement of a test that needs a GPU.
#define DIVSIM_REQUIRE_GPU()                                                  \
  do {                                                                        \
    std::string divsim_why;                                                   \
    if (::divsim::gpu::visible_devices(divsim_why) == 0)                      \
      GTEST_SKIP() << "needs a CUDA GPU; this machine has none: " << divsim_why; \
  } while (false)

template <class T>
gpu::DeviceBuffer<T> to_device(const std::vector<T>& host) {
  gpu::DeviceBuffer<T> d(host.size());
  d.upload(host, nullptr);
  return d;
}

template <class T>
std::vector<T> to_host(const gpu::DeviceBuffer<T>& device) {
  std::vector<T> host(device.size());
  device.download(host, nullptr);
  return host;
}

// Standard normal draws times `scale`, keyed by `what` so every tensor differs.
inline std::vector<float> normal_values(std::size_t n, std::uint32_t what, double scale = 1.0) {
  const KeyedStream s(20250101, Stream::synthetic, what);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * s.normal(i));
  return v;
}

// max |got - want| <= rel * max |want|.
template <class T>
void expect_close(const std::string& what, const std::vector<T>& got, const std::vector<T>& want, double rel) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    ref = std::max(ref, std::abs(static_cast<double>(want[i])));
  }
  const bool ok = err <= rel * ref;
  std::printf("  %-34s max abs err %.3e  limit %.3e  %s\n", what.c_str(), err, rel * ref, ok ? "OK" : "NOT OK");
  EXPECT_TRUE(ok) << what << ": max abs err " << err << " > " << rel << " * " << ref;
}

// Every element has the same bits.
template <class T>
void expect_bitwise(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  std::printf("  %-34s %zu of %zu elements differ in their bits  %s\n", what.c_str(), differ, got.size(),
              differ == 0 ? "OK" : "NOT OK");
  EXPECT_EQ(differ, 0u) << what;
}

}  // namespace divsim::gputest
