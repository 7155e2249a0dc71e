// The PyTorch SDPA baseline of `kvscope bench attention` (cli/sdpa_baseline.h, scripts/
// sdpa_bench.py). Its timings need a GPU and a CUDA torch, which no machine here has; what runs
// here: the parser on the script's two kinds of output and on output that is not the script's,
// and the real script, which reports why there is no baseline on this machine.
#include "cli/sdpa_baseline.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine/common/error.h"

namespace kvscope::cli {
namespace {

TEST(SdpaBaseline, ParsesTheScriptsRows) {
  const SdpaResult r = parse_sdpa_output(
      R"({"available": true, "torch": "2.6.0", "device": "NVIDIA A100", "rows": [)"
      R"({"batch": 8, "context": 8192, "ms": 0.25, "kv_gb_per_s": 537.0, "gqa": "native"},)"
      R"({"batch": 64, "context": 32768, "error": "out of memory"}]})",
      "sdpa_bench.py");
  ASSERT_TRUE(r.available);
  EXPECT_EQ(r.torch, "2.6.0");
  EXPECT_EQ(r.device, "NVIDIA A100");
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].batch, 8);
  EXPECT_EQ(r.rows[0].context, 8192);
  EXPECT_DOUBLE_EQ(r.rows[0].ms, 0.25);
  EXPECT_DOUBLE_EQ(r.rows[0].kv_gb_per_s, 537.0);
  EXPECT_EQ(r.rows[0].gqa, "native");
  EXPECT_TRUE(r.rows[0].error.empty());
  EXPECT_EQ(r.rows[1].error, "out of memory");
  const SdpaResult none = parse_sdpa_output(
      R"({"available": false, "reason": "torch 2.6.0 sees no CUDA device"})", "sdpa_bench.py");
  EXPECT_FALSE(none.available);
  EXPECT_EQ(none.reason, "torch 2.6.0 sees no CUDA device");
}

TEST(SdpaBaseline, OutputThatIsNotTheScriptsIsAnErrorNamingIt) {
  for (const char* text : {"Traceback (most recent call last):", R"({"available": true})",
                           R"({"available": true, "rows": [{"batch": 1}]})",
                           R"({"available": true, "rows": [{"batch": 1, "context": 2}]})"}) {
    try {
      parse_sdpa_output(text, "scripts/sdpa_bench.py");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("scripts/sdpa_bench.py: expected its JSON result"),
                std::string::npos)
          << e.what();
    }
  }
}

// The rows bench attention prints: SDPA against kvscope's fp16 contiguous row of the same context
// and batch (time ratio, share of the device copy), a row without one, and a row that failed.
TEST(SdpaBaseline, RowsAreSetBesideKvscopesFp16) {
  SdpaResult r;
  r.available = true;
  r.rows = {{8, 8192, 0.5, 400.0, "native", ""},
            {1, 1024, 0.1, 50.0, "repeated", ""},
            {64, 32768, 0.0, 0.0, "", "out of memory"}};
  const std::map<std::pair<int, int>, Fp16Figures> fp16 = {{{8192, 8}, {0.75, 800.0}}};
  nlohmann::json rows = nlohmann::json::array();
  std::string text;
  append_sdpa_rows(r, fp16, rows, text);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["format"], "sdpa-fp16");
  EXPECT_DOUBLE_EQ(rows[0]["kvscope_fp16_time_over_sdpa"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(rows[0]["of_copy"].get<double>(), 0.5);
  EXPECT_FALSE(rows[1].contains("kvscope_fp16_time_over_sdpa"));
  EXPECT_EQ(rows[2]["error"], "out of memory");
  EXPECT_NE(text.find("  50.0%  torch (gqa native), kvscope fp16 time / SDPA's 1.50x\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("torch (gqa repeated), no kvscope fp16 row to compare"), std::string::npos)
      << text;
  EXPECT_NE(text.find("contiguous out of memory"), std::string::npos) << text;
}

// The real script on this machine: whether torch imports decides which reason it must give.
TEST(SdpaBaseline, TheScriptSaysWhyThereIsNoBaselineHere) {
  const bool torch = std::system("python3 -c 'import torch' >/dev/null 2>&1") == 0;
  const SdpaResult r = run_sdpa(sdpa_script(), {1}, {16}, 1);
  ASSERT_FALSE(r.available) << "a CUDA torch on a machine without a GPU?";
  const std::string want = torch ? "sees no CUDA device" : "torch not importable (";
  EXPECT_NE(r.reason.find(want), std::string::npos) << r.reason;
  // A script that fails is a reason too, never a crash or a hang.
  const SdpaResult failed = run_sdpa("/nonexistent/sdpa_bench.py", {1}, {16}, 1);
  EXPECT_FALSE(failed.available);
  EXPECT_NE(failed.reason.find("failed (exit status 2)"), std::string::npos) << failed.reason;
}

}  // namespace
}  // namespace kvscope::cli
