// scenarios/smollm2-cache-blend.json: two documents, each cached alone, then a question whose
// answer needs both. What its captions say: CacheBlend's 15% picks start at document 2 (never in
// document 1, a prefix) and include its "She"; with them the answer names the dog, as the full
// prefill does; plain reuse and 4% do not; recomputing 100% is the full prefill token for token.
// The answers depend on the last bits of the build's float rounding, like the chat demo's
// (tests/release_only.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"

namespace kvscope {
namespace {

struct BlendRun {
  std::vector<int> tokens;  // generated
  std::string text;         // generated, decoded
  std::vector<int> picks;   // chunk positions recomputed
  std::vector<int> chunks;  // token counts of the documents
  std::vector<int> prompt;  // prompt token ids
  std::string piece(const Tokenizer& t, int pos) const {
    return t.decode_all({prompt[static_cast<std::size_t>(pos)]});
  }
};

struct Loaded {
  Scenario scenario;
  ScenarioModelLoad model;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded x;
    x.scenario = parse_scenario(
        (std::filesystem::path(KVSCOPE_SOURCE_DIR) / "scenarios" / "smollm2-cache-blend.json")
            .string());
    x.model = load_scenario_model(x.scenario, "", false, WeightFormat::kNative);
    return x;
  }();
  return l;
}

BlendRun run_of(const std::string& variant) {
  const Loaded& l = loaded();
  ResolvedRun run = resolve_scenario(l.scenario, variant, l.model.shape, l.model.tokenizer.get());
  Simulator sim(run.config, SimModel{l.model.shape, l.model.weights}, run.requests);
  sim.run(1000);
  EXPECT_TRUE(sim.done()) << variant;
  BlendRun r;
  r.tokens = sim.request(0).generated_tokens();
  r.text = l.model.tokenizer->decode_all(r.tokens);
  r.picks = sim.blend_recomputed(0);
  r.chunks = run.requests[0].blend_chunks;
  r.prompt = run.requests[0].prompt_tokens;
  return r;
}

TEST(SmolLM2CacheBlend, FifteenPercentFindsWhatPlainReuseLost) {
  const Tokenizer& tok = *loaded().model.tokenizer;
  const BlendRun blend = run_of("");
  ASSERT_EQ(blend.chunks.size(), 2u);
  const int doc2 = blend.chunks[0], docs = blend.chunks[0] + blend.chunks[1];
  EXPECT_EQ(docs, 101) << "the caption says 101 document tokens";
  EXPECT_EQ(blend.prompt.size(), 116u) << "the caption says 116 tokens in all";
  ASSERT_EQ(blend.picks.size(), 15u) << "15% of 101";
  EXPECT_EQ(blend.picks.front(), doc2) << "the first pick is document 2's first token";
  EXPECT_TRUE(std::all_of(blend.picks.begin(), blend.picks.end(), [&](int p) { return p >= doc2; }))
      << "document 1, a prefix, is never picked";
  // "Document 2: She lives in": its first seven tokens.
  std::string opening;
  for (int p = doc2; p < doc2 + 7; ++p) {
    EXPECT_NE(std::find(blend.picks.begin(), blend.picks.end(), p), blend.picks.end())
        << "position " << p << " '" << blend.piece(tok, p) << "'";
    opening += blend.piece(tok, p);
  }
  EXPECT_EQ(opening, "Document 2: She lives in");
  EXPECT_NE(blend.text.find("Anna's dog is Pepper."), std::string::npos) << blend.text;

  const BlendRun full = run_of("full");
  EXPECT_NE(full.text.find("The answer is: Pepper."), std::string::npos) << full.text;
  EXPECT_TRUE(full.picks.empty());
  const BlendRun all = run_of("all");
  EXPECT_EQ(all.tokens, full.tokens) << "100% recomputed is the full prefill: " << all.text;
  EXPECT_EQ(all.picks.size(), 101u);

  const BlendRun reuse = run_of("reuse");
  EXPECT_TRUE(reuse.picks.empty());
  EXPECT_EQ(reuse.text.find("Pepper"), std::string::npos) << reuse.text;
  EXPECT_NE(reuse.text.find("plum cake"), std::string::npos) << reuse.text;
  // Caption 2, at step 7: the 8th token is where they part ("Pepper" against "a").
  ASSERT_GT(reuse.tokens.size(), 8u);
  EXPECT_EQ(std::vector<int>(reuse.tokens.begin(), reuse.tokens.begin() + 7),
            std::vector<int>(blend.tokens.begin(), blend.tokens.begin() + 7));
  EXPECT_EQ(tok.decode_all({blend.tokens[7]}), " Pepper");
  EXPECT_EQ(tok.decode_all({reuse.tokens[7]}), " a");
  const BlendRun few = run_of("blend-4");
  EXPECT_EQ(few.picks.size(), 4u);
  EXPECT_EQ(few.text.find("Pepper"), std::string::npos) << few.text;
  EXPECT_NE(few.text.find("Anna's dog is a reference to the dog's name, Anna"), std::string::npos)
      << few.text;
  std::string heading;
  for (int p = doc2; p < doc2 + 4; ++p) heading += few.piece(tok, p);
  EXPECT_EQ(heading, "Document 2:");
  EXPECT_EQ(few.picks, (std::vector<int>{doc2, doc2 + 1, doc2 + 2, doc2 + 3}))
      << "4%: document 2's heading";
}

}  // namespace
}  // namespace kvscope
