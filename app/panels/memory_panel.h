// Memory vs context: KV bytes against context length for published model shapes and the loaded
// run, per KV format, on log axes with GPU memory lines to read off the longest context.
#pragma once

#include <string>
#include <vector>

#include "app/core/memory_shapes.h"
#include "app/panels/panel.h"

namespace kvscope::ui {

class MemoryPanel final : public Panel {
 public:
  MemoryPanel();
  const char* title() const override { return "Memory vs context"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui.md#memory-vs-context"; }
  void draw(AppState& state) override;

 private:
  void draw_table(const AppState& state, double bytes_per_element);
  std::vector<KvShape> shapes_;
  int format_ = 0;  // index into kv_format_bytes(), or the count for "all"
  bool show_loaded_ = true;
  std::string export_message_;
};

}  // namespace kvscope::ui
