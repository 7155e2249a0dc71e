// Mooncake trace tests: line-numbered parse errors, --skip-bad counting, synthetic tokens, and
// the unlimited-capacity hit ratio of a hand-built trace against the hand-computed value, and
// the tiers behind the pool (by hand and on the real trace).
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/scenario/workload.h"
#include "engine/trace/mooncake.h"
#include "engine/trace/mooncake_replay.h"

namespace kvscope {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_mooncake_trace(text, "t.jsonl");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

const char* kGood =
    R"({"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]})";

TEST(Mooncake, ParseErrorsNameFileLineFieldValueAndExpectation) {
  const std::string g = std::string(kGood) + "\n";
  EXPECT_EQ(error_of(g + "{not json\n"), "t.jsonl:2: expected a JSON object, got '{not json'");
  EXPECT_EQ(error_of(g + g + R"({"timestamp": 5, "output_length": 1, "hash_ids": []})"),
            "t.jsonl:3: input_length: missing (expected a non-negative integer)");
  EXPECT_EQ(error_of(R"({"timestamp": 5, "input_length": -4, "output_length": 1, "hash_ids": []})"),
            "t.jsonl:1: input_length: expected a non-negative integer, got -4");
  EXPECT_EQ(
      error_of(R"({"timestamp": 5, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2]})"),
      "t.jsonl:1: hash_ids: expected 3 ids (ceil(input_length 1100 / 512)), got 2 ids");
  EXPECT_EQ(
      error_of(R"({"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": ["a"]})"),
      "t.jsonl:1: hash_ids[0]: expected an integer, got \"a\"");
  EXPECT_EQ(
      error_of(R"({"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [1]})"),
      "t.jsonl:1: timestamp: expected a non-negative number of ms, got -1");
  EXPECT_EQ(error_of("[1, 2]"), "t.jsonl:1: expected a JSON object, got [1,2]");
  EXPECT_EQ(error_of(g + "\n   \n" + g), "no error");  // blank lines are fine
}

TEST(Mooncake, SkipBadCountsAndSkips) {
  const std::string text =
      std::string(kGood) + "\nnope\n" + kGood +
      "\n{\"timestamp\": 1, \"input_length\": 5, \"output_length\": -1, \"hash_ids\": [7]}\n";
  MooncakeLoadOptions o;
  o.skip_bad = true;
  const MooncakeTrace t = parse_mooncake_trace(text, "t.jsonl", o);
  EXPECT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.skipped_lines, 2);
  ASSERT_EQ(t.skipped_errors.size(), 2u);
  EXPECT_NE(t.skipped_errors[1].find("t.jsonl:4: output_length"), std::string::npos);
  EXPECT_EQ(t.requests[1].line, 3);
  EXPECT_THROW(load_mooncake_trace("/nonexistent/x.jsonl"), Error);
}

TEST(Mooncake, SyntheticTokensFollowHashIds) {
  MooncakeRequest a{0, 1100, 1, {1, 2, 3}, 1};
  MooncakeRequest b{0, 600, 1, {1, 9}, 2};
  std::vector<TokenId> ta, tb;
  mooncake_prompt_tokens(a, ta);
  mooncake_prompt_tokens(b, tb);
  ASSERT_EQ(ta.size(), 1100u);
  ASSERT_EQ(tb.size(), 600u);
  EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 512, tb.begin()));               // same id 1
  EXPECT_FALSE(std::equal(ta.begin() + 512, ta.begin() + 600, tb.begin() + 512));  // 2 vs 9
  for (TokenId t : ta) ASSERT_TRUE(t >= 1 && t < 32000);
}

// Hand-built: block size 512, unlimited capacity.
//  r1 1100 tokens [1,2,3]: nothing cached (first occurrence); caches blocks 1,2
//  r2 1536 tokens [1,2,4]: 2 reusable blocks (the last token is computed): hits 1,2 = 1024
//  r3 2048 tokens [1,2,4,5]: 3 reusable, r2 cached 1,2,4: hits 1536
//  r4  600 tokens [9,10]: first occurrence: 0
//  r5  512 tokens [1]: no reusable full block (shorter-than-block): 0
// hit ratio = 2560 / 5796. The hash-id figure also counts r5's block: 3072 / 5796.
MooncakeTrace hand_trace() {
  const char* text =
      R"({"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 10, "input_length": 1536, "output_length": 5, "hash_ids": [1, 2, 4]}
{"timestamp": 20, "input_length": 2048, "output_length": 5, "hash_ids": [1, 2, 4, 5]}
{"timestamp": 30, "input_length": 600, "output_length": 5, "hash_ids": [9, 10]}
{"timestamp": 40, "input_length": 512, "output_length": 5, "hash_ids": [1]}
)";
  return parse_mooncake_trace(text, "hand.jsonl");
}

TEST(MooncakeReplay, UnlimitedCapacityHitRatioMatchesTheHandComputedValue) {
  const MooncakeTrace t = hand_trace();
  EXPECT_DOUBLE_EQ(mooncake_hash_id_reuse_ratio(t.requests), 3072.0 / 5796.0);
  for (IndexKind k : {IndexKind::kHashChain, IndexKind::kRadix}) {
    MooncakeReplayConfig c;
    c.index = k;
    const MooncakeReplayResult r = replay_mooncake(t, c);
    EXPECT_EQ(r.admitted, 5);
    EXPECT_EQ(r.cache.hit_tokens, 2560);
    EXPECT_DOUBLE_EQ(r.cache.token_hit_rate(), 2560.0 / 5796.0);
    EXPECT_EQ(r.cache.evictions, 0);
    const auto& by = r.cache.lookups_by_reason;
    EXPECT_EQ(by[static_cast<int>(MissReason::kFirstOccurrence)], 2);
    EXPECT_EQ(by[static_cast<int>(MissReason::kNone)], 2);
    EXPECT_EQ(by[static_cast<int>(MissReason::kShorterThanBlock)], 1);
    // Without prefix caching nothing is saved.
    c.prefix_caching = false;
    EXPECT_EQ(replay_mooncake(t, c).cache.hit_tokens, 0);
  }
}

