// Prefix cache panel: tree layout and drawing, the lookup table.
#include "app/panels/prefix_panel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "app/core/attach_feed.h"
#include "app/core/request_text.h"
#include "app/core/theme.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

namespace {

const char* reason_text(MissReason r) {
  switch (r) {
    case MissReason::kNone:
      return "full hit";
    case MissReason::kFirstOccurrence:
      return "first occurrence";
    case MissReason::kShorterThanBlock:
      return "shorter than a block";
    case MissReason::kDiverged:
      return "diverged";
    case MissReason::kEvicted:
      return "evicted";
    case MissReason::kDisabled:
      return "caching off";
  }
  return "?";
}

// Block b's status and owner in the pool; a block past the pool's end counts as cached-free.
BlockStatus block_status(const PoolState& pool, std::int32_t b, std::int32_t* owner) {
  if (static_cast<std::size_t>(b) >= pool.blocks.size()) return BlockStatus::kCachedFree;
  *owner = pool.blocks[static_cast<std::size_t>(b)].owner;
  return pool.blocks[static_cast<std::size_t>(b)].status;
}

// A tree stripe's fill for its block's status.
ImU32 block_fill(const Palette& pal, BlockStatus st, std::int32_t owner) {
  switch (st) {
    case BlockStatus::kShared:
      return pal.block_shared;
    case BlockStatus::kPinned:
      return pal.block_pinned;
    case BlockStatus::kOwned:
      return sequence_color(owner);
    default:
      return pal.block_cached;
  }
}

}  // namespace

std::string PrefixPanel::help() const {
  return "Prefix caching keeps the KV blocks of full prompt blocks indexed by their tokens, so a "
         "later request starting with the same tokens maps those blocks instead of recomputing "
         "them. Each node is one cached block, linked to the block holding the prefix before it; "
         "requests that share a prefix share a path from a root. With KV tiers behind the cache "
         "(cache.tiers), an evicted block is written back to host RAM or disk and reloaded on a "
         "later hit: a coloured bar marks blocks whose bytes came back from a tier.";
}

void PrefixPanel::catch_up(const AppState& state) {
  if (generation_ != state.source_generation() || state.step() < built_until_) {
    generation_ = state.source_generation();
    built_until_ = -1;
    fold_.reset(state.header().num_blocks, state.header().block_size);
    generated_.clear();
  }
  for (int s = built_until_ + 1; s <= state.step(); ++s) {
    for (const Event& e : state.source().events_at(s)) {
      fold_.apply(e);
      add_sampled_token(e, generated_);
    }
  }
  built_until_ = state.step();
}

void PrefixPanel::layout_tree() {
  placed_.clear();
  rows_ = 0;
  max_depth_ = 0;
  // Depth-first: leaves take the next row, a parent sits at the middle of its children.
  std::function<float(std::int32_t, int)> place = [&](std::int32_t b, int depth) -> float {
    const std::size_t at = placed_.size();
    placed_.push_back({{b}, depth, 0.0f});
    max_depth_ = std::max(max_depth_, depth);
    std::vector<std::int32_t> kids = fold_.children(b);
    while (kids.size() == 1 && placed_[at].chain.size() < 4096) {  // fold single-child runs
      placed_[at].chain.push_back(kids[0]);
      kids = fold_.children(kids[0]);
    }
    float row = 0.0f;
    if (kids.empty() || depth > 4096) {
      row = static_cast<float>(rows_++);
    } else {
      float first = 0.0f, last = 0.0f;
      for (std::size_t i = 0; i < kids.size(); ++i) {
        const float r = place(kids[i], depth + 1);
        if (i == 0) first = r;
        last = r;
      }
      row = 0.5f * (first + last);
    }
    placed_[at].row = row;
    return row;
  };
  for (std::int32_t root : fold_.roots()) place(root, 0);
}

