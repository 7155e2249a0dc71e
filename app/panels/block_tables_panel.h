// Block tables: one row per sequence mapping its logical blocks to physical block ids, with
// shared blocks highlighted and the partially filled last block visible.
#pragma once

#include <vector>

#include "app/panels/panel.h"

namespace kvscope::ui {

class BlockTablesPanel final : public Panel {
 public:
  const char* title() const override { return "Block tables"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui/pool.md#block-tables"; }
  void draw(AppState& state) override;

 private:
  void draw_row(AppState& state, const RequestState& r);
  bool show_finished_ = false;
  bool show_waiting_ = true;
  std::vector<int> rows_;  // indices into pool.requests shown this frame
};

}  // namespace kvscope::ui
