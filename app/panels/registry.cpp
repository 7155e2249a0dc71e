// The panel registry.
#include "app/panels/registry.h"

#include "app/panels/attention_panel.h"
#include "app/panels/block_map_panel.h"
#include "app/panels/block_tables_panel.h"
#include "app/panels/controls_panel.h"
#include "app/panels/fragmentation_panel.h"
#include "app/panels/memory_panel.h"
#include "app/panels/prefix_panel.h"
#include "app/panels/text_panel.h"

namespace kvscope::ui {

std::vector<std::unique_ptr<Panel>> make_panels() {
  std::vector<std::unique_ptr<Panel>> panels;
  panels.push_back(std::make_unique<BlockMapPanel>());
  panels.push_back(std::make_unique<BlockTablesPanel>());
  panels.push_back(std::make_unique<FragmentationPanel>());
  panels.push_back(std::make_unique<MemoryPanel>());
  panels.push_back(std::make_unique<TextPanel>());
  panels.push_back(std::make_unique<PrefixPanel>());
  panels.push_back(std::make_unique<ControlsPanel>());
  panels.push_back(std::make_unique<AttentionPanel>());
  // Extension points: construct the planned panels here once they exist.
  return panels;
}

std::span<const PlannedPanel> planned_panels() {
  static constexpr PlannedPanel kPlanned[] = {
      {"Prefix cache tree", "docs/concepts/prefix-caching.md",
       "the radix tree of cached prefixes, ref counts and LRU eviction"},
      {"Attention heatmap", "docs/concepts/token-eviction.md",
       "attention weights per head, sinks and heavy hitters"},
      {"Quality vs memory", "docs/concepts/kv-quantization.md",
       "perplexity / agreement against KV bytes per format and policy"},
      {"Compare", "docs/concepts/recordings.md", "two recordings side by side, step-aligned"},
  };
  return kPlanned;
}

}  // namespace kvscope::ui
