// The look of kvscope-ui: one calm dark palette (and a high-contrast presenter variant), the
// per-sequence colors (deterministic from the request id), plot series colors and fonts.
#pragma once

#include <imgui.h>

namespace kvscope::ui {

struct Palette {
  ImU32 window_bg, panel_bg, text, text_dim, accent, grid, axis;
  ImU32 block_free, block_cached, block_shared, block_pinned, outline_selected;
  ImU32 badge_demo, badge_random, warn;
  ImU32 tier_host, tier_disk;  // KV tiers: blocks reloaded from host RAM, from disk
};

const Palette& palette(bool presenter);

// A stable, well-spread color for sequence `id` (golden-ratio hue walk, calm saturation).
ImU32 sequence_color(int id, float alpha = 1.0f);
// Colors for plot series 0, 1, 2, ... (distinguishable, also for color-blind viewers).
ImU32 series_color(int index);
// The colour of blocks reloaded from a KV tier on `medium` (0 = host RAM, 1 = disk).
inline ImU32 tier_color(const Palette& p, int medium) {
  return medium == 1 ? p.tier_disk : p.tier_host;
}
// Blends a toward b by t in [0,1].
ImU32 mix_color(ImU32 a, ImU32 b, float t);

// Rebuilds the ImGui style for normal or presenter mode (idempotent).
void apply_style(bool presenter);

struct Fonts {
  ImFont* normal = nullptr;
  ImFont* large = nullptr;   // presenter mode
  bool from_system = false;  // a TrueType font was found (else ImGui's built-in bitmap font)
};
// Adds the UI fonts to io.Fonts (before the atlas is built).
Fonts load_fonts(ImGuiIO& io);
// Selects the font for the mode (and scales the built-in one when no TrueType font was found).
void use_fonts(const Fonts& fonts, bool presenter);

}  // namespace kvscope::ui
