// The text panel's model: sampled ids from DecodeToken events, pieces from the source's text.
#include "app/core/request_text.h"

#include <algorithm>
#include <optional>

namespace kvscope::ui {

std::string token_id_text(int id) {
  std::string s(1, ' ');  // appended, not " " + ...: GCC 12 warns falsely (-Wrestrict) on that
  s += std::to_string(id);
  return s;
}

void add_sampled_token(const Event& e, std::map<int, std::vector<int>>& generated) {
  if (e.type != EventType::kDecodeToken || e.a < 0 || e.a >= (1 << 24)) return;
  std::vector<int>& t = generated[e.request];
  // a = position of the last token fed; the sampled token b is fed at a + 1.
  const auto pos = static_cast<std::size_t>(e.a + 1);
  if (t.size() <= pos) t.resize(pos + 1, -1);
  t[pos] = static_cast<int>(e.b);
}

std::vector<TokenPiece> request_pieces(const DataSource& src, int request,
                                       const std::vector<int>& generated, std::size_t first) {
  const std::span<const int> prompt = src.prompt_tokens(request);
  const TokenText* text = src.token_text();
  const std::size_t total = std::max(generated.size(), prompt.size());
  std::vector<TokenPiece> pieces;
  int prev = 1;  // BOS
  for (std::size_t pos = first; pos < total; ++pos) {
    const bool is_prompt = pos < prompt.size();
    const int id = is_prompt ? prompt[pos] : (pos < generated.size() ? generated[pos] : -1);
    if (id < 0 || (is_prompt && pos == 0 && id == 1)) continue;  // not shown: BOS
    std::optional<std::string> piece = text != nullptr ? text->decode(prev, id) : std::nullopt;
    if (piece) {
      std::replace(piece->begin(), piece->end(), '\n', ' ');
    } else {
      piece = token_id_text(id);
    }
    prev = id;
    if (!piece->empty()) pieces.push_back({pos, id, std::move(*piece)});
  }
  return pieces;
}

}  // namespace kvscope::ui
