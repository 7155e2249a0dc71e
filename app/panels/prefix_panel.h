// Prefix cache panel: the cached blocks as a tree (each block's parent holds the preceding prefix)
// with hit counts and cached-free vs in-use colouring, and every request's latest lookup: hit
// tokens and why the rest missed, all at the selected step.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "app/core/prefix_tree.h"
#include "app/panels/panel.h"

namespace kvscope::ui {

struct Palette;

class PrefixPanel final : public Panel {
 public:
  const char* title() const override { return "Prefix cache"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/concepts/prefix-caching.md"; }
  void draw(AppState& state) override;

  const PrefixTreeFold& fold() const { return fold_; }  // tests

 private:
  void catch_up(const AppState& state);
  void layout_tree();
  // Stats above the tree: blocks cached, in use, cached-free and evicted; prompt tokens the cache
  // gave (hits, tier reloads); each tier's blocks held and reloaded.
  void draw_block_stats(const AppState& state) const;
  void draw_hit_stats(const AppState& state, bool engine_stream) const;
  void draw_tier_stats() const;
  void draw_legend(const Palette& pal) const;
  void draw_tree(AppState& state, ImVec2 size);
  void draw_lookups(AppState& state, ImVec2 size);
  // One row of cells per KV tier: every block it holds, most recently written first.
  void draw_tier_strips(const AppState& state);
  void node_tooltip(const AppState& state, const PrefixNode& n) const;
  std::string block_text(const AppState& state, const PrefixNode& n) const;

  PrefixTreeFold fold_;
  int generation_ = -1;
  int built_until_ = -1;
  std::map<std::int32_t, std::vector<int>> generated_;  // request -> [position] sampled token
  // One drawn node: a run of cached blocks where each has exactly one child (a radix-tree edge),
  // so a long shared prefix is one node instead of a row of boxes.
  struct Placed {
    std::vector<std::int32_t> chain;  // blocks, root side first
    int depth;                        // column
    float row;                        // leaves get whole rows; parents sit at their children's mean
  };
  // Where the tree's nodes go: sizes in pixels and the first node's top left on screen.
  struct TreeGeometry {
    float fs, node_w, node_h, gap_x, gap_y;
    ImVec2 origin;
    ImVec2 top_left(const Placed& p) const {
      return ImVec2(origin.x + p.depth * (node_w + gap_x), origin.y + p.row * (node_h + gap_y));
    }
  };
  // The blocks outlined on the tree: the selected request's, and those an attach's lookup matched
  // (sorted).
  struct TreeMarks {
    std::vector<std::int32_t> selected, lookup;
  };
  static TreeMarks tree_marks(const AppState& state);
  // One node: a stripe per block coloured by its status, outlines, label and hits; selects the
  // owner of a clicked block. Returns the block under the mouse, if any.
  const PrefixNode* draw_tree_node(AppState& state, const TreeGeometry& g, const TreeMarks& marks,
                                   const Placed& p) const;
  std::vector<Placed> placed_;  // this step's layout, depth-first
  int rows_ = 0;
  int max_depth_ = 0;
};

}  // namespace kvscope::ui
