// paged_attention's masking, checked directly against softmax over the allowed slots: evicted
// slots (slot_live 0) and slots past num_slots (not yet written for this query) get no weight.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "tests/quant/kv_test_support.h"

namespace kvscope {
namespace {

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 8, kTokens = 7;

// Records each head's weights for one query.
class Weights final : public AttentionObserver {
 public:
  void on_attention(int, int head, int, std::span<const float> w) override {
    if (rows.size() <= static_cast<std::size_t>(head))
      rows.resize(static_cast<std::size_t>(head) + 1);
    rows[static_cast<std::size_t>(head)].assign(w.begin(), w.end());
  }
  std::vector<std::vector<float>> rows;  // [head][slot]
};

struct Case {
  std::vector<float> k, v, q;  // [tokens][kv_dim], [tokens][kv_dim], [heads][head_dim]
};

Case random_case() {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Case c;
  for (int i = 0; i < kTokens * kKvHeads * kHeadDim; ++i) c.k.push_back(d(rng));
  for (int i = 0; i < kTokens * kKvHeads * kHeadDim; ++i) c.v.push_back(d(rng));
  for (int i = 0; i < kHeads * kHeadDim; ++i) c.q.push_back(d(rng));
  return c;
}

// softmax(q K^T / sqrt(d)) V in double over the slots where allowed[t], per query head (GQA: head
// h reads KV head h / (kHeads / kKvHeads)).
std::vector<double> reference(const Case& c, const std::vector<bool>& allowed) {
  std::vector<double> out(static_cast<std::size_t>(kHeads * kHeadDim), 0.0);
  for (int h = 0; h < kHeads; ++h) {
    const int g = h / (kHeads / kKvHeads);
    std::vector<double> s(allowed.size(), -INFINITY);
    double mx = -INFINITY;
    for (std::size_t t = 0; t < allowed.size(); ++t) {
      if (!allowed[t]) continue;
      double dot = 0.0;
      for (int i = 0; i < kHeadDim; ++i) {
        dot += double(c.q[static_cast<std::size_t>(h * kHeadDim + i)]) *
               c.k[(t * kKvHeads + static_cast<std::size_t>(g)) * kHeadDim +
                   static_cast<std::size_t>(i)];
      }
      s[t] = dot / std::sqrt(double(kHeadDim));
      mx = std::max(mx, s[t]);
    }
    double sum = 0.0;
    for (double& x : s) sum += (x = std::isinf(x) ? 0.0 : std::exp(x - mx));
    for (std::size_t t = 0; t < allowed.size(); ++t) {
      for (int i = 0; i < kHeadDim; ++i) {
        out[static_cast<std::size_t>(h * kHeadDim + i)] +=
            s[t] / sum *
            c.v[(t * kKvHeads + static_cast<std::size_t>(g)) * kHeadDim +
                static_cast<std::size_t>(i)];
      }
    }
  }
  return out;
}

TEST(PagedAttentionMask, EvictedSlotsAndUnwrittenSlotsGetNoWeight) {
  const Case c = random_case();
  const KvFormat fp32 = parse_kv_format("fp32", "test");
  test::QuantCache cache(fp32, fp32, /*block_size=*/2, kTokens, kKvHeads, kHeadDim);
  for (int t = 0; t < kTokens; ++t) {
    cache.append(&c.k[static_cast<std::size_t>(t * kKvHeads * kHeadDim)],
                 &c.v[static_cast<std::size_t>(t * kKvHeads * kHeadDim)]);
  }
  // The query sees the first 5 slots (slots 5 and 6 hold later tokens), two of them evicted.
  KvSeqView view = cache.view();
  view.num_slots = 5;
  const std::vector<std::uint8_t> live = {1, 0, 1, 0, 1};
  view.slot_live = live.data();
  const std::vector<bool> allowed = {true, false, true, false, true, false, false};

  std::vector<float> out(static_cast<std::size_t>(kHeads * kHeadDim)), scratch;
  Weights seen;
  cpu::paged_attention(view, 0, {kHeads, kKvHeads, kHeadDim}, c.q.data(), out.data(), 4, &seen,
                       scratch);
  const std::vector<double> want = reference(c, allowed);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
  ASSERT_EQ(seen.rows.size(), static_cast<std::size_t>(kHeads));
  for (const auto& row : seen.rows) {
    ASSERT_EQ(row.size(), 5u);
    EXPECT_EQ(row[1], 0.0f);
    EXPECT_EQ(row[3], 0.0f);
    EXPECT_NEAR(row[0] + row[2] + row[4], 1.0, 1e-6);
  }
  // Without the mask the same query attends to all five slots, and the answer changes.
  view.slot_live = nullptr;
  std::vector<float> unmasked(out.size());
  cpu::paged_attention(view, 0, {kHeads, kKvHeads, kHeadDim}, c.q.data(), unmasked.data(), 4,
                       nullptr, scratch);
  const std::vector<double> all5 = reference(c, {true, true, true, true, true, false, false});
  double moved = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(unmasked[i], all5[i], 1e-5) << i;
    moved += std::fabs(unmasked[i] - out[i]);
  }
  EXPECT_GT(moved, 1e-2);
}

}  // namespace
}  // namespace kvscope
