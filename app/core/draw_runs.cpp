// Splitting ImGui's draw commands into runs of triangles by what they need (draw_runs.h).
#include "app/core/draw_runs.h"

#include <cmath>

namespace kvscope::ui {

namespace {

bool on_white(const ImDrawVert& v, ImVec2 white_uv) {
  return v.uv.x == white_uv.x && v.uv.y == white_uv.y;
}

bool opaque(const ImDrawVert& v) {
  return (v.col & IM_COL32_A_MASK) == IM_COL32_A_MASK;
}

float triangle_area(const ImDrawVert& a, const ImDrawVert& b, const ImDrawVert& c) {
  const float cross =
      (b.pos.x - a.pos.x) * (c.pos.y - a.pos.y) - (b.pos.y - a.pos.y) * (c.pos.x - a.pos.x);
  return 0.5f * std::fabs(cross);
}

float run_cost(const DrawRun& r, const DrawCosts& costs) {
  return costs.per_call + r.area * costs.pixel(r.textured, r.blended);
}

// `a` and `b` (b right after a) as one run, with what either needs.
DrawRun merged(const DrawRun& a, const DrawRun& b) {
  DrawRun m = a;
  m.count += b.count;
  m.textured = a.textured || b.textured;
  m.blended = a.blended || b.blended;
  m.area += b.area;
  return m;
}

}  // namespace

TriangleNeeds triangle_needs(const ImDrawVert& a, const ImDrawVert& b, const ImDrawVert& c,
                             ImVec2 white_uv) {
  TriangleNeeds needs;
  needs.textured = !(on_white(a, white_uv) && on_white(b, white_uv) && on_white(c, white_uv));
  // The atlas's texels have alpha (a glyph's edges, its background): what samples it blends.
  needs.blended = needs.textured || !(opaque(a) && opaque(b) && opaque(c));
  return needs;
}

void split_draw_runs(const ImDrawList& list, const ImDrawCmd& cmd, ImVec2 white_uv,
                     const DrawCosts& costs, std::vector<DrawRun>& out) {
  const ImDrawIdx* idx = list.IdxBuffer.Data + cmd.IdxOffset;
  const ImDrawVert* vtx = list.VtxBuffer.Data + cmd.VtxOffset;
  const std::size_t base = out.size();  // this command's runs are out[base..]
  for (unsigned i = 0; i + 3 <= cmd.ElemCount; i += 3) {
    const ImDrawVert& a = vtx[idx[i]];
    const ImDrawVert& b = vtx[idx[i + 1]];
    const ImDrawVert& c = vtx[idx[i + 2]];
    const TriangleNeeds needs = triangle_needs(a, b, c, white_uv);
    const float area = triangle_area(a, b, c);
    if (out.size() > base && out.back().textured == needs.textured &&
        out.back().blended == needs.blended) {
      out.back().count += 3;
      out.back().area += area;
    } else {
      out.push_back(DrawRun{i, 3, needs.textured, needs.blended, area});
    }
  }
  // Then, over the whole runs, merge the last two kept while one call for both costs less than
  // two (deciding triangle by triangle would let a large run grow out of small merges).
  std::size_t kept = base;
  for (std::size_t r = base; r < out.size(); ++r) {
    out[kept++] = out[r];
    while (kept >= base + 2) {
      const DrawRun& x = out[kept - 2];
      const DrawRun& y = out[kept - 1];
      const DrawRun m = merged(x, y);
      if (run_cost(m, costs) > run_cost(x, costs) + run_cost(y, costs)) break;
      out[kept - 2] = m;
      --kept;
    }
  }
  out.resize(kept);
}

}  // namespace kvscope::ui
