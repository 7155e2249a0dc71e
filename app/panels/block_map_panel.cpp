// Block pool map drawing: layout, culling with a list clipper, run merging and aggregation.
#include "app/panels/block_map_panel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "app/core/attach_feed.h"
#include "app/core/theme.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

std::string BlockMapPanel::help() const {
  return "Paged attention stores each sequence's keys and values in fixed-size blocks that can "
         "live anywhere in the pool; a block table maps logical to physical blocks. Each cell is "
         "one physical block: colour shows its owner (gold: shared by several sequences, teal: "
         "free but still caching a prefix), the bright part how many of its slots hold tokens.";
}

BlockMapPanel::Layout BlockMapPanel::fit_layout(int num_blocks, float width, float height) const {
  Layout l;
  width = std::max(width, 1.0f);
  height = std::max(height, 1.0f);
  if (!fit_) {
    l.cell = cell_px_;
    l.cols = std::max(1, static_cast<int>(width / l.cell));
    l.rows = (num_blocks + l.cols - 1) / l.cols;
    return l;
  }
  // The column count that gives the largest cells with every block visible; below one pixel per
  // block, cells aggregate several blocks instead.
  float best = 0.0f;
  int best_cols = 1;
  const int max_cols = std::max(1, std::min(num_blocks, static_cast<int>(width)));
  for (int cols = 1; cols <= max_cols; ++cols) {
    const int rows = (num_blocks + cols - 1) / cols;
    const float pitch = std::min(width / cols, height / rows);
    if (pitch > best) best = pitch, best_cols = cols;
  }
  l.cell = std::clamp(best, 1.0f, 120.0f);
  l.cols = best >= 1.0f ? best_cols : std::max(1, static_cast<int>(width));
  if (best < 1.0f) {  // aggregate: as many blocks per one-pixel cell as needed to fit
    const int max_rows = std::max(1, static_cast<int>(height));
    l.per_cell = std::max(1, (num_blocks + l.cols * max_rows - 1) / (l.cols * max_rows));
  }
  const int cells = (num_blocks + l.per_cell - 1) / l.per_cell;
  l.rows = (cells + l.cols - 1) / l.cols;
  return l;
}

namespace {

// A hybrid run's layer groups by kind (engine/kv/layer_groups.h): full attention, sliding
// window, state.
ImU32 group_kind_color(int kind) {
  switch (kind) {
    case 1:
      return IM_COL32(72, 172, 112, 255);
    case 2:
      return IM_COL32(168, 110, 204, 255);
    default:
      return IM_COL32(78, 138, 220, 255);
  }
}

std::string group_text(const PoolState& pool, int g) {
  const LayerGroupSeen k =
      static_cast<std::size_t>(g) < pool.groups.size() ? pool.groups[g] : LayerGroupSeen{};
  std::string s = "group " + std::to_string(g) + ": ";
  if (k.kind == 1) return s + "sliding window of " + std::to_string(k.window) + " tokens";
  if (k.kind == 2) return s + "state (one block per sequence)";
  return s + "full attention";
}

}  // namespace

ImU32 BlockMapPanel::block_color(const BlockState& b, bool presenter) {
  const Palette& p = palette(presenter);
  switch (b.status) {
    case BlockStatus::kFree:
      return p.block_free;
    case BlockStatus::kCachedFree:
      return p.block_cached;
    case BlockStatus::kShared:
      return p.block_shared;
    case BlockStatus::kPinned:
      return p.block_pinned;
    case BlockStatus::kOwned:
      break;
  }
  if (b.owner < 0) return p.block_free;
  if (!group_kinds_.empty()) {  // a hybrid run: owned blocks by their group's kind
    const auto g = static_cast<std::size_t>(std::max<int>(0, b.group));
    return group_kind_color(g < group_kinds_.size() ? group_kinds_[g] : 0);
  }
  if (static_cast<std::size_t>(b.owner) >= owner_colors_.size()) {
    const std::size_t old = owner_colors_.size();
    owner_colors_.resize(static_cast<std::size_t>(b.owner) + 256);
    for (std::size_t i = old; i < owner_colors_.size(); ++i) {
      owner_colors_[i] = sequence_color(static_cast<int>(i));
    }
  }
  return owner_colors_[b.owner];
}

