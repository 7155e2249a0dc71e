// How kvscope-ui's renderer (app/renderer.cpp) draws one of ImGui's draw commands: as runs of
// triangles, each run with only the work its triangles need.
//
// ImGui draws everything with one state: blended, and multiplied by a sample of its font atlas,
// which for a flat shape is the atlas's white texel (1.0). On a GPU that costs nothing; on a
// software rasterizer (SwiftShader in a browser without a GPU, Mesa's llvmpipe) the texture
// sample and the blend are most of a pixel's cost, and most pixels are flat: panel backgrounds,
// block-map cells, plot fills. A triangle whose three vertices sit on the white texel needs no
// texture; one whose three vertices are opaque needs no blend. Either way the pixel is the same.
//
// A state that does more than a triangle needs still draws it right, so neighbouring runs can be
// merged into a run with both states' work: split_draw_runs merges where one draw call saves
// more than the extra work costs (a text label between two cells is not worth a call of its own).
#pragma once

#include <imgui.h>

#include <vector>

namespace kvscope::ui {

// A run of a command's triangles and what drawing them needs.
struct DrawRun {
  unsigned first = 0;     // the run's first index, from the command's IdxOffset
  unsigned count = 0;     // its indices (3 a triangle)
  bool textured = false;  // some triangle samples the atlas away from its white texel
  bool blended = false;   // some triangle is textured or has a vertex not fully opaque
  float area = 0.0f;      // its triangles' areas added up, in ImGui's pixels
};

// What a triangle needs: its vertices' UVs all on the white texel (else textured), and, if so,
// their alphas all 255 (else blended; the atlas has transparent texels, so textured is blended).
struct TriangleNeeds {
  bool textured = false;
  bool blended = false;
};
TriangleNeeds triangle_needs(const ImDrawVert& a, const ImDrawVert& b, const ImDrawVert& c,
                             ImVec2 white_uv);

// The relative cost of a pixel in each state (textured and blended = 1), and of one draw call in
// pixels, as measured on SwiftShader (docs/web.md): what split_draw_runs weighs merges with.
struct DrawCosts {
  float textured_blended = 1.0f;
  float flat_blended = 0.5f;
  float flat_opaque = 0.35f;
  float per_call = 4000.0f;
  float pixel(bool textured, bool blended) const {
    if (textured) return textured_blended;
    return blended ? flat_blended : flat_opaque;
  }
};

// Appends `cmd`'s runs (of `list`'s triangles) to `out`, in the command's order: together they
// cover its indices exactly once, and each triangle's run has at least what it needs.
void split_draw_runs(const ImDrawList& list, const ImDrawCmd& cmd, ImVec2 white_uv,
                     const DrawCosts& costs, std::vector<DrawRun>& out);

}  // namespace kvscope::ui
