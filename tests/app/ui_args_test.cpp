// kvscope-ui's command line, checked before any window opens (no display needed): a bad
// --backend value, --backend or --model with a recording, and a model not on disk are one-line
// errors with exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

struct Ran {
  int code = -1;
  std::string output;
};

Ran run_ui(const std::string& args) {
  Ran r;
  const std::string cmd = std::string(KVSCOPE_UI_BINARY) + " " + args + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.output += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

TEST(UiArgs, BackendNamesWhatItAccepts) {
  const Ran r = run_ui("--backend gpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(first_line(r.output),
            "kvscope-ui: --backend: expected cpu, cuda-sim or cuda, got \"gpu\"");
}

TEST(UiArgs, RendererNamesWhatItAccepts) {
  const Ran r = run_ui("--renderer gl");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(first_line(r.output), "kvscope-ui: --renderer: expected kvscope or imgui, got \"gl\"");
}

TEST(UiArgs, BackendNeedsAScenario) {
  const std::string expected =
      "kvscope-ui: --backend: runs a scenario (.json); a recording or live stream has no model";
  const Ran live = run_ui("--attach tcp://127.0.0.1:1 --backend cuda-sim");
  EXPECT_EQ(live.code, 2);
  EXPECT_EQ(first_line(live.output), expected);
  const std::string kvr = testing::TempDir() + "ui_args_test.kvr";
  std::ofstream(kvr) << "not read: the flags are checked first";
  const Ran recording = run_ui(kvr + " --backend cuda-sim");
  EXPECT_EQ(recording.code, 2);
  EXPECT_EQ(first_line(recording.output), expected);
}

// --model runs a scenario on another model: like --backend it needs a scenario, and a model that
// is not on disk is the loader's one-line error before any window opens.
TEST(UiArgs, ModelNeedsAScenarioAndAModelOnDisk) {
  const Ran live = run_ui("--attach tcp://127.0.0.1:1 --model smollm2");
  EXPECT_EQ(live.code, 2);
  EXPECT_EQ(first_line(live.output),
            "kvscope-ui: --model: runs a scenario (.json); a recording or live stream has no "
            "model");
  const Ran missing = run_ui(std::string(KVSCOPE_SOURCE_DIR) +
                             "/scenarios/minimal.json --model /nonexistent/m.gguf");
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(first_line(missing.output).rfind("kvscope-ui: /nonexistent/m.gguf: ", 0), 0u)
      << missing.output;
}

}  // namespace
