// The plot widget: layout, scales, grid, series, reference lines, hover read-out and CSV export.
#include "app/widgets/plot.h"

#include <algorithm>
#include <cfloat>
#include <limits>

#include "app/core/theme.h"
#include "app/widgets/layout_probe.h"
#include "engine/common/atomic_write.h"

namespace kvscope::ui {

namespace {

struct Scale {  // maps data to screen along one axis
  double lo = 0, hi = 1;
  float p0 = 0, p1 = 1;  // screen coordinates of lo and hi
  bool log = false;
  double t(double v) const { return log ? std::log(std::max(v, 1e-300)) : v; }
  float to_screen(double v) const {
    const double a = t(lo), b = t(hi);
    return p0 + static_cast<float>((t(v) - a) / (b - a)) * (p1 - p0);
  }
  double to_data(float p) const {
    const double a = t(lo), b = t(hi);
    const double u = a + (p - p0) / static_cast<double>(p1 - p0) * (b - a);
    return log ? std::exp(u) : u;
  }
};

void data_range(const PlotAxis& axis, std::span<const PlotSeries> series, bool use_x, double& lo,
                double& hi) {
  lo = std::numeric_limits<double>::infinity();
  hi = -lo;
  for (const PlotSeries& s : series) {
    for (double v : use_x ? s.x : s.y) {
      if (!std::isfinite(v) || (axis.log && v <= 0)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!std::isfinite(lo)) lo = axis.log ? 1.0 : 0.0, hi = axis.log ? 10.0 : 1.0;
  if (!axis.log && !use_x) lo = std::min(lo, 0.0);  // linear value axes start at zero
  if (!use_x && !axis.log) hi += (hi - lo) * 0.06;  // headroom above the highest point
  if (axis.min) lo = *axis.min;
  if (axis.max) hi = *axis.max;
  if (!(hi > lo)) hi = axis.log ? lo * 10.0 : lo + 1.0;
}

// Draws text rotated 90 degrees counter-clockwise, centred on `center`.
void add_vertical_text(ImDrawList* dl, ImVec2 center, ImU32 col, const char* text) {
  const ImVec2 ts = ImGui::CalcTextSize(text);
  const int first = dl->VtxBuffer.Size;
  const ImVec4 clip = dl->_CmdHeader.ClipRect;  // the clip in force (the plot's box)
  dl->PushClipRect(ImVec2(-1e5f, -1e5f), ImVec2(1e5f, 1e5f),
                   false);  // glyphs are culled pre-rotation
  dl->AddText(ImVec2(center.x - ts.x * 0.5f, center.y - ts.y * 0.5f), col, text);
  for (int i = first; i < dl->VtxBuffer.Size; ++i) {
    ImVec2& p = dl->VtxBuffer[i].pos;
    const float dx = p.x - center.x, dy = p.y - center.y;
    p = ImVec2(center.x + dy, center.y - dx);
  }
  // The rotated glyphs are scissored by the clip in force, like everything else drawn: the
  // command holding them takes it back before the pop (which then continues that command).
  dl->CmdBuffer.back().ClipRect = clip;
  dl->PopClipRect();
}

void dashed_line(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float thickness) {
  const float len = std::hypot(b.x - a.x, b.y - a.y);
  if (len <= 0) return;
  const ImVec2 d((b.x - a.x) / len, (b.y - a.y) / len);
  for (float s = 0; s < len; s += 9.0f) {
    const float e = std::min(s + 5.0f, len);
    dl->AddLine(ImVec2(a.x + d.x * s, a.y + d.y * s), ImVec2(a.x + d.x * e, a.y + d.y * e), col,
                thickness);
  }
}

// Screen points of one series, reduced to min/max per pixel column when denser than the screen.
void project(const PlotSeries& s, const Scale& sx, const Scale& sy, std::vector<ImVec2>& out) {
  out.clear();
  const std::size_t n = std::min(s.x.size(), s.y.size());
  const float width = std::fabs(sx.p1 - sx.p0);
  const bool decimate = n > static_cast<std::size_t>(width * 2.0f);
  float col_x = -FLT_MAX, col_min = 0, col_max = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
    if ((sx.log && s.x[i] <= 0) || (sy.log && s.y[i] <= 0)) continue;
    const ImVec2 p(sx.to_screen(s.x[i]), sy.to_screen(s.y[i]));
    if (!decimate) {
      out.push_back(p);
      continue;
    }
    const float c = std::floor(p.x);
    if (c != col_x) {
      if (col_x != -FLT_MAX) {
        out.push_back(ImVec2(col_x, col_min));
        if (col_max != col_min) out.push_back(ImVec2(col_x, col_max));
      }
      col_x = c, col_min = col_max = p.y;
    } else {
      col_min = std::min(col_min, p.y), col_max = std::max(col_max, p.y);
    }
  }
  if (decimate && col_x != -FLT_MAX) out.push_back(ImVec2(col_x, col_min));
}

// Where everything goes, decided before anything is drawn.
struct Frame {
  ImDrawList* dl = nullptr;
  ImVec2 origin;
  float fh = 0;                                    // text line height
  float left = 0, right = 0, top = 0, bottom = 0;  // the plot area
  Scale sx, sy;
  std::vector<double> xt, yt;              // tick values
  std::vector<ImVec2> legend_pos;          // top-left of each legend entry
  std::vector<std::size_t> legend_series;  // [entry] the series it names
  bool legend_dropped = false;             // no room for the legend: hovering names series
  ImU32 text_col = 0, dim_col = 0;
};

ImU32 color_of(const PlotSeries& s, std::size_t i) {
  return s.color != 0 ? s.color : series_color(static_cast<int>(i));
}

// Layout: title and legend flow (wrapping) on top, y labels left, x labels and title below.
// False when the area is too small to draw a plot in.
bool layout(const PlotConfig& cfg, std::span<const PlotSeries> series, ImVec2 size, Frame& f) {
  double xlo, xhi, ylo, yhi;
  data_range(cfg.x, series, true, xlo, xhi);
  data_range(cfg.y, series, false, ylo, yhi);
  f.yt = cfg.y.log ? log_ticks(ylo, yhi, cfg.y.units)
                   : linear_ticks(ylo, yhi, std::max(2, static_cast<int>(size.y / (f.fh * 2.4f))));
  float label_w = 0;
  for (double t : f.yt)
    label_w = std::max(label_w, ImGui::CalcTextSize(format_tick(t, cfg.y.units).c_str()).x);
  f.left = f.origin.x + label_w + (cfg.y.label.empty() ? 8.0f : f.fh + 12.0f);
  f.right = f.origin.x + size.x - 10.0f;
  const float row_h = f.fh * 1.3f;
  float lx = f.left, ly = f.origin.y;
  if (!cfg.title.empty()) lx += ImGui::CalcTextSize(cfg.title.c_str()).x + f.fh * 1.2f;
  // The legend wraps into rows; when they would leave the data less than half the height (a
  // short panel, presenter fonts), it is dropped: hovering a point names its series.
  std::vector<ImVec2> legend;
  float legend_y = ly;
  if (cfg.legend) {
    float x = lx;
    for (std::size_t i = 0; i < series.size(); ++i) {
      const PlotSeries& s = series[i];
      if (!s.in_legend || s.label.empty()) continue;
      f.legend_series.push_back(i);
      const float w = f.fh * 0.95f + ImGui::CalcTextSize(s.label.c_str()).x;
      if (x + w > f.right && x > f.left) x = f.left, legend_y += row_h;
      legend.push_back(ImVec2(x, legend_y));
      x += w + f.fh;
    }
  }
  const float bottom = f.origin.y + size.y - (cfg.x.label.empty() ? f.fh * 1.4f : f.fh * 2.6f);
  if (!legend.empty() && (legend_y == ly || bottom - (legend_y + row_h) >= size.y * 0.5f))
    f.legend_pos = legend;
  else
    f.legend_dropped = !legend.empty();
  if (!f.legend_pos.empty()) ly = legend_y;
  const bool has_header = !cfg.title.empty() || !f.legend_pos.empty();
  f.top = has_header ? ly + row_h + f.fh * 0.2f : f.origin.y + f.fh * 0.5f;
  f.bottom = bottom;
  if (f.right - f.left < 20 || f.bottom - f.top < 20) return false;
  f.sx = Scale{xlo, xhi, f.left, f.right, cfg.x.log};
  f.sy = Scale{ylo, yhi, f.bottom, f.top, cfg.y.log};
  f.xt = cfg.x.log
             ? log_ticks(xlo, xhi, cfg.x.units)
             : linear_ticks(xlo, xhi,
                            std::max(2, static_cast<int>((f.right - f.left) / (f.fh * 5.5f))));
  return true;
}

// Background, grid, tick labels, axes, axis labels, title and legend.
void draw_frame(const PlotConfig& cfg, std::span<const PlotSeries> series, const Palette& pal,
                const Frame& f) {
  ImDrawList* dl = f.dl;
  dl->AddRectFilled(ImVec2(f.left, f.top), ImVec2(f.right, f.bottom),
                    mix_color(pal.panel_bg, IM_COL32_BLACK, 0.25f), 3.0f);
  for (double t : f.yt) {
    const float y = f.sy.to_screen(t);
    dl->AddLine(ImVec2(f.left, y), ImVec2(f.right, y), pal.grid);
    const std::string s = format_tick(t, cfg.y.units);
    const float w = ImGui::CalcTextSize(s.c_str()).x;
    dl->AddText(ImVec2(f.left - 6.0f - w, y - f.fh * 0.5f), f.dim_col, s.c_str());
  }
  float last_label_end = -FLT_MAX;
  for (double t : f.xt) {
    const float x = f.sx.to_screen(t);
    dl->AddLine(ImVec2(x, f.top), ImVec2(x, f.bottom), pal.grid);
    const std::string s = format_tick(t, cfg.x.units);
    const float w = ImGui::CalcTextSize(s.c_str()).x;
    if (x - w * 0.5f < last_label_end + 6.0f) continue;  // skip labels that would overlap
    dl->AddText(ImVec2(x - w * 0.5f, f.bottom + 4.0f), f.dim_col, s.c_str());
    last_label_end = x + w * 0.5f;
  }
  dl->AddLine(ImVec2(f.left, f.bottom), ImVec2(f.right, f.bottom), pal.axis);
  dl->AddLine(ImVec2(f.left, f.top), ImVec2(f.left, f.bottom), pal.axis);
  if (!cfg.x.label.empty()) {
    const float w = ImGui::CalcTextSize(cfg.x.label.c_str()).x;
    dl->AddText(ImVec2((f.left + f.right - w) * 0.5f, f.bottom + f.fh * 1.35f), f.dim_col,
                cfg.x.label.c_str());
  }
  if (!cfg.y.label.empty()) {
    // A short plot (presenter fonts, a 720p window) shows the short title; shortened with "..."
    // to the plot's height when even that does not fit.
    std::string label = cfg.y.label;
    const float room = f.bottom - f.top + f.fh;
    if (ImGui::CalcTextSize(label.c_str()).x > room && !cfg.y_short_label.empty())
      label = cfg.y_short_label;
    if (ImGui::CalcTextSize(label.c_str()).x > room) {
      probe_record(ProbeKind::kTextCut, std::string(cfg.id) + ": y axis title \"" + label + "\"",
                   ImVec2(f.left, f.top), ImVec2(f.right, f.bottom));
      while (label.size() > 1 && ImGui::CalcTextSize((label + "...").c_str()).x > room)
        label.pop_back();
      label += "...";
    }
    add_vertical_text(dl, ImVec2(f.origin.x + f.fh * 0.6f, (f.top + f.bottom) * 0.5f), f.dim_col,
                      label.c_str());
  }
  if (!cfg.title.empty()) dl->AddText(ImVec2(f.left, f.origin.y), f.text_col, cfg.title.c_str());
  for (std::size_t e = 0; e < f.legend_pos.size(); ++e) {
    const ImVec2 p = f.legend_pos[e];
    const std::size_t i = f.legend_series[e];
    const PlotSeries& s = series[i];
    const ImU32 col = color_of(s, i);
    if (!s.line && s.markers) {  // a marker-only series: its marker, as drawn
      const ImVec2 c(p.x + f.fh * 0.35f, p.y + f.fh * 0.6f);
      const float r = f.fh * 0.3f;
      dl->AddCircleFilled(c, r, col, 12);
      if (s.marker_outline != 0) dl->AddCircle(c, r + 1.5f, s.marker_outline, 12, 1.5f);
    } else {
      dl->AddRectFilled(ImVec2(p.x, p.y + f.fh * 0.25f),
                        ImVec2(p.x + f.fh * 0.7f, p.y + f.fh * 0.95f), col, 2.0f);
    }
    dl->AddText(ImVec2(p.x + f.fh * 0.95f, p.y), f.dim_col, s.label.c_str());
  }
}

// Lines, fills and markers of every series.
void draw_series(const PlotConfig& cfg, std::span<const PlotSeries> series, const Frame& f) {
  ImDrawList* dl = f.dl;
  std::vector<ImVec2> pts;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const ImU32 col = color_of(s, i);
    project(s, f.sx, f.sy, pts);
    if (s.fill && !cfg.y.log && pts.size() > 1) {
      const ImU32 fill = (col & ~IM_COL32_A_MASK) | (40u << IM_COL32_A_SHIFT);
      const float base = f.sy.to_screen(std::max(f.sy.lo, 0.0));
      const ImDrawListFlags saved = dl->Flags;
      dl->Flags &= ~ImDrawListFlags_AntiAliasedFill;  // no seams between adjacent quads
      for (std::size_t k = 1; k < pts.size(); ++k) {
        dl->AddQuadFilled(pts[k - 1], pts[k], ImVec2(pts[k].x, base), ImVec2(pts[k - 1].x, base),
                          fill);
      }
      dl->Flags = saved;
    }
    if (s.line && pts.size() > 1) {
      dl->AddPolyline(pts.data(), static_cast<int>(pts.size()), col, 0,
                      s.thickness * cfg.line_scale);
    }
    if (s.markers) {
      const float r = s.marker_radius * cfg.line_scale;
      for (const ImVec2& p : pts) {
        dl->AddCircleFilled(p, r, col, 12);
        if (s.marker_outline != 0) dl->AddCircle(p, r + 1.5f, s.marker_outline, 12, 1.5f);
      }
    }
  }
}

// Point labels, nudged down past labels already placed so they do not overprint.
void draw_point_labels(std::span<const PlotSeries> series, const Frame& f) {
  std::vector<ImVec4> placed;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::size_t n = std::min({s.x.size(), s.y.size(), s.point_labels.size()});
    for (std::size_t k = 0; k < n; ++k) {
      if (!std::isfinite(s.x[k]) || !std::isfinite(s.y[k])) continue;
      if ((f.sx.log && s.x[k] <= 0) || (f.sy.log && s.y[k] <= 0)) continue;
      const ImVec2 p(f.sx.to_screen(s.x[k]), f.sy.to_screen(s.y[k]));
      const ImVec2 ts = ImGui::CalcTextSize(s.point_labels[k].c_str());
      ImVec2 at(p.x + 5.0f, p.y - ts.y - 1.0f);
      if (at.x + ts.x > f.right) at.x = p.x - 5.0f - ts.x;
      for (int tries = 0; tries < 4; ++tries) {
        bool hit = false;
        for (const ImVec4& r : placed)
          hit = hit || (at.x < r.z && at.x + ts.x > r.x && at.y < r.w && at.y + ts.y > r.y);
        if (!hit) break;
        at.y += ts.y * 0.9f;
      }
      placed.push_back(ImVec4(at.x, at.y, at.x + ts.x, at.y + ts.y));
      f.dl->AddText(at, (color_of(s, i) & ~IM_COL32_A_MASK) | (220u << IM_COL32_A_SHIFT),
                    s.point_labels[k].c_str());
    }
  }
}

void draw_ref_lines(std::span<const PlotRefLine> refs, const Frame& f) {
  for (const PlotRefLine& r : refs) {
    const ImU32 col = r.color != 0 ? r.color : f.dim_col;
    if (r.vertical) {
      const float x = f.sx.to_screen(r.value);
      dashed_line(f.dl, ImVec2(x, f.top), ImVec2(x, f.bottom), col, 1.5f);
      f.dl->AddText(ImVec2(x + 4.0f, f.top + 2.0f), col, r.label.c_str());
    } else {
      const float y = f.sy.to_screen(r.value);
      dashed_line(f.dl, ImVec2(f.left, y), ImVec2(f.right, y), col, 1.5f);
      f.dl->AddText(ImVec2(f.left + 6.0f, r.label_below ? y + 2.0f : y - f.fh - 1.0f), col,
                    r.label.c_str());
    }
  }
}

// The mouse inside the plot area: data coordinates, click, and a read-out of the nearest point.
void hover(const PlotConfig& cfg, std::span<const PlotSeries> series, const Frame& f,
           PlotResult& result) {
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  if (mouse.x < f.left || mouse.x > f.right || mouse.y < f.top || mouse.y > f.bottom) return;
  result.hovered = true;
  result.mouse_x = f.sx.to_data(mouse.x);
  result.mouse_y = f.sy.to_data(mouse.y);
  result.clicked = ImGui::IsMouseClicked(ImGuiMouseButton_Left);
  // Nearest point across all series, in screen space.
  float best = f.fh * f.fh * 9.0f;
  int best_series = -1;
  std::size_t best_index = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::size_t n = std::min(s.x.size(), s.y.size());
    for (std::size_t k = 0; k < n; ++k) {
      if ((f.sx.log && s.x[k] <= 0) || (f.sy.log && s.y[k] <= 0)) continue;
      const float dx = f.sx.to_screen(s.x[k]) - mouse.x, dy = f.sy.to_screen(s.y[k]) - mouse.y;
      const float d = dx * dx + dy * dy * 0.25f;  // favour the column under the mouse
      if (d < best) best = d, best_series = static_cast<int>(i), best_index = k;
    }
  }
  f.dl->AddLine(ImVec2(mouse.x, f.top), ImVec2(mouse.x, f.bottom), IM_COL32(255, 255, 255, 40));
  if (best_series < 0) return;
  const PlotSeries& s = series[best_series];
  const ImVec2 p(f.sx.to_screen(s.x[best_index]), f.sy.to_screen(s.y[best_index]));
  f.dl->AddCircleFilled(p, 4.5f * cfg.line_scale, color_of(s, best_series), 16);
  f.dl->AddCircle(p, 6.0f * cfg.line_scale, IM_COL32_WHITE, 16, 1.5f);
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(s.label.c_str());
  ImGui::TextDisabled("%s", cfg.x.label.empty() ? "x" : cfg.x.label.c_str());
  ImGui::SameLine();
  ImGui::Text("%s", format_tick(s.x[best_index], cfg.x.units).c_str());
  ImGui::TextDisabled("%s", cfg.y.label.empty() ? "y" : cfg.y.label.c_str());
  ImGui::SameLine();
  ImGui::Text("%s", format_tick(s.y[best_index], cfg.y.units).c_str());
  ImGui::TextDisabled("right-click: export CSV");
  ImGui::EndTooltip();
}

