// Screenshot test: runs the real kvscope-ui under Xvfb on scenarios/minimal.json with --screenshot
// and checks the PNG is not blank. SKIPPED (clearly) only when xvfb-run is not installed.
#include <gtest/gtest.h>
#include <stb_image.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

bool have_xvfb_run() {
  return std::system("command -v xvfb-run >/dev/null 2>&1") == 0;
}

TEST(UiScreenshot, AppRendersANonBlankPngUnderXvfb) {
  if (!have_xvfb_run()) GTEST_SKIP() << "SKIPPED: xvfb-run is not installed, cannot open a display";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvscope_ui_shot_test";
  std::filesystem::create_directories(dir);
  const std::string png = (dir / "out.png").string();
  std::filesystem::remove(png);
  // Mesa's software GL driver keeps a few allocations until exit that LeakSanitizer reports from
  // an unloaded module; leak checking is off for this child process only (ASan stays on).
  const std::string cmd =
      std::string("ASAN_OPTIONS=detect_leaks=0 xvfb-run -a -s \"-screen 0 1600x1000x24\" ") +
      KVSCOPE_UI_BINARY + " " + KVSCOPE_SOURCE_DIR + "/scenarios/minimal.json --screenshot " + png +
      " --frames 30 > " + (dir / "log.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << cmd;
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load(png.c_str(), &w, &h, &n, 3);
  ASSERT_NE(px, nullptr) << "cannot read " << png;
  EXPECT_EQ(w, 1600);
  EXPECT_EQ(h, 1000);
  double sum = 0, sum2 = 0;
  const std::size_t count = static_cast<std::size_t>(w) * h * 3;
  for (std::size_t i = 0; i < count; ++i) {
    sum += px[i];
    sum2 += static_cast<double>(px[i]) * px[i];
  }
  stbi_image_free(px);
  const double mean = sum / count;
  const double variance = sum2 / count - mean * mean;
  EXPECT_GT(variance, 100.0) << "the screenshot looks blank (mean " << mean << ")";
}

// kvscope's renderer (app/renderer.h) against Dear ImGui's own OpenGL3 backend on Mesa's
// software driver: the same frames, pixel for pixel, in views that draw many kinds of shapes
// (block map cells and labels, plots, the prefix tree's nodes and edges, presenter mode's sizes).
// Views with long background jobs (the Attention workspace's Quality sweep) are left out: under
// ASan a job can outlast the screenshot's wait, and two runs would show different progress.
TEST(UiScreenshot, TheRendererDrawsImGuiBackendsPixels) {
  if (!have_xvfb_run()) GTEST_SKIP() << "SKIPPED: xvfb-run is not installed, cannot open a display";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "kvscope_ui_renderer_test";
  std::filesystem::create_directories(dir);
  const std::string scenarios = std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/";
  const char* const kViews[][2] = {
      {"pool", "minimal.json --presenter --size 1280x720"},
      {"prefix", "shared-system-prompt.json --view prefix --size 1280x720"},
      {"serving", "disaggregated-chat.json --view serving --size 1600x1000"},
  };
  for (const auto& view : kViews) {
    std::vector<unsigned char> pixels[2];
    int w[2] = {0, 0}, h[2] = {0, 0};
    for (int r = 0; r < 2; ++r) {
      const std::string png = (dir / (std::string(view[0]) + std::to_string(r) + ".png")).string();
      std::filesystem::remove(png);
      const std::string cmd =
          std::string("ASAN_OPTIONS=detect_leaks=0 xvfb-run -a -s \"-screen 0 1600x1000x24\" ") +
          KVSCOPE_UI_BINARY + " " + scenarios + view[1] + " --frames 10 --renderer " +
          (r == 0 ? "imgui" : "kvscope") + " --screenshot " + png + " > " +
          (dir / "log.txt").string() + " 2>&1";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      // kvscope's renderer really drew (were its shaders refused, it would fall back to ImGui's
      // backend and the comparison would compare that with itself).
      std::ifstream log(dir / "log.txt");
      const std::string said((std::istreambuf_iterator<char>(log)),
                             std::istreambuf_iterator<char>());
      ASSERT_EQ(said.find("OpenGL3 backend instead"), std::string::npos) << said;
      int n = 0;
      unsigned char* px = stbi_load(png.c_str(), &w[r], &h[r], &n, 3);
      ASSERT_NE(px, nullptr) << "cannot read " << png;
      pixels[r].assign(px, px + static_cast<std::size_t>(w[r]) * h[r] * 3);
      stbi_image_free(px);
    }
    ASSERT_EQ(w[0], w[1]);
    ASSERT_EQ(h[0], h[1]);
    std::size_t differ = 0, lit = 0;
    for (std::size_t i = 0; i < pixels[0].size(); ++i) {
      differ += pixels[0][i] != pixels[1][i];
      lit += pixels[1][i] > 64;
    }
    EXPECT_EQ(differ, 0u) << view[0] << ": " << differ << " of " << pixels[0].size()
                          << " channel values differ from ImGui's backend";
    EXPECT_GT(lit, pixels[1].size() / 100) << view[0] << ": the frame looks blank";
  }
}

}  // namespace
