// Sparse attention inside the Simulator on the real model: every request's tokens are the ones it
// generates alone in a Simulator of its own with the same selector (batching and chunked prefill
// change nothing), a k that covers every key is dense attention token for token, and a small k
// changes what is generated.
#include <gtest/gtest.h>

#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

SimConfig sparse_config(int topk) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 256;
  SparseOptions o;
  o.selector = SelectorKind::kOracle;
  o.topk = topk;
  c.sparse_attention = o;
  return c;
}

std::vector<std::vector<int>> run_all(const SimConfig& c, std::vector<SimRequest> requests) {
  const std::size_t n = requests.size();
  Simulator sim(c, test::real_sim_model(), std::move(requests));
  sim.run(10000);
  EXPECT_TRUE(sim.done());
  std::vector<std::vector<int>> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(sim.request(static_cast<int>(i)).generated_tokens());
  return out;
}

TEST(SparseSimulator, EachRequestGeneratesWhatItGeneratesAlone) {
  const std::vector<SimRequest> requests = test::mixed_requests(4);
  const SimConfig c = sparse_config(8);
  const auto together = run_all(c, requests);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    SimRequest alone = requests[i];
    alone.arrival_step = 0;
    EXPECT_EQ(run_all(c, {alone}).front(), together[i]) << "request " << i;
  }
  // Every key kept: dense attention's tokens; k = 8: other tokens for some request.
  SimConfig dense = c;
  dense.sparse_attention.reset();
  const auto reference = run_all(dense, requests);
  EXPECT_EQ(run_all(sparse_config(100000), requests), reference);
  EXPECT_NE(together, reference);
}

}  // namespace
}  // namespace kvscope