std::string PrefixPanel::block_text(const AppState& state, const PrefixNode& n) const {
  const TokenText* tok = state.source().token_text();
  const int bs = state.header().block_size;
  if (tok == nullptr || n.cached_by < 0 || bs <= 0) return {};
  const std::span<const int> prompt = state.source().prompt_tokens(n.cached_by);
  const auto git = generated_.find(n.cached_by);
  std::string text;
  int prev = n.logical == 0 ? 1 : -1;
  for (int i = 0; i < bs; ++i) {
    const auto pos = static_cast<std::size_t>(n.logical) * static_cast<std::size_t>(bs) +
                     static_cast<std::size_t>(i);
    int id = -1;
    if (pos < prompt.size())
      id = prompt[pos];
    else if (git != generated_.end() && pos < git->second.size())
      id = git->second[pos];
    if (id < 0) return text + " ...";
    if (!(pos == 0 && id == 1))
      text += tok->decode(prev < 0 ? id : prev, id).value_or(token_id_text(id));
    prev = id;
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

void PrefixPanel::node_tooltip(const AppState& state, const PrefixNode& n) const {
  const PoolState& pool = state.pool();
  ImGui::BeginTooltip();
  ImGui::Text("block %d  (logical %d)", n.block, n.logical);
  if (static_cast<std::size_t>(n.block) < pool.blocks.size()) {
    const BlockState& b = pool.blocks[static_cast<std::size_t>(n.block)];
    const int holders = b.ref_count - 1;  // the cache holds one reference
    if (b.status == BlockStatus::kCachedFree)
      ImGui::TextDisabled("cached-free: no sequence holds it; reusable until evicted");
    else
      ImGui::TextDisabled("in use by %d sequence%s (ref count %d incl. the cache)", holders,
                          holders == 1 ? "" : "s", b.ref_count);
  }
  ImGui::Text("cached by seq %d at step %d; reused by %lld lookup%s", n.cached_by, n.cached_step,
              static_cast<long long>(n.hits), n.hits == 1 ? "" : "s");
  if (n.reloaded_from >= 0) {
    ImGui::TextColored(
        ImGui::ColorConvertU32ToFloat4(tier_color(palette(state.presenter), n.reloaded_from)),
        "reloaded from the %s tier, not recomputed", n.reloaded_from == 1 ? "disk" : "host");
  }
  const std::string text = block_text(state, n);
  if (!text.empty()) {
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 24.0f);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(palette(state.presenter).accent), "\"%s\"",
                       text.c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::EndTooltip();
}

void PrefixPanel::draw_tree(AppState& state, ImVec2 size) {
  const Palette& pal = palette(state.presenter);
  TreeGeometry g;
  g.fs = ImGui::GetFontSize();
  const float fs = g.fs;
  g.node_w = fs * 7.0f, g.node_h = fs * 1.45f, g.gap_x = fs * 1.6f, g.gap_y = fs * 0.4f;
  const float node_w = g.node_w, node_h = g.node_h, gap_x = g.gap_x, gap_y = g.gap_y;
  const float pad = fs * 0.5f;
  ImGui::SetNextWindowContentSize(ImVec2(pad * 2 + (max_depth_ + 1) * (node_w + gap_x),
                                         pad * 2 + static_cast<float>(rows_) * (node_h + gap_y)));
  ImGui::BeginChild("##tree", size, true, ImGuiWindowFlags_HorizontalScrollbar);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  g.origin = ImVec2(ImGui::GetCursorScreenPos().x + pad, ImGui::GetCursorScreenPos().y + pad);
  const ImVec2 clip_min = ImGui::GetWindowPos();
  const ImVec2 clip_max(clip_min.x + ImGui::GetWindowWidth(),
                        clip_min.y + ImGui::GetWindowHeight());
  std::map<std::int32_t, std::size_t> node_of;  // block -> index in placed_
  for (std::size_t i = 0; i < placed_.size(); ++i)
    for (std::int32_t b : placed_[i].chain) node_of[b] = i;
  const TreeMarks marks = tree_marks(state);
  const PrefixNode* hovered = nullptr;
  for (const Placed& p : placed_) {
    const PrefixNode& head = fold_.nodes().at(p.chain.front());
    const ImVec2 a = g.top_left(p);
    const ImVec2 b(a.x + node_w, a.y + node_h);
    if (head.parent >= 0 && node_of.count(head.parent)) {  // edge from the parent's right side
      const ImVec2 pa = g.top_left(placed_[node_of[head.parent]]);
      const ImVec2 from(pa.x + node_w, pa.y + node_h * 0.5f), to(a.x, a.y + node_h * 0.5f);
      if (std::max(from.y, to.y) >= clip_min.y && std::min(from.y, to.y) <= clip_max.y)
        dl->AddBezierCubic(from, ImVec2(from.x + gap_x * 0.5f, from.y),
                           ImVec2(to.x - gap_x * 0.5f, to.y), to, pal.axis, 1.5f);
    }
    if (b.y < clip_min.y || a.y > clip_max.y || b.x < clip_min.x || a.x > clip_max.x) continue;
    if (const PrefixNode* h = draw_tree_node(state, g, marks, p)) hovered = h;
  }
  if (placed_.empty()) {
    ImGui::TextDisabled(state.step() == 0 ? "nothing cached yet" : "no cached block at this step");
  }
  if (hovered) node_tooltip(state, *hovered);
  ImGui::EndChild();
}

PrefixPanel::TreeMarks PrefixPanel::tree_marks(const AppState& state) {
  TreeMarks marks;
  // An attach's prefix lookup: the blocks it matched (slots of the newest step) are outlined.
  if (const std::shared_ptr<AttachFeed> feed = state.source().attach_feed()) {
    for (const KvLookupRow& r : feed->snapshot()->lookup_rows)
      marks.lookup.insert(marks.lookup.end(), r.slots.begin(), r.slots.end());
    std::sort(marks.lookup.begin(), marks.lookup.end());
  }
  if (state.selected_request) {
    if (const RequestState* r = find_request(state.pool(), *state.selected_request))
      marks.selected.assign(r->blocks.begin(), r->blocks.end());
  }
  return marks;
}

const PrefixNode* PrefixPanel::draw_tree_node(AppState& state, const TreeGeometry& g,
                                              const TreeMarks& marks, const Placed& p) const {
  const Palette& pal = palette(state.presenter);
  const PoolState& pool = state.pool();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float fs = g.fs, node_w = g.node_w, node_h = g.node_h;
  const PrefixNode& head = fold_.nodes().at(p.chain.front());
  const ImVec2 a = g.top_left(p);
  const ImVec2 b(a.x + node_w, a.y + node_h);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const PrefixNode* hovered = nullptr;
  // One stripe per block of the run, coloured by its status.
  const float cw = node_w / static_cast<float>(p.chain.size());
  bool any_in_use = false;
  for (std::size_t k = 0; k < p.chain.size(); ++k) {
    std::int32_t owner = -1;
    const BlockStatus st = block_status(pool, p.chain[k], &owner);
    any_in_use = any_in_use || (st != BlockStatus::kCachedFree && st != BlockStatus::kFree);
    const ImVec2 ca(a.x + cw * static_cast<float>(k), a.y);
    const ImVec2 cb(k + 1 == p.chain.size() ? b.x : ca.x + cw, b.y);
    const ImDrawFlags corners = (k == 0 ? ImDrawFlags_RoundCornersLeft : 0) |
                                (k + 1 == p.chain.size() ? ImDrawFlags_RoundCornersRight : 0);
    dl->AddRectFilled(ca, cb, block_fill(pal, st, owner), corners ? fs * 0.25f : 0.0f,
                      corners ? corners : ImDrawFlags_RoundCornersNone);
    if (k > 0 && cw >= 3.0f) dl->AddLine(ca, ImVec2(ca.x, cb.y), IM_COL32(16, 18, 24, 120));
    const int from = fold_.nodes().at(p.chain[k]).reloaded_from;
    if (from >= 0)  // a bar along the bottom: its bytes came back from a tier
      dl->AddRectFilled(ImVec2(ca.x, cb.y - fs * 0.24f), cb, tier_color(pal, from));
    if (ImGui::IsWindowHovered() && mouse.x >= ca.x && mouse.x < cb.x && mouse.y >= a.y &&
        mouse.y < b.y) {
      hovered = &fold_.nodes().at(p.chain[k]);
      if (ImGui::IsMouseClicked(0) && owner >= 0) state.selected_request = owner;
    }
  }
  bool sel = false;
  for (std::int32_t blk : p.chain)
    sel =
        sel || std::find(marks.selected.begin(), marks.selected.end(), blk) != marks.selected.end();
  if (sel) dl->AddRect(a, b, pal.outline_selected, fs * 0.25f, 0, 2.0f);
  const bool matched = std::any_of(p.chain.begin(), p.chain.end(), [&](std::int32_t blk) {
    return std::binary_search(marks.lookup.begin(), marks.lookup.end(), blk);
  });
  if (matched) {
    const float o = 2.5f;  // outside the selection outline
    dl->AddRect(ImVec2(a.x - o, a.y - o), ImVec2(b.x + o, b.y + o), pal.accent, fs * 0.3f, 0, 2.5f);
  }
  char label[64];
  if (p.chain.size() == 1)
    std::snprintf(label, sizeof label, "#%d", p.chain.front());
  else
    std::snprintf(label, sizeof label, "%zu blocks", p.chain.size());
  const ImU32 ink = any_in_use ? IM_COL32(16, 18, 24, 240) : pal.text;
  dl->AddText(ImVec2(a.x + fs * 0.3f, a.y + (node_h - fs) * 0.5f), ink, label);
  if (head.hits > 0) {
    std::snprintf(label, sizeof label, "x%lld", static_cast<long long>(head.hits));
    const float tw = ImGui::CalcTextSize(label).x;
    dl->AddText(ImVec2(b.x - tw - fs * 0.3f, a.y + (node_h - fs) * 0.5f), ink, label);
  }
  return hovered;
}

void PrefixPanel::draw_lookups(AppState& state, ImVec2 size) {
  const Palette& pal = palette(state.presenter);
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
  if (!ImGui::BeginTable("##lookups", 4, flags, size)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("seq");
  ImGui::TableSetupColumn("hit tokens");
  ImGui::TableSetupColumn("miss reason", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableSetupColumn("step");
  ImGui::TableHeadersRow();
  for (const auto& [id, row] : fold_.lookups()) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const bool sel = state.selected_request == id;
    ImGui::PushStyleColor(ImGuiCol_Text, sequence_color(id));
    char name[24];
    std::snprintf(name, sizeof name, "seq %d", id);
    if (ImGui::Selectable(name, sel, ImGuiSelectableFlags_SpanAllColumns))
      state.selected_request = sel ? std::optional<int>() : std::optional<int>(id);
    ImGui::PopStyleColor();
    ImGui::TableNextColumn();
    ImGui::Text("%lld / %lld", static_cast<long long>(row.hit_tokens),
                static_cast<long long>(row.prompt_tokens));
    ImGui::TableNextColumn();
    const ImVec4 ok = ImGui::ColorConvertU32ToFloat4(pal.accent);
    const ImVec4 dim = ImGui::ColorConvertU32ToFloat4(pal.text_dim);
    switch (row.reason) {
      case MissReason::kDiverged:
        ImGui::TextColored(dim, "diverged at token %lld", static_cast<long long>(row.diverged_at));
        break;
      case MissReason::kEvicted:
        ImGui::TextColored(dim, "evicted at step %d", row.evicted_step);
        break;
      default:
        ImGui::TextColored(row.reason == MissReason::kNone ? ok : dim, "%s",
                           reason_text(row.reason));
    }
    if (row.tier_tokens > 0) {
      ImGui::SameLine();
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.tier_host), "+%lld from tiers",
                         static_cast<long long>(row.tier_tokens));
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            "%lld prompt tokens reloaded from the KV tiers behind the pool after "
            "this lookup, instead of recomputed",
            static_cast<long long>(row.tier_tokens));
    }
    ImGui::TableNextColumn();
    ImGui::TextDisabled("%d%s", row.step, row.lookups > 1 ? "*" : "");
    if (row.lookups > 1 && ImGui::IsItemHovered())
      ImGui::SetTooltip("looked up %d times (readmitted after preemption); latest shown",
                        row.lookups);
  }
  ImGui::EndTable();
}

