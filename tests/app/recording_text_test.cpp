// The text panel's model (app/core/request_text.h) on recordings: a recording of a stories260K
// scenario shows the same pieces as the live run it was saved from (text, not ids), its prompts
// included; a version 1 recording (no token text) shows ids, as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/core/request_text.h"
#include "app/core/run_session.h"
#include "engine/model/tokenizer.h"

namespace kvscope::ui {
namespace {

// Every request's sampled ids by position, folded as the text panel folds them (all steps).
std::map<int, std::vector<int>> sampled(const DataSource& src) {
  std::map<int, std::vector<int>> out;
  for (int s = 0; s < src.num_steps(); ++s)
    for (const Event& e : src.events_at(s)) add_sampled_token(e, out);
  return out;
}

std::string joined(const std::vector<TokenPiece>& pieces) {
  std::string s;
  for (const TokenPiece& p : pieces) s += p.text;
  return s;
}

TEST(RecordingText, ARecordingShowsTheLiveRunsText) {
  const std::string scenario = std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/minimal.json";
  std::unique_ptr<RunSession> run = RunSession::open(scenario);
  run->wait();
  ASSERT_NE(run->tokenizer(), nullptr);
  const std::string path =
      (std::filesystem::temp_directory_path() / "kvscope_recording_text_test.kvr").string();
  run->timeline()->save(path);
  std::unique_ptr<RunSession> opened = RunSession::open(path);
  const std::unique_ptr<DataSource> live = run->make_source(), rec = opened->make_source();
  ASSERT_NE(rec->token_text(), nullptr) << "the recording carries the tokenizer's pieces";
  EXPECT_EQ(rec->tokenizer(), nullptr) << "but not the tokenizer";

  const auto live_ids = sampled(*live), rec_ids = sampled(*rec);
  ASSERT_EQ(rec_ids, live_ids);
  ASSERT_EQ(rec_ids.size(), 4u);
  for (const auto& [id, gen] : rec_ids) {
    const std::vector<TokenPiece> want = request_pieces(*live, id, gen, 0);
    const std::vector<TokenPiece> got = request_pieces(*rec, id, gen, 0);
    ASSERT_EQ(got.size(), want.size()) << "request " << id;
    for (std::size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].pos, want[k].pos) << "request " << id << " piece " << k;
      EXPECT_EQ(got[k].id, want[k].id) << "request " << id << " piece " << k;
      EXPECT_EQ(got[k].text, want[k].text) << "request " << id << " piece " << k;
    }
    // Text, not ids: the prompt reads as written and the whole as the tokenizer decodes it.
    std::vector<int> tokens(rec->prompt_tokens(id).begin(), rec->prompt_tokens(id).end());
    ASSERT_FALSE(tokens.empty()) << "the recording carries the prompts";
    for (std::size_t p = tokens.size(); p < gen.size(); ++p) tokens.push_back(gen[p]);
    std::string want_text = run->tokenizer()->decode_all(tokens);
    std::replace(want_text.begin(), want_text.end(), '\n', ' ');
    EXPECT_EQ(joined(got), want_text) << "request " << id;
  }
  EXPECT_EQ(joined(request_pieces(*rec, 0, rec_ids.at(0), 0)).rfind("Once upon a time", 0), 0u);
}

// tests/data/recording_v1.kvr: written by the last version 1 build (tests/trace's
// recording_text_test says how).
TEST(RecordingText, AVersion1RecordingShowsIds) {
  std::unique_ptr<RunSession> opened =
      RunSession::open(std::string(KVSCOPE_SOURCE_DIR) + "/tests/data/recording_v1.kvr");
  const std::unique_ptr<DataSource> src = opened->make_source();
  EXPECT_EQ(src->token_text(), nullptr);
  const auto ids = sampled(*src);
  ASSERT_EQ(ids.size(), 2u);
  for (const auto& [id, gen] : ids) {
    EXPECT_TRUE(src->prompt_tokens(id).empty());
    const std::vector<TokenPiece> pieces = request_pieces(*src, id, gen, 0);
    ASSERT_FALSE(pieces.empty());
    for (const TokenPiece& p : pieces) {
      std::string id_text(1, ' ');  // not " " + ...: GCC 12 warns falsely (-Wrestrict)
      id_text += std::to_string(p.id);
      EXPECT_EQ(p.text, id_text);
    }
  }
}

}  // namespace
}  // namespace kvscope::ui
