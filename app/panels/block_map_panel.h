// Block pool map: every physical KV block as a cell, coloured by owner sequence, shared, cached
// free or free, with its fill level; culled to the visible rows and aggregated below one pixel.
#pragma once

#include <cstdint>
#include <vector>

#include "app/panels/panel.h"

namespace kvscope::ui {

class BlockMapPanel final : public Panel {
 public:
  const char* title() const override { return "Block pool"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/concepts/paged-attention.md"; }
  void draw(AppState& state) override;

  // For tests and the benchmark: the last frame's layout.
  int blocks_per_cell() const { return blocks_per_cell_; }
  int cells_drawn() const { return cells_drawn_; }

 private:
  struct Layout {
    float cell = 8.0f;  // cell pitch in pixels
    int per_cell = 1;   // blocks aggregated into one cell
    int cols = 1, rows = 1;
  };
  Layout fit_layout(int num_blocks, float width, float height) const;
  void draw_legend(const AppState& state);
  void draw_map(AppState& state);
  // One cell of one block with a gap around it: fill level, labels, the selection outline.
  void draw_block_cell(const AppState& state, ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col,
                       int block, bool fill, bool labels, bool outline) const;
  // The mouse over the map: highlight, tooltip, click to select the block's request.
  void hover_map(AppState& state, const Layout& l, ImVec2 origin, int num_blocks);
  void refresh_marks(const AppState& state);
  ImU32 block_color(const BlockState& b, bool presenter);
  ImU32 cell_color(const std::vector<BlockState>& blocks, int first, int count, bool presenter);
  void tooltip(const AppState& state, int first, int count) const;

  bool fit_ = true;        // fit the whole pool in the panel (else fixed cell size + scroll)
  float cell_px_ = 10.0f;  // cell pitch when not fitting
  bool show_fill_ = true;  // draw each block's fill level
  int blocks_per_cell_ = 1;
  int cells_drawn_ = 0;
  std::vector<ImU32> owner_colors_;   // sequence colour cache, by request id
  std::vector<int> group_kinds_;      // a hybrid run's layer groups' kinds, by group (else empty)
  std::vector<std::uint8_t> marked_;  // [num_blocks] 1 = in the selected request's table
  int marked_step_ = -1;
  int marked_request_ = -2;
};

}  // namespace kvscope::ui
