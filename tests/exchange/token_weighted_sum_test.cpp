// The one token-weighted sum of the exchange and the emulated cluster.
#include <gtest/gtest.h>

#include <random>

#include "exchange/gradient_exchange.h"
#include "exchange/token_weighted_sum.h"

namespace gradbox::exchange {
namespace {

std::vector<float> noise(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(static_cast<double>(rng() >> 11) / 9007199254740992.0 - 0.5);
  return x;
}

TEST(TokenWeightedSum, SumsInWorkerOrderWhateverTheOrderAdded) {
  const size_t n = 1001;
  const std::vector<float> a = noise(1, n), b = noise(2, n), c = noise(3, n);
  std::vector<float> forward(n), backward(n), expected(n, 0.0f);
  TokenWeightedSum one, two;
  one.add("a", 100, TokenWeightedSum::floats(a.data()));
  one.add("b", 300, TokenWeightedSum::floats(b.data()));
  one.add("c", 7, TokenWeightedSum::floats(c.data()));
  two.add("c", 7, TokenWeightedSum::floats(c.data()));
  two.add("b", 300, TokenWeightedSum::floats(b.data()));
  two.add("a", 100, TokenWeightedSum::floats(a.data()));
  one.sum_into(forward.data(), n);
  two.sum_into(backward.data(), n);
  EXPECT_EQ(forward, backward);  // bit for bit
  EXPECT_EQ(one.total_tokens(), 407u);
  for (size_t i = 0; i < n; ++i) {
    expected[i] += contribution_weight(100, 407) * a[i];
    expected[i] += contribution_weight(300, 407) * b[i];
    expected[i] += contribution_weight(7, 407) * c[i];
  }
  EXPECT_EQ(forward, expected);
}

TEST(TokenWeightedSum, AnFp32PayloadSumsLikeTheFloatsItEncodes) {
  const size_t n = (1 << 20) + 3;  // more than one codec chunk, not a multiple of a block
  const std::vector<float> a = noise(4, n), b = noise(5, n);
  codec::CodecOptions fp32 = codec::default_options(codec::Codec::fp32);
  const std::vector<uint8_t> encoded_a = codec::encode(a.data(), n, fp32);
  const std::string payload_a(encoded_a.begin(), encoded_a.end());
  std::vector<float> plain(n), mixed(n);
  TokenWeightedSum floats, payloads;
  floats.add("a", 3, TokenWeightedSum::floats(a.data()));
  floats.add("b", 5, TokenWeightedSum::floats(b.data()));
  payloads.add("a", 3, TokenWeightedSum::encoded(payload_a, fp32));
  payloads.add("b", 5, TokenWeightedSum::floats(b.data()));
  floats.sum_into(plain.data(), n);
  payloads.sum_into(mixed.data(), n);
  EXPECT_EQ(plain, mixed);
}

TEST(TokenWeightedSum, NothingWithTokensIsZeros) {
  std::vector<float> out(5, 7.0f);
  const std::vector<float> x(5, 1.0f);
  TokenWeightedSum sum;
  sum.add("a", 0, TokenWeightedSum::floats(x.data()));
  sum.sum_into(out.data(), out.size());
  EXPECT_EQ(out, std::vector<float>(5, 0.0f));
}

}  // namespace
}  // namespace gradbox::exchange
