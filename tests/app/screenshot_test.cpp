// Screenshot test: runs the real kvscope-ui under Xvfb on scenarios/minimal.json with --screenshot
// and checks the PNG is not blank. SKIPPED (clearly) only when xvfb-run is not installed.
#include <gtest/gtest.h>
#include <stb_image.h>

#include <cstdlib>
#include <filesystem>
#include <string>

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

}  // namespace