TEST(MooncakeReplay, SmallCapacityEvictsAndSmallerBlocksStillMatch) {
  const MooncakeTrace t = hand_trace();
  MooncakeReplayConfig c;
  c.capacity_tokens = 4 * 512;  // r3 needs 5 blocks: rejected; the others evict each other
  c.step_ms = 1.0;
  const MooncakeReplayResult r = replay_mooncake(t, c);
  EXPECT_EQ(r.rejected, 1);
  EXPECT_GT(r.cache.evictions, 0);
  // Block size 16: the same prefixes, finer blocks: more of each prompt is reusable.
  MooncakeReplayConfig fine;
  fine.block_size = 16;
  const MooncakeReplayResult f = replay_mooncake(t, fine);
  // r2 reuses 1024 (its 1024 shared tokens) + nothing of block 4; r3 reuses 1536; r5 reuses 496.
  EXPECT_EQ(f.cache.hit_tokens, 1024 + 1536 + 496);
  MooncakeReplayConfig bad;
  bad.block_size = 0;
  EXPECT_THROW(replay_mooncake(t, bad), Error);
}

// Tiers behind the pool, by hand: r2 evicts r1's two cached blocks into the host tier, and r3, the
// same prompt as r1, finds them there (1,024 tokens reloaded, none on the device); an empty
// prompt looks up nothing.
TEST(MooncakeReplay, ABlockThePoolEvictedIsFoundInTheHostTier) {
  const MooncakeTrace t = parse_mooncake_trace(
      R"({"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2, 3]}
{"timestamp": 100, "input_length": 1025, "output_length": 1, "hash_ids": [7, 8, 9]}
{"timestamp": 200, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2, 3]}
{"timestamp": 300, "input_length": 0, "output_length": 1, "hash_ids": []}
)",
      "tiers.jsonl");
  MooncakeReplayConfig c;
  c.capacity_tokens = 3 * 512;
  c.step_ms = 1.0;
  c.tiers = {{"host", 4}, {"disk", 4}};
  const MooncakeReplayResult r = replay_mooncake(t, c);
  EXPECT_EQ(r.cache.hit_tokens, 0);
  EXPECT_EQ(r.cache.evictions, 4);  // r2 evicts 1 and 2, r3 evicts 7 and 8
  ASSERT_EQ(r.tiers.size(), 2u);
  EXPECT_EQ(r.tiers[0].hit_tokens, 1024);
  EXPECT_EQ(r.tiers[0].stats.written, 4);
  EXPECT_EQ(r.tiers[1].hit_tokens, 0);
  EXPECT_EQ(r.all_hit_tokens(), 1024);
  MooncakeReplayConfig unbounded = c;
  unbounded.capacity_tokens = 0;
  EXPECT_THROW(replay_mooncake(t, unbounded), Error);
  MooncakeReplayConfig no_caching = c;
  no_caching.prefix_caching = false;
  EXPECT_THROW(replay_mooncake(t, no_caching), Error);
}

// On the real conversation trace (its first 3,000 requests): tiers never change the pool's own
// decisions, what they add never beats an unlimited pool, and a host tier that holds everything
// brings the hit ratio up to exactly the unlimited pool's.
TEST(MooncakeReplay, TiersOnTheRealTraceAddHitsUpToTheUnlimitedPools) {
  MooncakeTrace t = load_mooncake_trace(
      locate_trace("mooncake/conversation_trace.jsonl", "", "the Mooncake conversation trace"));
  ASSERT_GT(t.requests.size(), 3000u);
  t.requests.resize(3000);
  MooncakeReplayConfig c;
  const std::int64_t unlimited = replay_mooncake(t, c).cache.hit_tokens;
  c.capacity_tokens = 2048 * 512;
  const MooncakeReplayResult plain = replay_mooncake(t, c);
  ASSERT_LT(plain.cache.hit_tokens, unlimited / 2) << "a pool small enough to evict";

  c.tiers = {{"host", 4096}, {"disk", 16384}};
  const MooncakeReplayResult small = replay_mooncake(t, c);
  EXPECT_EQ(small.cache.hit_tokens, plain.cache.hit_tokens);
  EXPECT_EQ(small.cache.evictions, plain.cache.evictions);
  EXPECT_EQ(small.tiers[0].stats.written, plain.cache.evictions);
  EXPECT_EQ(small.tiers[1].stats.written, small.tiers[0].stats.passed_down);
  EXPECT_GT(small.tiers[0].hit_tokens, 0);
  EXPECT_GT(small.tiers[1].hit_tokens, 0);
  EXPECT_LE(small.all_hit_tokens(), unlimited);

  c.tiers = {{"host", std::int64_t{1} << 30}};
  const MooncakeReplayResult everything = replay_mooncake(t, c);
  EXPECT_EQ(everything.tiers[0].stats.passed_down, 0);
  EXPECT_EQ(everything.all_hit_tokens(), unlimited);
}

}  // namespace
}  // namespace kvscope
