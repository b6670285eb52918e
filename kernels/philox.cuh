#pragma once
// Device twin of numerics/philox.cpp: Philox-4x32-10 and KeyedStream's key and counter layout, bit for
// bit, so a dropout mask drawn on the GPU equals the CPU's (tests/gpu compare them). The functions are
// host-callable too, which lets the arithmetic be checked on machines without a GPU.
// Only what device code draws is here (fill_uniform's floats); every other draw stays on the host.
#include <cstdint>

#ifdef __CUDACC__
#define DIVSIM_HOST_DEVICE __host__ __device__
#else
#define DIVSIM_HOST_DEVICE
#endif

namespace divsim::gpu {

struct PhiloxWords {
  std::uint32_t v[4];
};

DIVSIM_HOST_DEVICE inline PhiloxWords philox4x32_10(PhiloxWords c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{kM0} * c.v[0];
    const std::uint64_t p1 = std::uint64_t{kM1} * c.v[2];
    c = {{static_cast<std::uint32_t>(p1 >> 32) ^ c.v[1] ^ k0, static_cast<std::uint32_t>(p1),
          static_cast<std::uint32_t>(p0 >> 32) ^ c.v[3] ^ k1, static_cast<std::uint32_t>(p0)}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// KeyedStream's key: (low seed word, high seed word ^ purpose * 0x85EBCA6B).
struct StreamKey {
  std::uint32_t k0, k1;
};

DIVSIM_HOST_DEVICE inline StreamKey stream_key(std::uint64_t seed, std::uint32_t purpose) {
  return {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32) ^ (purpose * 0x85EBCA6Bu)};
}

// KeyedStream::fill_uniform: draws 4b..4b+3 come from block b, counter (b, w1, w2, w3); a draw keeps the
// word's top 24 bits, scaled into [0, 1).
DIVSIM_HOST_DEVICE inline PhiloxWords fill_uniform_block(StreamKey key, std::uint32_t block, std::uint32_t w1,
                                                         std::uint32_t w2, std::uint32_t w3) {
  return philox4x32_10({{block, w1, w2, w3}}, key.k0, key.k1);
}

DIVSIM_HOST_DEVICE inline float uniform_from_word(std::uint32_t word) {
  return static_cast<float>(word >> 8) * 0x1.0p-24f;
}

}  // namespace divsim::gpu
