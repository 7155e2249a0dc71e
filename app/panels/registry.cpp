// The panel registry.
#include "app/panels/registry.h"

#include "app/panels/attach_panel.h"
#include "app/panels/attention_panel.h"
#include "app/panels/block_map_panel.h"
#include "app/panels/block_tables_panel.h"
#include "app/panels/compare_panel.h"
#include "app/panels/controls_panel.h"
#include "app/panels/disagg_panel.h"
#include "app/panels/fragmentation_panel.h"
#include "app/panels/kernel_panel.h"
#include "app/panels/memory_panel.h"
#include "app/panels/prefix_panel.h"
#include "app/panels/quality_panel.h"
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
  panels.push_back(std::make_unique<QualityPanel>());
  panels.push_back(std::make_unique<ComparePanel>());
  panels.push_back(std::make_unique<AttachPanel>());
  panels.push_back(std::make_unique<KernelPanel>());
  panels.push_back(std::make_unique<DisaggPanel>());
  return panels;
}

}  // namespace kvscope::ui