ImU32 BlockMapPanel::cell_color(const std::vector<BlockState>& blocks, int first, int count,
                                bool presenter) {
  if (count == 1) return block_color(blocks[first], presenter);
  // Aggregated cell: the most common status wins; owned cells take their first owner's colour.
  std::array<int, kNumBlockStatuses> counts{};
  int first_owned = -1;
  for (int i = first; i < first + count; ++i) {
    const int s = static_cast<int>(blocks[i].status);
    ++counts[s];
    if (first_owned < 0 && blocks[i].status == BlockStatus::kOwned) first_owned = i;
  }
  const int best =
      static_cast<int>(std::max_element(counts.begin(), counts.end()) - counts.begin());
  if (best == static_cast<int>(BlockStatus::kOwned))
    return block_color(blocks[first_owned], presenter);
  BlockState probe;
  probe.status = static_cast<BlockStatus>(best);
  return block_color(probe, presenter);
}

void BlockMapPanel::refresh_marks(const AppState& state) {
  const int sel = state.selected_request.value_or(-1);
  if (marked_step_ == state.step() && marked_request_ == sel &&
      marked_.size() == state.pool().blocks.size()) {
    return;
  }
  marked_step_ = state.step();
  marked_request_ = sel;
  marked_.assign(state.pool().blocks.size(), 0);
  if (const RequestState* r = find_request(state.pool(), sel)) {
    for (int b : r->blocks) {
      if (b >= 0 && static_cast<std::size_t>(b) < marked_.size()) marked_[b] = 1;
    }
    // A hybrid run's later layer groups' blocks are not in the request's (first group's) table.
    const auto& blocks = state.pool().blocks;
    if (!state.pool().groups.empty())
      for (std::size_t b = 0; b < blocks.size(); ++b)
        if (blocks[b].owner == sel && blocks[b].group > 0) marked_[b] = 1;
  }
}

void BlockMapPanel::draw_legend(const AppState& state) {
  const Palette& p = palette(state.presenter);
  const StepMetrics& m = state.metrics();
  const auto item = [&](ImU32 c, const char* label) {
    flow_same_line(swatch_label_width(label));  // wraps in a narrow window
    swatch(c);
    ImGui::SameLine(0, 4);
    ImGui::TextUnformatted(label);
  };
  // A hybrid run colours owned blocks by their layer group's kind; others by sequence.
  group_kinds_.clear();
  for (const LayerGroupSeen& g : state.pool().groups) group_kinds_.push_back(g.kind);
  if (!group_kinds_.empty()) {
    bool seen[3] = {false, false, false};
    bool first = true;
    for (std::size_t g = 0; g < state.pool().groups.size(); ++g) {
      const int kind = group_kinds_[g];
      if (seen[kind]) continue;
      seen[kind] = true;
      const LayerGroupSeen& k = state.pool().groups[g];
      const std::string label = kind == 1   ? "sliding window " + std::to_string(k.window)
                                : kind == 2 ? std::string("state")
                                            : std::string("full attention");
      if (!first) flow_same_line(swatch_label_width(label.c_str()));
      first = false;
      swatch(group_kind_color(kind));
      ImGui::SameLine(0, 4);
      ImGui::TextUnformatted(label.c_str());
      item_tooltip(
          "A hybrid model's layer groups share this pool (docs/concepts/hybrid-models.md): each "
          "block is one page in each layer of one group; a sliding-window group's blocks go back "
          "once its window has passed them, a state group holds one block per sequence");
    }
  } else {
    // "Owned" shows three sequence colours side by side.
    for (int i = 0; i < 3; ++i) {
      swatch(sequence_color(i * 5 + 1));
      ImGui::SameLine(0, 1);
    }
    ImGui::SameLine(0, 4);
    ImGui::TextUnformatted("owned (per sequence)");
  }
  item(p.block_shared, "shared");
  item(p.block_pinned, "pinned");
  item(p.block_cached, "cached free");
  item(p.block_free, "free");
  bool host = false, disk = false;  // blocks whose K/V a KV tier gave back (a bar at the bottom)
  for (const BlockState& b : state.pool().blocks) {
    host = host || b.reloaded_from == 0;
    disk = disk || b.reloaded_from == 1;
  }
  if (host) item(p.tier_host, "reloaded from host");
  if (disk) item(p.tier_disk, "reloaded from disk");
  stat("used", format_count(m.blocks_used) + " / " + format_count(m.blocks_total) + " blocks");
  const bool engine_stream = state.source().attach_feed() != nullptr;
  if (!engine_stream) stat("slots filled", format_percent(m.utilization()), true);
  stat("cached", format_count(m.blocks_cached_free), true);
  if (const std::shared_ptr<AttachFeed> feed = state.source().attach_feed()) {
    // A live view's pool is kvscope's slots; the engine's block size comes with its first store.
    const std::int64_t engine_block = feed->snapshot()->block_size;
    stat("block", engine_block > 0 ? std::to_string(engine_block) + " tokens" : "not known yet",
         true);
    return;
  }
  stat("block", std::to_string(state.pool().block_size) + " tokens", true);
}

