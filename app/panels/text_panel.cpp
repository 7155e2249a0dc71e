// Text panel: generated text per request, rebuilt incrementally from the Timeline's events.
#include "app/panels/text_panel.h"

#include <algorithm>
#include <cstdio>

#include "app/core/request_text.h"
#include "app/core/theme.h"
#include "app/widgets/widgets.h"
#include "engine/kv/event_payloads.h"

namespace kvscope::ui {

namespace {

constexpr int kMaxTokensShown = 600;  // per request: the newest ones

ImU32 hit_color(const Palette& pal) {
  return mix_color(pal.block_cached, IM_COL32(110, 220, 190, 255), 0.6f);
}
ImU32 recomputed_color() {
  return IM_COL32(240, 150, 60, 255);
}

const char* phase_label(RequestPhase p) {
  return p == RequestPhase::kSwapped ? "swapped out" : request_phase_name(p);
}

}  // namespace

std::string TextPanel::help() const {
  return "Every request is a prompt (dim) followed by the tokens the model sampled, one per decode "
         "step, each written into the request's KV cache. Underlines mark prompt tokens served "
         "from "
         "the prefix cache and tokens recomputed after a preemption.";
}

void TextPanel::catch_up(const AppState& state) {
  if (generation_ != state.source_generation() || state.step() < built_until_) {
    generation_ = state.source_generation();
    built_until_ = -1;
    tokens_.clear();
    hit_tokens_.clear();
    preempted_.clear();
    recomputed_.clear();
  }
  for (int s = built_until_ + 1; s <= state.step(); ++s) {
    for (const Event& e : state.source().events_at(s)) {
      switch (e.type) {
        case EventType::kDecodeToken:
          add_sampled_token(e, tokens_);
          break;
        case EventType::kPrefixLookup:
          hit_tokens_[e.request] = event_as<ev::PrefixLookup>(e).hit_tokens;
          break;
        case EventType::kPreempted:
          if (event_as<ev::Preempted>(e).reason == PreemptReason::kRecompute)
            preempted_[e.request] = true;
          break;
        case EventType::kPrefillChunk: {
          const auto c = event_as<ev::PrefillChunk>(e);
          const std::int64_t first = c.first_position, end = c.first_position + c.tokens;
          if (!preempted_[e.request] || first < 0 || c.tokens < 0 || end > (1 << 24)) break;
          std::vector<std::uint8_t>& r = recomputed_[e.request];
          if (r.size() < static_cast<std::size_t>(end)) r.resize(static_cast<std::size_t>(end), 0);
          for (std::int64_t p = first; p < end; ++p) r[static_cast<std::size_t>(p)] = 1;
          break;
        }
        default:
          break;
      }
    }
  }
  built_until_ = state.step();
}

void TextPanel::draw(AppState& state) {
  catch_up(state);
  const DataSource& src = state.source();
  const Palette& pal = palette(state.presenter);
  if (src.token_text() == nullptr) {
    ImGui::TextDisabled("no tokenizer for this run: token ids shown");
  } else {
    ImGui::TextDisabled("step %d", state.step());
  }
  // Legend: the marks under tokens.
  const auto legend = [&](ImU32 c, const char* text, const char* tip, bool on) {
    flow_same_line(swatch_label_width(text));
    swatch(on ? c : mix_color(c, pal.panel_bg, 0.6f));
    ImGui::SameLine(0, 4);
    ImGui::TextDisabled("%s", text);
    item_tooltip(tip);
  };
  legend(hit_color(pal), "prefix hit",
         "Prompt tokens mapped from the prefix cache: never prefilled", true);
  legend(recomputed_color(), "recomputed",
         "Tokens prefilled again after their request was preempted (recompute)", true);
  legend(pal.text_dim, "evicted",
         "Tokens evicted from the cache are struck through (when the run records per-position "
         "token eviction; none otherwise)",
         true);
  ImGui::BeginChild("##text", ImVec2(0, 0), false);
  for (const RequestState& r : state.pool().requests) draw_request(state, r);
  ImGui::EndChild();
}

void TextPanel::draw_request(const AppState& state, const RequestState& r) {
  const Palette& pal = palette(state.presenter);
  const DataSource& src = state.source();
  const ImVec4 color = ImGui::ColorConvertU32ToFloat4(sequence_color(r.id));
  ImGui::PushID(r.id);
  ImGui::TextColored(color, "seq %d", r.id);
  char status[96];
  std::snprintf(status, sizeof status, "%s, %d tokens in cache", phase_label(r.phase),
                r.num_tokens);
  flow_same_line(ImGui::CalcTextSize(status).x, ImGui::GetStyle().ItemSpacing.x);
  ImGui::TextDisabled("%s", status);
  // The pieces: prompt tokens, then generated ones (by position).
  const std::span<const int> prompt = src.prompt_tokens(r.id);
  const auto it = tokens_.find(r.id);
  const std::vector<int> none;
  const std::vector<int>& gen = it != tokens_.end() ? it->second : none;
  const std::size_t total = std::max(gen.size(), prompt.size());
  const auto hit_it = hit_tokens_.find(r.id);
  const std::int64_t hit = hit_it != hit_tokens_.end() ? hit_it->second : 0;
  const auto rec_it = recomputed_.find(r.id);
  const std::vector<std::uint8_t> live = src.slot_live(r.id, state.step());
  const std::size_t first = total > kMaxTokensShown ? total - kMaxTokensShown : 0;
  const float avail = ImGui::GetContentRegionAvail().x;
  // The pieces to show, decoded in order (request_text.h), and their widths.
  const std::vector<TokenPiece> pieces = request_pieces(src, r.id, gen, first);
  widths_.clear();
  for (const TokenPiece& p : pieces) widths_.push_back(ImGui::CalcTextSize(p.text.c_str()).x);
  float x = 0.0f;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const std::size_t pos = pieces[k].pos;
    const int id = pieces[k].id;
    const bool is_prompt = pos < prompt.size();
    std::string piece = pieces[k].text;
    const float w = widths_[k];
    // Wrap before a word (a piece starting with a space) that does not fit whole; a word
    // wider than the line breaks between its pieces.
    float need = w;
    if (piece[0] == ' ') {
      for (std::size_t j = k + 1; j < pieces.size() && pieces[j].text[0] != ' '; ++j)
        need += widths_[j];
    }
    if (x > 0.0f && x + (need <= avail ? need : w) <= avail)
      ImGui::SameLine(0, 0);
    else
      x = 0.0f;
    if (x == 0.0f && piece[0] == ' ') piece.erase(0, 1);
    const bool is_hit = is_prompt && static_cast<std::int64_t>(pos) < hit;
    const bool is_recomputed = !is_hit && rec_it != recomputed_.end() &&
                               pos < rec_it->second.size() && rec_it->second[pos] != 0;
    const bool is_evicted = pos < live.size() && live[pos] == 0;
    ImGui::TextColored(
        is_evicted  ? ImGui::ColorConvertU32ToFloat4(mix_color(pal.text_dim, pal.panel_bg, 0.4f))
        : is_prompt ? ImGui::ColorConvertU32ToFloat4(pal.text_dim)
                    : color,
        "%s", piece.c_str());
    x += ImGui::GetItemRectSize().x;
    if (is_hit || is_recomputed || is_evicted) {
      const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
      ImDrawList* dl = ImGui::GetWindowDrawList();
      const float lx = a.x + (piece[0] == ' ' ? ImGui::CalcTextSize(" ").x : 0.0f);
      if (is_evicted)
        dl->AddLine(ImVec2(lx, (a.y + b.y) * 0.5f), ImVec2(b.x, (a.y + b.y) * 0.5f), pal.text_dim,
                    1.5f);
      else
        dl->AddLine(ImVec2(lx, b.y - 1.0f), ImVec2(b.x, b.y - 1.0f),
                    is_hit ? hit_color(pal) : recomputed_color(), 2.0f);
    }
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::Text("seq %d, position %zu, token id %d", r.id, pos, id);
      ImGui::TextDisabled(is_prompt ? "prompt token" : "sampled by the model");
      if (is_hit) ImGui::TextDisabled("served from the prefix cache (prefill skipped)");
      if (is_recomputed) ImGui::TextDisabled("recomputed after a preemption");
      if (is_evicted) ImGui::TextDisabled("evicted from the cache");
      ImGui::EndTooltip();
    }
  }
  ImGui::Spacing();
  ImGui::PopID();
}

}  // namespace kvscope::ui
