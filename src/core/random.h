// Seeded, portable randomness. The engine of every random dimension is
// xoshiro256** seeded through splitmix64, and every distribution is
// implemented here (never std::*_distribution, whose output differs between
// standard libraries), so a seed gives the same schedule on every machine.
//
// One seed per random dimension (arrivals, input lengths, output lengths,
// prefix groups, tenants, jitter): changing how one dimension is drawn never
// shifts the others. derive_seed() turns a master seed and a dimension name
// into that dimension's seed.
#pragma once

#include <cstdint>
#include <string_view>

namespace tokenscope {

// A stateless 64-bit mixer (splitmix64 finaliser): a good hash of an integer.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// One splitmix64 step: advances state and returns the next output.
inline std::uint64_t splitmix64_next(std::uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  return mix64(state);
}
// Combines two 64-bit values into one well-mixed value (order matters).
inline std::uint64_t hash_combine64(std::uint64_t a, std::uint64_t b) {
  return mix64(a ^ (mix64(b) + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2)));
}
// FNV-1a of the bytes of s, then mixed.
std::uint64_t hash_string64(std::string_view s);
// The seed of one random dimension, derived from the master seed.
std::uint64_t derive_seed(std::uint64_t master_seed, std::string_view dimension);

class Rng {
 public:
  explicit Rng(std::uint64_t seed);

  std::uint64_t next_u64();
  // Uniform on [0, 1) with 53 random bits.
  double uniform01();
  // Uniform on (0, 1]: safe to take the logarithm of.
  double uniform_open01();
  // Uniform integer on [lo, hi] (inclusive), without modulo bias.
  std::uint64_t uniform_int(std::uint64_t lo, std::uint64_t hi);
  // Exponential with the given rate (> 0): mean 1/rate.
  double exponential(double rate);
  // Standard normal (Marsaglia polar method).
  double normal();
  // Gamma with shape k > 0 and scale theta > 0 (Marsaglia-Tsang): mean k*theta.
  double gamma(double shape, double scale);
  // exp(N(mu, sigma^2)).
  double lognormal(double mu, double sigma);

 private:
  std::uint64_t s_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

}  // namespace tokenscope