void BlockMapPanel::draw(AppState& state) {
  draw_legend(state);
  // fit / fill (and the cell size when not fitting), right-aligned on the stats line when they
  // fit there, else on a line of their own.
  const float spacing = ImGui::GetStyle().ItemSpacing.x;
  const float slider_w = ImGui::GetFontSize() * 6.0f;
  const float ctrl_w =
      check_width("fit") + spacing + check_width("fill") + (fit_ ? 0.0f : spacing + slider_w);
  if (flow_same_line(ctrl_w, spacing)) {
    const float right = ImGui::GetContentRegionMax().x;
    ImGui::SetCursorPosX(std::max(ImGui::GetCursorPosX(), right - ctrl_w));
  }
  ImGui::Checkbox("fit", &fit_);
  ImGui::SameLine();
  ImGui::Checkbox("fill", &show_fill_);
  if (!fit_) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(slider_w);
    ImGui::SliderFloat("##cell", &cell_px_, 2.0f, 32.0f, "%.0f px");
  }
  draw_map(state);
}

void BlockMapPanel::draw_map(AppState& state) {
  const std::vector<BlockState>& blocks = state.pool().blocks;
  const int n = static_cast<int>(blocks.size());
  ImGui::BeginChild("##map", ImVec2(0, 0), false,
                    fit_ ? ImGuiWindowFlags_NoScrollbar : ImGuiWindowFlags_None);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const Layout l = fit_layout(n, avail.x, avail.y);
  blocks_per_cell_ = l.per_cell;
  cells_drawn_ = 0;
  refresh_marks(state);
  const bool selecting = state.selected_request.has_value();
  const bool presenter = state.presenter;
  const ImU32 bg = palette(presenter).panel_bg;
  const float gap = l.cell >= 40.0f ? 3.0f : (l.cell >= 5.0f ? 1.0f : 0.0f);
  const bool labels = l.per_cell == 1 && l.cell >= 44.0f;  // big cells: block id and owner
  const bool fill = show_fill_ && l.per_cell == 1 && l.cell >= 6.0f;
  const int cells = (n + l.per_cell - 1) / l.per_cell;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();

  ImGuiListClipper clipper;
  clipper.Begin(l.rows, l.cell);
  while (clipper.Step()) {
    for (int row = clipper.DisplayStart; row < clipper.DisplayEnd; ++row) {
      const float y0 = std::floor(origin.y + row * l.cell);
      const float y1 = std::floor(origin.y + (row + 1) * l.cell) - gap;
      // Adjacent cells of one colour merge into one rectangle when there is no gap to draw.
      float run_x0 = 0.0f;
      ImU32 run_col = 0;
      int run_len = 0;
      for (int c = 0; c < l.cols; ++c) {
        const int cell = row * l.cols + c;
        if (cell >= cells) break;
        const int first = cell * l.per_cell;
        const int count = std::min(l.per_cell, n - first);
        ImU32 col = cell_color(blocks, first, count, presenter);
        const bool dim = selecting && (count > 1 || !marked_[first]);
        if (dim) col = mix_color(col, bg, 0.72f);
        const float x0 = std::floor(origin.x + c * l.cell);
        ++cells_drawn_;
        if (gap > 0.0f) {
          draw_block_cell(state, dl, ImVec2(x0, y0),
                          ImVec2(std::floor(origin.x + (c + 1) * l.cell) - gap, y1), col, first,
                          fill, labels, selecting && !dim && l.cell >= 4.0f);
          continue;
        }
        if (run_len > 0 && col == run_col) {
          ++run_len;
          continue;
        }
        if (run_len > 0) dl->AddRectFilled(ImVec2(run_x0, y0), ImVec2(x0, y1), run_col);
        run_x0 = x0, run_col = col, run_len = 1;
      }
      if (run_len > 0) {
        const int end_col = static_cast<int>((run_x0 - origin.x) / l.cell + 0.5f) + run_len;
        dl->AddRectFilled(ImVec2(run_x0, y0), ImVec2(std::floor(origin.x + end_col * l.cell), y1),
                          run_col);
      }
    }
  }
  clipper.End();
  // The blocks the Kernel panel's hovered thread block reads: outlined in the accent colour.
  const bool kernel_fresh = state.kernel_blocks_frame >= ImGui::GetFrameCount() - 1;
  for (int id : kernel_fresh ? state.kernel_blocks : std::vector<int>{}) {
    if (id < 0 || id >= n) continue;
    const int cell = id / l.per_cell, row = cell / l.cols, c = cell % l.cols;
    const ImVec2 a(std::floor(origin.x + c * l.cell), std::floor(origin.y + row * l.cell));
    dl->AddRect(ImVec2(a.x - 1.0f, a.y - 1.0f), ImVec2(a.x + l.cell, a.y + l.cell),
                palette(presenter).accent, 0.0f, 0, 2.5f);
  }
  ImGui::SetCursorScreenPos(origin);
  ImGui::InvisibleButton("##cells",
                         ImVec2(std::max(1.0f, l.cols * l.cell), std::max(1.0f, l.rows * l.cell)));
  if (ImGui::IsItemHovered()) hover_map(state, l, origin, n);
  ImGui::EndChild();
}