// The right-click menu: the plotted data as CSV, written atomically next to the working directory.
void export_menu(const PlotConfig& cfg, std::span<const PlotSeries> series, PlotResult& result) {
  if (!ImGui::BeginPopupContextItem("##plot_menu")) return;
  std::size_t points = 0;
  for (const PlotSeries& s : series) points += std::min(s.x.size(), s.y.size());
  const std::string path = std::string("kvscope-") + cfg.id + ".csv";
  if (ImGui::MenuItem(("Export CSV to " + path).c_str(), nullptr, false, points > 0)) {
    try {
      const std::string csv = plot_csv(series, cfg.x.label, cfg.y.label);
      write_file_atomically(path, [&](std::ostream& out) { out << csv; });
      result.exported = "wrote " + std::to_string(points) + " points to " + path;
    } catch (const std::exception& e) {
      result.exported = std::string("CSV export failed: ") + e.what();
    }
  }
  ImGui::EndPopup();
}

}  // namespace

PlotResult plot(const PlotConfig& cfg, std::span<const PlotSeries> series,
                std::span<const PlotRefLine> refs) {
  PlotResult result;
  ImGui::PushID(cfg.id);
  const Palette& pal = palette(cfg.line_scale > 1.0f);
  Frame f;
  f.text_col = ImGui::GetColorU32(ImGuiCol_Text);
  f.dim_col = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  f.fh = ImGui::GetTextLineHeight();
  ImVec2 size = cfg.size;
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (size.x <= 0) size.x = std::max(avail.x + size.x, 120.0f);
  if (size.y <= 0) size.y = std::max(avail.y + size.y, 100.0f);
  f.origin = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("##plot", size);
  const bool item_hovered = ImGui::IsItemHovered();
  f.dl = ImGui::GetWindowDrawList();
  // Nothing the plot draws (axis titles and labels included) leaves its own box.
  f.dl->PushClipRect(f.origin, ImVec2(f.origin.x + size.x, f.origin.y + size.y), true);
  if (!layout(cfg, series, size, f)) {
    // Never a blank area: say why nothing is drawn.
    f.dl->AddText(ImVec2(f.origin.x, f.origin.y), f.dim_col, "plot: enlarge the panel");
    probe_record(ProbeKind::kNoRoom, cfg.id, f.origin,
                 ImVec2(f.origin.x + size.x, f.origin.y + size.y));
    f.dl->PopClipRect();
    ImGui::PopID();
    return result;
  }
  probe_record(ProbeKind::kPlot, cfg.id, f.origin, ImVec2(f.origin.x + size.x, f.origin.y + size.y),
               ImVec2(f.left, f.top), ImVec2(f.right, f.bottom));
  if (f.legend_dropped)
    probe_record(ProbeKind::kTextCut, std::string(cfg.id) + ": legend dropped", f.origin,
                 ImVec2(f.origin.x + size.x, f.origin.y + size.y));
  draw_frame(cfg, series, pal, f);
  f.dl->PushClipRect(ImVec2(f.left, f.top - 1), ImVec2(f.right + 1, f.bottom + 1), true);
  draw_series(cfg, series, f);
  draw_point_labels(series, f);
  draw_ref_lines(refs, f);
  if (std::isfinite(cfg.cursor_x)) {
    const float x = f.sx.to_screen(cfg.cursor_x);
    f.dl->AddLine(ImVec2(x, f.top), ImVec2(x, f.bottom), pal.accent, 1.5f * cfg.line_scale);
  }
  if (item_hovered) hover(cfg, series, f, result);
  f.dl->PopClipRect();
  f.dl->PopClipRect();
  export_menu(cfg, series, result);
  ImGui::PopID();
  return result;
}

}  // namespace kvscope::ui
