// The text panel's model, UI-free: each request's sampled token ids by position (folded from the
// DecodeToken events) and the pieces its tokens decode to, so tests check what the panel shows
// without drawing it.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "app/core/data_source.h"

namespace kvscope::ui {

struct TokenPiece {
  std::size_t pos = 0;  // position in the request's sequence
  int id = -1;          // the token id
  std::string text;  // what it shows: decoded (newlines as spaces), or " 17" for id 17 without text
};

// How a token without text shows: a space and its id (" 17").
std::string token_id_text(int id);

// Folds one DecodeToken event into `generated` (request id -> [position] sampled id, -1 where
// there is none yet); other events, and positions past 2^24, are ignored.
void add_sampled_token(const Event& e, std::map<int, std::vector<int>>& generated);

// The pieces of request `request`'s tokens from position `first` to the end of its prompt or of
// `generated`, whichever is longer: the prompt's ids (src.prompt_tokens), then the sampled ones,
// each decoded after the token before it (the first after BOS) with src.token_text(), or shown as
// a space and the id when the source has no text for it. A leading BOS, positions without a token
// and empty pieces are left out.
std::vector<TokenPiece> request_pieces(const DataSource& src, int request,
                                       const std::vector<int>& generated, std::size_t first);

}  // namespace kvscope::ui