void PrefixPanel::draw_tier_strips(const AppState& state) {
  const Palette& pal = palette(state.presenter);
  const float fs = ImGui::GetFontSize();
  const float cell = std::floor(fs * 0.75f), gap = 2.0f;
  const int bs = state.header().block_size;
  constexpr int kMaxRows = 2;  // per tier; the rest is counted
  for (std::size_t k = 0; k < fold_.tiers().size(); ++k) {
    const TierRow& row = fold_.tiers()[k];
    std::vector<std::pair<std::int32_t, const TierBlock*>> held;  // (since step, block)
    for (const auto& [key, b] : fold_.tier_blocks())
      if (b.tier == static_cast<int>(k)) held.emplace_back(b.since_step, &b);
    std::stable_sort(held.begin(), held.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    const ImU32 colour = tier_color(pal, row.disk ? 1 : 0);
    ImGui::TextDisabled("%s tier", row.disk ? "disk" : "host");
    ImGui::SameLine(fs * 4.5f);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    const float width = std::max(cell, ImGui::GetContentRegionAvail().x);
    const int per_row = std::max(1, static_cast<int>((width + gap) / (cell + gap)));
    const int shown = std::min(static_cast<int>(held.size()), per_row * kMaxRows);
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    const TierBlock* hovered = nullptr;
    for (int i = 0; i < shown; ++i) {
      const TierBlock& b = *held[static_cast<std::size_t>(i)].second;
      const int col = i % per_row, line = i / per_row;  // whole cells
      const ImVec2 a(origin.x + static_cast<float>(col) * (cell + gap),
                     origin.y + static_cast<float>(line) * (cell + gap));
      const ImVec2 z(a.x + cell, a.y + cell);
      dl->AddRectFilled(a, z, colour, 2.0f);
      if (b.cached_by >= 0)  // whose prefix it is: a band of the request's colour on top
        dl->AddRectFilled(a, ImVec2(z.x, a.y + std::max(2.0f, cell * 0.3f)),
                          sequence_color(b.cached_by), 2.0f, ImDrawFlags_RoundCornersTop);
      if (ImGui::IsWindowHovered() && mouse.x >= a.x && mouse.x < z.x && mouse.y >= a.y &&
          mouse.y < z.y)
        hovered = &b;
    }
    const int rows = shown == 0 ? 1 : (shown + per_row - 1) / per_row;
    ImGui::Dummy(ImVec2(width, static_cast<float>(rows) * (cell + gap)));
    if (static_cast<int>(held.size()) > shown) {
      ImGui::SameLine(0, 0);
      ImGui::TextDisabled("+%zu more", held.size() - static_cast<std::size_t>(shown));
    }
    if (held.empty()) {
      ImGui::SameLine(fs * 4.5f);
      ImGui::TextDisabled("empty");
    }
    if (hovered != nullptr) {
      ImGui::BeginTooltip();
      if (hovered->cached_by >= 0) {
        ImGui::Text("seq %d's block %d (tokens %d-%d)", hovered->cached_by, hovered->logical,
                    hovered->logical * bs, (hovered->logical + 1) * bs - 1);
      } else {
        ImGui::Text("a cached block");
      }
      ImGui::TextDisabled(
          "in the %s tier since step %d; a prompt that needs it reloads it "
          "instead of recomputing it",
          row.disk ? "disk" : "host", hovered->since_step);
      ImGui::EndTooltip();
    }
  }
}

void PrefixPanel::draw(AppState& state) {
  catch_up(state);
  if (fold_.lookups_total() == 0 && fold_.nodes().empty()) {
    ImGui::TextDisabled("no prefix lookup up to step %d", state.step());
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextDisabled(
        "Prefix caching is off for this run, or no request was admitted yet. Turn it on in the "
        "Controls panel (paged allocator) or open scenarios/shared-system-prompt.json.");
    ImGui::PopTextWrapPos();
    return;
  }
  draw_block_stats(state);
  // A live engine's stream carries stores and removals, not lookups (docs/attach.md).
  const bool engine_stream = state.source().attach_feed() != nullptr;
  draw_hit_stats(state, engine_stream);
  draw_tier_stats();
  draw_legend(palette(state.presenter));
  draw_tier_strips(state);
  layout_tree();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (engine_stream) {
    draw_tree(state, avail);  // no lookups to list
  } else if (avail.x > 720.0f) {
    const float tree_w = std::floor(avail.x * 0.62f);
    draw_tree(state, ImVec2(tree_w, avail.y));
    ImGui::SameLine();
    draw_lookups(state, ImVec2(0, avail.y));
  } else {
    const float tree_h = std::max(60.0f, std::floor(avail.y * 0.6f));
    draw_tree(state, ImVec2(0, tree_h));
    draw_lookups(state,
                 ImVec2(0, std::max(40.0f, avail.y - tree_h - ImGui::GetStyle().ItemSpacing.y)));
  }
}

void PrefixPanel::draw_block_stats(const AppState& state) const {
  int in_use = 0, cached_free = 0;
  for (const auto& [id, n] : fold_.nodes()) {
    const auto i = static_cast<std::size_t>(id);
    if (i < state.pool().blocks.size() && state.pool().blocks[i].status == BlockStatus::kCachedFree)
      ++cached_free;
    else
      ++in_use;
  }
  stat("cached blocks", std::to_string(fold_.nodes().size()));
  stat("in use", std::to_string(in_use), true);
  stat("cached-free", std::to_string(cached_free), true);
  stat("evicted", std::to_string(fold_.evictions()), true);
}

void PrefixPanel::draw_hit_stats(const AppState& state, bool engine_stream) const {
  const StepMetrics& m = state.metrics();
  if (engine_stream) {
    stat("prefix hits", "not published by the engines", true);
  } else {
    const auto of_prompts = [&m](std::int64_t tokens) {
      std::string out = format_count(static_cast<double>(tokens));
      out.append(" / ").append(format_count(static_cast<double>(m.prompt_tokens)));
      if (m.prompt_tokens > 0) {
        out.append(" (")
            .append(format_percent(static_cast<double>(tokens) / m.prompt_tokens))
            .append(")");
      }
      return out;
    };
    // A block a tier gives back is a prompt block not prefilled, as a hit in the pool is: both
    // count, apart (a pool hit maps the block, a reload copies its bytes into a fresh one).
    std::int64_t reloaded_blocks = 0;
    for (const TierRow& t : fold_.tiers()) reloaded_blocks += t.reloaded;
    const std::int64_t reloaded = reloaded_blocks * state.header().block_size;
    if (fold_.tiers().empty()) {
      stat("prompt tokens hit", of_prompts(m.prefix_hit_tokens), true);
    } else {
      stat("prompt tokens cached", of_prompts(m.prefix_hit_tokens + reloaded), true);
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip(
            "Prompt tokens not prefilled because the cache had them: %lld hit in the pool (their "
            "blocks mapped), %lld reloaded from a tier (their bytes copied into fresh blocks)",
            static_cast<long long>(m.prefix_hit_tokens), static_cast<long long>(reloaded));
      }
      char split[96];
      std::snprintf(split, sizeof split, "%s in the pool, %s from tiers",
                    format_count(static_cast<double>(m.prefix_hit_tokens)).c_str(),
                    format_count(static_cast<double>(reloaded)).c_str());
      stat("of which", split, true);
    }
  }
}

