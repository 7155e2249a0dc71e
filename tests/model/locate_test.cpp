// Model discovery errors and the KV arithmetic of published shapes (pinned to the figures anyone
// can check by hand).
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/common/error.h"
#include "engine/model/locate.h"
#include "engine/model/synthetic.h"

namespace kvscope {
namespace {

TEST(Locate, MissingModelNamesEveryPlaceLooked) {
  ::setenv("KVSCOPE_MODELS", "/nonexistent/kvscope-models", 1);
  try {
    locate_model("no-such-model.bin");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& dir : model_search_dirs()) {
      EXPECT_NE(msg.find(dir + "/no-such-model.bin"), std::string::npos) << msg;
    }
    EXPECT_NE(msg.find("/nonexistent/kvscope-models"), std::string::npos) << msg;
    // How to fix it, in words that suit the CLI's flag and a scenario's "model" key alike.
    EXPECT_NE(msg.find("Give its path, set KVSCOPE_MODELS to a folder holding it"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("--model"), std::string::npos) << msg;
  }
  ::unsetenv("KVSCOPE_MODELS");
}

TEST(Locate, DefaultModelIsFoundBesideTheCheckout) {
  EXPECT_NE(locate_model("").find("stories260K.bin"), std::string::npos);
}

TEST(Locate, SyntheticModelTakesATokenizerJson) {
  const std::string json =
      std::string(KVSCOPE_SOURCE_DIR) + "/tests/data/tokenizer_json/tiny_llama3.json";  // 526
  const LoadedModel loaded = load_model("synthetic:dim=16,heads=2,layers=1,vocab=600", json);
  ASSERT_TRUE(loaded.tokenizer);
  EXPECT_EQ(loaded.tokenizer->vocab_size(), 526);
  EXPECT_TRUE(loaded.tokenizer->adds_bos());
  try {
    load_model("synthetic:dim=16,heads=2,layers=1,vocab=512", json);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              json + ": expected at most 512 tokens (the model's vocab_size), got 526");
  }
}

TEST(KvArithmetic, PublishedShapes) {
  const ModelConfig l70 = parse_synthetic_spec("llama-3-70b").config;
  EXPECT_EQ(l70.kv_bytes_per_token(2), 327680);                  // 2 x 80 x 8 x 128 x 2
  EXPECT_EQ(l70.kv_bytes_per_token(2) * 131072, 40LL << 30);     // 40 GiB at 128K tokens
  EXPECT_EQ(l70.kv_bytes_per_token(2) * 1048576, 320LL << 30);   // 320 GiB at 1M tokens
  EXPECT_EQ(l70.kv_bytes_per_token(2) * 32 * 4096, 40LL << 30);  // batch 32 at 4K: 40 GiB
  const ModelConfig ds = parse_synthetic_spec("deepseek-v3-mla-dims").config;
  EXPECT_EQ(std::int64_t{ds.n_layers} * (ds.mla_kv_lora_rank + ds.mla_rope_dim) * 2, 70272);
  const ModelConfig mistral = parse_synthetic_spec("mistral-7b").config;
  EXPECT_EQ(mistral.n_heads / mistral.n_kv_heads, 4);  // 4x smaller than MHA
}

TEST(Synthetic, BadSpecsAreClearErrors) {
  EXPECT_THROW(parse_synthetic_spec("llama-9"), Error);
  EXPECT_THROW(parse_synthetic_spec("dim=100,heads=3"), Error);
  EXPECT_THROW(parse_synthetic_spec("dim=64,layerz=2"), Error);
  EXPECT_THROW(parse_synthetic_spec("dim=-5"), Error);
  try {
    parse_synthetic_spec("dim=64,heads=8,kv_heads=3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_heads: expected a divisor of heads (8), got 3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvscope
