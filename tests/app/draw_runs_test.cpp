// How kvscope-ui's renderer splits ImGui's draw commands (app/core/draw_runs.h): on frames drawn
// headless by ImGui itself, every command's runs cover its indices once and in order, each
// triangle's run has what the triangle needs, and runs merge only where a call costs more.
// (That the runs draw ImGui's own pixels is screenshot_test.cpp's check, on a real GL driver.)
#include <gtest/gtest.h>
#include <imgui.h>

#include <cstdio>
#include <vector>

#include "app/core/draw_runs.h"
#include "app/core/headless.h"

namespace kvscope::ui {
namespace {

// A window as kvscope's panels draw them: an opaque background, text, a translucent overlay, a
// rounded (anti-aliased) frame, and a grid of cells each with a label (the block map).
ImDrawData* draw_sample_frame(HeadlessImGui& imgui) {
  imgui.new_frame();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImVec2(800, 600));
  ImGui::SetNextWindowBgAlpha(1.0f);
  ImGui::Begin("sample", nullptr, ImGuiWindowFlags_NoTitleBar);
  ImGui::TextUnformatted("block pool: 16 blocks");
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(ImVec2(20, 40), ImVec2(300, 200), IM_COL32(90, 160, 220, 96));
  dl->AddRectFilled(ImVec2(320, 40), ImVec2(500, 200), IM_COL32(40, 50, 60, 255), 6.0f);
  for (int i = 0; i < 24; ++i) {
    const ImVec2 at(20.0f + 60.0f * static_cast<float>(i % 8), 220.0f + 60.0f * (i / 8));
    dl->AddRectFilled(at, ImVec2(at.x + 56, at.y + 56), IM_COL32(120, 200, 150, 255));
    char label[16];
    std::snprintf(label, sizeof label, "#%d", i);
    dl->AddText(ImVec2(at.x + 4, at.y + 4), IM_COL32(10, 10, 10, 255), label);
  }
  ImGui::End();
  return imgui.render();
}

struct Checked {
  int commands = 0;
  int runs = 0;
  float opaque_area = 0.0f;
  float textured_area = 0.0f;
};

// Splits every command of `data` with `costs` and checks the runs against each triangle.
Checked split_and_check(const ImDrawData& data, const DrawCosts& costs) {
  const ImVec2 white = ImGui::GetIO().Fonts->TexUvWhitePixel;
  Checked c;
  std::vector<DrawRun> runs;
  for (int n = 0; n < data.CmdListsCount; ++n) {
    const ImDrawList& list = *data.CmdLists[n];
    for (const ImDrawCmd& cmd : list.CmdBuffer) {
      if (cmd.UserCallback != nullptr || cmd.ElemCount == 0) continue;
      ++c.commands;
      runs.clear();
      split_draw_runs(list, cmd, white, costs, runs);
      c.runs += static_cast<int>(runs.size());
      unsigned next = 0;
      for (const DrawRun& run : runs) {
        EXPECT_EQ(run.first, next) << "runs leave a gap or overlap";
        EXPECT_GT(run.count, 0u);
        EXPECT_EQ(run.count % 3, 0u);
        EXPECT_TRUE(!run.textured || run.blended) << "the atlas has transparent texels";
        if (run.textured) c.textured_area += run.area;
        if (!run.blended) c.opaque_area += run.area;
        const ImDrawIdx* idx = list.IdxBuffer.Data + cmd.IdxOffset;
        const ImDrawVert* vtx = list.VtxBuffer.Data + cmd.VtxOffset;
        for (unsigned i = run.first; i < run.first + run.count; i += 3) {
          const TriangleNeeds needs =
              triangle_needs(vtx[idx[i]], vtx[idx[i + 1]], vtx[idx[i + 2]], white);
          if (needs.textured) {
            EXPECT_TRUE(run.textured) << "triangle " << i / 3;
          }
          if (needs.blended) {
            EXPECT_TRUE(run.blended) << "triangle " << i / 3;
          }
        }
        next = run.first + run.count;
      }
      EXPECT_EQ(next, cmd.ElemCount) << "the runs do not cover the command";
    }
  }
  return c;
}

TEST(DrawRuns, CoverEachCommandOnceWithWhatEveryTriangleNeeds) {
  HeadlessImGui imgui(ImVec2(1280, 720));
  const ImDrawData* data = draw_sample_frame(imgui);
  const Checked c = split_and_check(*data, DrawCosts{});
  EXPECT_GT(c.commands, 0);
  // The window's background (800x600 less its rounded corners' anti-aliased edge) is drawn
  // without the atlas or the blend; the text needs both.
  EXPECT_GE(c.opaque_area, 0.98f * 800.0f * 600.0f);
  EXPECT_GT(c.textured_area, 0.0f);
}

TEST(DrawRuns, MergeOnlyWhereACallCostsMoreThanTheWorkItSaves) {
  HeadlessImGui imgui(ImVec2(1280, 720));
  const ImDrawData* data = draw_sample_frame(imgui);
  // Free calls: no merge, every run as its triangles need it (neighbours differ).
  DrawCosts free_calls;
  free_calls.per_call = 0.0f;
  const Checked unmerged = split_and_check(*data, free_calls);
  // Calls dearer than any work: one run a command, with all its triangles need.
  DrawCosts dear_calls;
  dear_calls.per_call = 1e12f;
  const Checked one_each = split_and_check(*data, dear_calls);
  EXPECT_EQ(one_each.runs, one_each.commands);
  EXPECT_EQ(one_each.opaque_area, 0.0f) << "one run holding text is blended";
  // The default weighs them: each cell's label is not worth a call of its own, but the
  // background is not drawn with the atlas because a label follows it.
  const Checked weighed = split_and_check(*data, DrawCosts{});
  EXPECT_LT(weighed.runs, unmerged.runs);
  EXPECT_GT(weighed.runs, one_each.runs);
  EXPECT_GE(weighed.opaque_area, 0.98f * 800.0f * 600.0f);
  EXPECT_GE(unmerged.runs, 2 * 24) << "each cell and its label";
}

TEST(DrawRuns, TriangleNeedsReadTheUvsAndTheAlphas) {
  const ImVec2 white(0.25f, 0.5f);
  ImDrawVert flat{ImVec2(0, 0), white, IM_COL32(1, 2, 3, 255)};
  ImDrawVert faded = flat;
  faded.col = IM_COL32(1, 2, 3, 254);
  ImDrawVert glyph = flat;
  glyph.uv = ImVec2(0.25f, 0.5001f);
  const TriangleNeeds a = triangle_needs(flat, flat, flat, white);
  EXPECT_FALSE(a.textured);
  EXPECT_FALSE(a.blended);
  const TriangleNeeds b = triangle_needs(flat, faded, flat, white);
  EXPECT_FALSE(b.textured);
  EXPECT_TRUE(b.blended);
  const TriangleNeeds c = triangle_needs(flat, flat, glyph, white);
  EXPECT_TRUE(c.textured);
  EXPECT_TRUE(c.blended);
}

}  // namespace
}  // namespace kvscope::ui
