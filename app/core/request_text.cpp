#include "engine/kv/event_payloads.h"
// The text panel's model: sampled ids from DecodeToken events, pieces from the source's text.
#include "app/core/request_text.h"
#include "engine/kv/event_payloads.h"

#include <algorithm>
#include <optional>
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
namespace kvscope::ui {
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
std::string token_id_text(int id) {
#include "engine/kv/event_payloads.h"
  std::string s(1, ' ');  // appended, not " " + ...: GCC 12 warns falsely (-Wrestrict) on that
#include "engine/kv/event_payloads.h"
  s += std::to_string(id);
#include "engine/kv/event_payloads.h"
  return s;
#include "engine/kv/event_payloads.h"
}
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
void add_sampled_token(const Event& e, std::map<int, std::vector<int>>& generated) {
#include "engine/kv/event_payloads.h"
  if (e.type != EventType::kDecodeToken) return;
#include "engine/kv/event_payloads.h"
  const auto d = event_as<ev::DecodeToken>(e);
#include "engine/kv/event_payloads.h"
  if (d.position < 0 || d.position >= (1 << 24)) return;
#include "engine/kv/event_payloads.h"
  std::vector<int>& t = generated[d.request];
#include "engine/kv/event_payloads.h"
  // The sampled token is fed at the position after the last token fed.
#include "engine/kv/event_payloads.h"
  const auto pos = static_cast<std::size_t>(d.position + 1);
#include "engine/kv/event_payloads.h"
  if (t.size() <= pos) t.resize(pos + 1, -1);
#include "engine/kv/event_payloads.h"
  t[pos] = static_cast<int>(d.token);
#include "engine/kv/event_payloads.h"
}
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
std::vector<TokenPiece> request_pieces(const DataSource& src, int request,
#include "engine/kv/event_payloads.h"
                                       const std::vector<int>& generated, std::size_t first) {
#include "engine/kv/event_payloads.h"
  const std::span<const int> prompt = src.prompt_tokens(request);
#include "engine/kv/event_payloads.h"
  const TokenText* text = src.token_text();
#include "engine/kv/event_payloads.h"
  const std::size_t total = std::max(generated.size(), prompt.size());
#include "engine/kv/event_payloads.h"
  std::vector<TokenPiece> pieces;
#include "engine/kv/event_payloads.h"
  int prev = 1;  // BOS
#include "engine/kv/event_payloads.h"
  for (std::size_t pos = first; pos < total; ++pos) {
#include "engine/kv/event_payloads.h"
    const bool is_prompt = pos < prompt.size();
#include "engine/kv/event_payloads.h"
    const int id = is_prompt ? prompt[pos] : (pos < generated.size() ? generated[pos] : -1);
#include "engine/kv/event_payloads.h"
    if (id < 0 || (is_prompt && pos == 0 && id == 1)) continue;  // not shown: BOS
#include "engine/kv/event_payloads.h"
    std::optional<std::string> piece = text != nullptr ? text->decode(prev, id) : std::nullopt;
#include "engine/kv/event_payloads.h"
    if (piece) {
#include "engine/kv/event_payloads.h"
      std::replace(piece->begin(), piece->end(), '\n', ' ');
#include "engine/kv/event_payloads.h"
    } else {
#include "engine/kv/event_payloads.h"
      piece = token_id_text(id);
#include "engine/kv/event_payloads.h"
    }
#include "engine/kv/event_payloads.h"
    prev = id;
#include "engine/kv/event_payloads.h"
    if (!piece->empty()) pieces.push_back({pos, id, std::move(*piece)});
#include "engine/kv/event_payloads.h"
  }
#include "engine/kv/event_payloads.h"
  return pieces;
#include "engine/kv/event_payloads.h"
}
#include "engine/kv/event_payloads.h"

#include "engine/kv/event_payloads.h"
}  // namespace kvscope::ui
