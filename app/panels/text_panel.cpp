// Text panel: generated text per request, rebuilt incrementally from the Timeline's events.
#include "app/panels/text_panel.h"

#include <algorithm>
#include <cstdio>

#include "app/core/theme.h"
#include "app/widgets/widgets.h"

namespace kvscope::ui {

namespace {

constexpr int kMaxTokensShown = 600;  // per request: the newest ones

const char* phase_label(RequestPhase p) {
  return p == RequestPhase::kSwapped ? "swapped out" : request_phase_name(p);
}

std::string printable(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

std::string TextPanel::help() const {
  return "Every request is a prompt (dim) followed by the tokens the model sampled, one per decode "
         "step, each written into the request's KV cache. Scrub back and the text shrinks to "
         "what existed at that step.";
}

void TextPanel::catch_up(const AppState& state) {
  if (generation_ != state.source_generation() || state.step() < built_until_) {
    generation_ = state.source_generation();
    built_until_ = -1;
    tokens_.clear();
  }
  for (int s = built_until_ + 1; s <= state.step(); ++s) {
    for (const Event& e : state.source().events_at(s)) {
      if (e.type != EventType::kDecodeToken || e.a < 0) continue;
      std::vector<int>& t = tokens_[e.request];
      const auto pos = static_cast<std::size_t>(e.a);
      if (t.size() <= pos) t.resize(pos + 1, -1);
      t[pos] = static_cast<int>(e.b);
    }
  }
  built_until_ = state.step();
}

void TextPanel::draw(AppState& state) {
  catch_up(state);
  const DataSource& src = state.source();
  if (src.tokenizer() == nullptr) {
    ImGui::TextDisabled("no tokenizer for this run: token ids shown");
  } else {
    ImGui::TextDisabled("step %d", state.step());
  }
  ImGui::BeginChild("##text", ImVec2(0, 0), false);
  for (const RequestState& r : state.pool().requests) draw_request(state, r);
  ImGui::EndChild();
}

void TextPanel::draw_request(const AppState& state, const RequestState& r) {
  const Palette& pal = palette(state.presenter);
  const DataSource& src = state.source();
  const Tokenizer* tok = src.tokenizer();
  const ImVec4 color = ImGui::ColorConvertU32ToFloat4(sequence_color(r.id));
  ImGui::PushID(r.id);
  ImGui::TextColored(color, "seq %d", r.id);
  ImGui::SameLine();
  ImGui::TextDisabled("%s, %d tokens in cache", phase_label(r.phase), r.num_tokens);
  // The pieces: prompt tokens, then generated ones (by position).
  const std::span<const int> prompt = src.prompt_tokens(r.id);
  const auto it = tokens_.find(r.id);
  const std::vector<int> none;
  const std::vector<int>& gen = it != tokens_.end() ? it->second : none;
  const std::size_t total = std::max(gen.size(), prompt.size());
  const std::size_t first = total > kMaxTokensShown ? total - kMaxTokensShown : 0;
  const float avail = ImGui::GetContentRegionAvail().x;
  float x = 0.0f;
  int prev = 1;  // BOS
  for (std::size_t pos = first; pos < total; ++pos) {
    const bool is_prompt = pos < prompt.size();
    const int id = is_prompt ? prompt[pos] : (pos < gen.size() ? gen[pos] : -1);
    if (id < 0 || (is_prompt && pos == 0 && id == 1)) continue;  // not shown: BOS
    std::string piece;
    if (tok != nullptr) {
      piece = printable(tok->decode(prev, id));
    } else {
      char buf[16];
      std::snprintf(buf, sizeof buf, " %d", id);
      piece = buf;
    }
    prev = id;
    if (piece.empty()) continue;
    const float w = ImGui::CalcTextSize(piece.c_str()).x;
    // Wrap only before a word (a piece starting with a space); word pieces stay together.
    if (x > 0.0f && (x + w <= avail || piece[0] != ' '))
      ImGui::SameLine(0, 0);
    else
      x = 0.0f;
    if (x == 0.0f && piece[0] == ' ') piece.erase(0, 1);
    ImGui::TextColored(is_prompt ? ImGui::ColorConvertU32ToFloat4(pal.text_dim) : color, "%s",
                       piece.c_str());
    x += w;
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::Text("seq %d, position %zu, token id %d", r.id, pos, id);
      ImGui::TextDisabled(is_prompt ? "prompt token" : "sampled by the model");
      ImGui::EndTooltip();
    }
  }
  ImGui::Spacing();
  ImGui::PopID();
}

}  // namespace kvscope::ui