void PrefixPanel::draw_tier_stats() const {
  for (std::size_t k = 0; k < fold_.tiers().size(); ++k) {
    const TierRow& t = fold_.tiers()[k];
    char label[32], value[96];
    std::snprintf(label, sizeof label, "%s tier", t.disk ? "disk" : "host");
    std::snprintf(value, sizeof value, "%lld / %lld held, %lld reloaded",
                  static_cast<long long>(t.held), static_cast<long long>(t.capacity),
                  static_cast<long long>(t.reloaded));
    stat(label, value, true);
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip(
          "Tier %zu behind the pool (%s): blocks it holds of its capacity, and blocks reloaded "
          "from it into the pool so far instead of recomputed. Written back so far (first tier): "
          "%lld.",
          k + 1, t.disk ? "a file of checksummed records on disk" : "host RAM",
          static_cast<long long>(fold_.tiers()[0].written));
    }
  }
  if (fold_.tier_writes_refused() > 0)
    stat("tier writes refused", std::to_string(fold_.tier_writes_refused()), true);
}

void PrefixPanel::draw_legend(const Palette& pal) const {
  // Legend.
  bool first = true;
  const auto legend = [&](ImU32 c, const char* text) {
    if (!first) flow_same_line(swatch_label_width(text));
    first = false;
    swatch(c);
    ImGui::SameLine(0, 4);
    ImGui::TextDisabled("%s", text);
  };
  legend(pal.block_cached, "cached-free");
  legend(sequence_color(0), "held by one sequence");
  legend(pal.block_shared, "shared");
  legend(pal.block_pinned, "pinned");
  if (!fold_.tiers().empty()) {
    legend(pal.tier_host, "reloaded from host");
    legend(pal.tier_disk, "reloaded from disk");
  }
  flow_same_line(ImGui::CalcTextSize("xN = reuses").x);
  ImGui::TextDisabled("xN = reuses");
}

}  // namespace kvscope::ui