void BlockMapPanel::draw_block_cell(const AppState& state, ImDrawList* dl, ImVec2 a, ImVec2 b,
                                    ImU32 col, int block, bool fill, bool labels,
                                    bool outline) const {
  const Palette& pal = palette(state.presenter);
  const BlockState& bs = state.pool().blocks[static_cast<std::size_t>(block)];
  const int block_size = std::max(1, state.pool().block_size);
  if (fill && bs.ref_count > 0 && bs.filled < block_size) {
    // Empty slots drawn faint, filled slots bright, filling bottom-up.
    dl->AddRectFilled(a, b, mix_color(col, pal.panel_bg, 0.70f));
    const float h = (b.y - a.y) * static_cast<float>(bs.filled) / block_size;
    dl->AddRectFilled(ImVec2(a.x, b.y - h), b, col);
  } else {
    dl->AddRectFilled(a, b, col);
  }
  if (bs.reloaded_from >= 0 && b.y - a.y >= 6.0f) {  // its bytes came back from a KV tier
    const float h = std::max(2.0f, (b.y - a.y) * 0.18f);
    dl->AddRectFilled(ImVec2(a.x, b.y - h), b, tier_color(pal, bs.reloaded_from));
  }
  if (labels) {
    const ImU32 ink = bs.ref_count > 0 ? IM_COL32(16, 18, 24, 235) : pal.text_dim;
    char text[32];
    std::snprintf(text, sizeof text, "#%d", block);
    dl->AddText(ImVec2(a.x + 4.0f, a.y + 2.0f), ink, text);
    if (bs.owner >= 0) {
      std::snprintf(text, sizeof text, "s%d [%d]", bs.owner, bs.logical);
      dl->AddText(ImVec2(a.x + 4.0f, a.y + 2.0f + ImGui::GetFontSize()), ink, text);
    }
  }
  if (outline) dl->AddRect(a, b, pal.outline_selected);
}

