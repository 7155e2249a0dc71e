// Block tables panel: a clipped table of sequences and their logical -> physical block maps.
#include "app/panels/block_tables_panel.h"

#include <algorithm>
#include <cstdio>

#include "app/core/theme.h"
#include "app/widgets/layout_probe.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

std::string BlockTablesPanel::help() const {
  return "A block table is a sequence's page table: entry i holds the physical block that stores "
         "its tokens i*B to i*B+B-1, so a sequence grows one block at a time without moving. "
         "Gold entries are shared with other sequences (prefix sharing, ref count > 1); only the "
         "last block can be partially filled.";
}

void BlockTablesPanel::draw(AppState& state) {
  const PoolState& pool = state.pool();
  rows_.clear();
  int running = 0;
  for (std::size_t index = 0; index < pool.requests.size(); ++index) {
    const RequestState& r = pool.requests[index];
    const bool has_blocks = !r.blocks.empty();
    running += r.phase == RequestPhase::kRunning;
    if (r.phase == RequestPhase::kFinished || r.phase == RequestPhase::kRejected) {
      if (!show_finished_) continue;
    } else if (r.phase == RequestPhase::kWaiting && !has_blocks && !show_waiting_) {
      continue;
    }
    rows_.push_back(static_cast<int>(index));
  }
  stat("sequences",
       std::to_string(running) + " running, " + std::to_string(rows_.size()) + " shown");
  flow_same_line(check_width("waiting"), 16.0f);
  ImGui::Checkbox("waiting", &show_waiting_);
  flow_same_line(check_width("finished"), ImGui::GetStyle().ItemSpacing.x);
  ImGui::Checkbox("finished", &show_finished_);

  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
  if (!ImGui::BeginTable("##tables", 5, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("seq");
  ImGui::TableSetupColumn("phase");
  ImGui::TableSetupColumn("tokens");
  ImGui::TableSetupColumn("blocks");
  // Logical block i is the i-th box; each box holds its physical block id.
  ImGui::TableSetupColumn("block table", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(rows_.size()));
  while (clipper.Step()) {
    for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
      draw_row(state, pool.requests[rows_[i]]);
    }
  }
  clipper.End();
  ImGui::EndTable();
  probe_record(ProbeKind::kTable, "##tables", ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
}

void BlockTablesPanel::draw_row(AppState& state, const RequestState& r) {
  const PoolState& pool = state.pool();
  const Palette& pal = palette(state.presenter);
  const bool selected = state.selected_request == r.id;
  ImGui::TableNextRow();
  // The Kernel panel's hovered thread block reads this request's table: its row lights up.
  if (state.kernel_request == r.id && state.kernel_blocks_frame >= ImGui::GetFrameCount() - 1)
    ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, mix_color(pal.panel_bg, pal.accent, 0.35f));
  ImGui::TableNextColumn();
  ImGui::PushID(r.id);
  swatch(sequence_color(r.id));
  ImGui::SameLine(0, 4);
  char label[24];
  std::snprintf(label, sizeof label, "%d", r.id);
  if (ImGui::Selectable(label, selected, ImGuiSelectableFlags_SpanAllColumns)) {
    if (selected)
      state.selected_request.reset();
    else
      state.selected_request = r.id;
  }
  ImGui::TableNextColumn();
  ImGui::TextDisabled("%s", request_phase_name(r.phase));
  ImGui::TableNextColumn();
  ImGui::Text("%d", r.num_tokens);
  ImGui::TableNextColumn();
  ImGui::Text("%d", static_cast<int>(r.blocks.size()));
  ImGui::TableNextColumn();

  // The table entries as small boxes holding the physical id; as many as fit, then "+N".
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 start = ImGui::GetCursorScreenPos();
  const float h = ImGui::GetTextLineHeight();
  const float box_w = ImGui::CalcTextSize("00000").x + 6.0f;
  const float avail = ImGui::GetContentRegionAvail().x;
  const int fit =
      std::max(0, static_cast<int>((avail - ImGui::CalcTextSize("+0000").x) / (box_w + 2.0f)));
  const int n = static_cast<int>(r.blocks.size());
  const int shown = std::min(n, n > fit ? fit : n);
  const ImU32 own = sequence_color(r.id);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (int i = 0; i < shown; ++i) {
    const int b = r.blocks[i];
    const bool valid = b >= 0 && static_cast<std::size_t>(b) < pool.blocks.size();
    const BlockState bs = valid ? pool.blocks[b] : BlockState{};
    const bool shared = bs.ref_count > 1;
    const ImVec2 a(start.x + i * (box_w + 2.0f), start.y);
    const ImVec2 z(a.x + box_w, a.y + h);
    const ImU32 base = shared ? pal.block_shared : own;
    dl->AddRectFilled(a, z, mix_color(base, pal.panel_bg, 0.78f), 3.0f);
    if (bs.filled < pool.block_size && pool.block_size > 0) {  // partial block: fill bar
      const float w = box_w * static_cast<float>(bs.filled) / pool.block_size;
      dl->AddRectFilled(ImVec2(a.x, z.y - 3.0f), ImVec2(a.x + w, z.y), base, 1.0f);
    }
    dl->AddRect(a, z, mix_color(base, pal.panel_bg, shared ? 0.0f : 0.45f), 3.0f, 0,
                shared ? 1.5f : 1.0f);
    char text[16];
    std::snprintf(text, sizeof text, "%d", b);
    const float tw = ImGui::CalcTextSize(text).x;
    dl->AddText(ImVec2(a.x + (box_w - tw) * 0.5f, a.y), shared ? pal.block_shared : pal.text, text);
    if (mouse.x >= a.x && mouse.x < z.x && mouse.y >= a.y && mouse.y < z.y &&
        ImGui::IsWindowHovered()) {
      ImGui::BeginTooltip();
      ImGui::Text("seq %d: logical %d -> physical %d", r.id, i, b);
      ImGui::TextDisabled("ref count %d%s, %d / %d slots filled", bs.ref_count,
                          shared ? " (shared)" : "", bs.filled, pool.block_size);
      ImGui::EndTooltip();
    }
  }
  if (n > shown) {
    ImGui::SetCursorScreenPos(ImVec2(start.x + shown * (box_w + 2.0f) + 2.0f, start.y));
    ImGui::TextDisabled("+%d", n - shown);
  } else {
    ImGui::Dummy(ImVec2(std::max(1.0f, shown * (box_w + 2.0f)), h));
  }
  ImGui::PopID();
}

}  // namespace kvscope::ui
