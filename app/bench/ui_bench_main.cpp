// kvscope-ui-bench: CPU time to build one UI frame (ImGui draw lists, no GPU) with a large block
// pool (default 100,000 blocks), for the full window and for the block map alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "app/core/headless.h"
#include "app/core/shell.h"
#include "app/demo/demo_source.h"
#include "app/panels/block_map_panel.h"

namespace {

struct Stats {
  double mean = 0, median = 0, p95 = 0;
  int vertices = 0;
};

Stats measure(kvscope::ui::HeadlessImGui& imgui, kvscope::ui::UiShell& shell, int frames) {
  std::vector<double> ms;
  int vertices = 0;
  for (int f = 0; f < frames + 10; ++f) {  // 10 warm-up frames
    ImGui::GetIO().MousePos =
        ImVec2(300.0f + (f * 7) % 400, 300.0f + (f * 3) % 200);  // hover the map
    const auto t0 = std::chrono::steady_clock::now();
    imgui.new_frame();
    shell.frame(1.0 / 60.0);
    const ImDrawData* dd = imgui.render();
    const auto t1 = std::chrono::steady_clock::now();
    vertices = dd->TotalVtxCount;
    if (f >= 10) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  Stats s;
  for (double v : ms) s.mean += v / ms.size();
  s.median = ms[ms.size() / 2];
  s.p95 = ms[std::min(ms.size() - 1, ms.size() * 95 / 100)];
  s.vertices = vertices;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 100000, frames = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--blocks") == 0) blocks = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--frames") == 0) frames = std::max(1, std::atoi(argv[i + 1]));
  }
  kvscope::ui::HeadlessImGui imgui(ImVec2(1600, 1000));
  kvscope::ui::DemoConfig cfg;
  cfg.num_blocks = blocks;
  cfg.num_steps = 120;
  kvscope::ui::UiShell shell(std::make_unique<kvscope::ui::DemoSource>(cfg), imgui.fonts());
  shell.state().set_step(100);
  const Stats all = measure(imgui, shell, frames);
  for (auto& p : shell.panels()) p->visible = std::strcmp(p->title(), "Block pool") == 0;
  const Stats map = measure(imgui, shell, frames);
  std::printf(
      "kvscope-ui-bench: %d blocks (synthetic pool states), 1600x1000, %d frames, CPU frame build "
      "time\n",
      blocks, frames);
  std::printf("  full UI     mean %6.2f ms  median %6.2f ms  p95 %6.2f ms  (%d vertices)\n",
              all.mean, all.median, all.p95, all.vertices);
  std::printf("  block map   mean %6.2f ms  median %6.2f ms  p95 %6.2f ms  (%d vertices)\n",
              map.mean, map.median, map.p95, map.vertices);
  for (auto& p : shell.panels()) {
    if (const auto* map_panel = dynamic_cast<const kvscope::ui::BlockMapPanel*>(p.get())) {
      std::printf(
          "  block map layout: %d cells drawn, %d block(s) per cell, %d blocks used at step %d\n",
          map_panel->cells_drawn(), map_panel->blocks_per_cell(),
          shell.state().metrics().blocks_used, shell.state().step());
    }
  }
  return 0;
}