void BlockMapPanel::hover_map(AppState& state, const Layout& l, ImVec2 origin, int num_blocks) {
  const ImVec2 m = ImGui::GetIO().MousePos;
  const int c = static_cast<int>((m.x - origin.x) / l.cell);
  const int r = static_cast<int>((m.y - origin.y) / l.cell);
  const int cell = r * l.cols + c;
  const int cells = (num_blocks + l.per_cell - 1) / l.per_cell;
  if (c < 0 || c >= l.cols || cell < 0 || cell >= cells) return;
  const int first = cell * l.per_cell;
  const int count = std::min(l.per_cell, num_blocks - first);
  const ImVec2 a(origin.x + c * l.cell, origin.y + r * l.cell);
  ImGui::GetWindowDrawList()->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(a.x + l.cell, a.y + l.cell),
                                      IM_COL32_WHITE, 0, 0, 2.0f);
  tooltip(state, first, count);
  if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
    const int owner = count == 1 ? state.pool().blocks[static_cast<std::size_t>(first)].owner : -1;
    if (owner < 0 || state.selected_request == owner)
      state.selected_request.reset();
    else
      state.selected_request = owner;
  }
}

void BlockMapPanel::tooltip(const AppState& state, int first, int count) const {
  const std::vector<BlockState>& blocks = state.pool().blocks;
  ImGui::BeginTooltip();
  if (count > 1) {
    int used = 0, shared = 0, cached = 0;
    for (int i = first; i < first + count; ++i) {
      used += blocks[i].ref_count > 0;
      shared += blocks[i].status == BlockStatus::kShared;
      cached += blocks[i].status == BlockStatus::kCachedFree;
    }
    ImGui::Text("blocks %d - %d (%d per cell at this size)", first, first + count - 1, count);
    ImGui::TextDisabled("used %d, shared %d, cached free %d, free %d", used, shared, cached,
                        count - used - cached);
    ImGui::EndTooltip();
    return;
  }
  const BlockState& b = blocks[first];
  if (state.source().attach_feed()) {
    // A live engine's block: slots are kvscope's numbering, there are no owners or fill levels.
    ImGui::Text("slot %d", first);
    ImGui::SameLine();
    ImGui::TextDisabled(
        "%s", b.status == BlockStatus::kFree ? "free (no engine block)" : "cached by the engine");
    if (b.status != BlockStatus::kFree) ImGui::Text("block %d of its prefix chain", b.logical + 1);
    ImGui::EndTooltip();
    return;
  }
  static const char* const kStatus[] = {"free", "owned", "shared", "cached free", "pinned"};
  ImGui::Text("block %d", first);
  ImGui::SameLine();
  ImGui::TextDisabled("%s", kStatus[static_cast<int>(b.status)]);
  if (b.owner >= 0) {
    swatch(sequence_color(b.owner));
    ImGui::SameLine();
    if (b.logical >= 0)
      ImGui::Text("owner seq %d, logical block %d", b.owner, b.logical);
    else
      ImGui::Text("owner seq %d", b.owner);
  }
  if (!state.pool().groups.empty() && b.owner >= 0)
    ImGui::TextUnformatted(group_text(state.pool(), b.group).c_str());
  ImGui::Text("ref count %d, %d / %d slots filled", b.ref_count, b.filled, state.pool().block_size);
  if (b.reloaded_from >= 0) {
    ImGui::TextColored(
        ImGui::ColorConvertU32ToFloat4(tier_color(palette(state.presenter), b.reloaded_from)),
        "K/V reloaded from the %s tier, not recomputed", b.reloaded_from == 1 ? "disk" : "host");
  }
  if (b.owner >= 0) ImGui::TextDisabled("click: highlight this sequence");
  ImGui::EndTooltip();
}

}  // namespace kvscope::ui
