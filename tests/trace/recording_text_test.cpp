// Recordings' token text (format version 2): the pieces a run's tokenizer decodes its ids to and
// the prompts round-trip (llama2.c's tok512 and SmolLM2's byte-level BPE), bookkeeping runs carry
// none, a version 1 recording still loads (no text), and bad or truncated sections are one-line
// errors naming the file, the byte and the field.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "engine/common/error.h"
#include "engine/model/tokenizer_text.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

std::set<int> used_ids(const Timeline& t) {
  std::set<int> ids;
  for (const std::vector<int>& p : t.header().text->prompts()) ids.insert(p.begin(), p.end());
  for (const Event& e : t.events())
    if (e.type == EventType::kDecodeToken) ids.insert(static_cast<int>(e.b));
  return ids;
}

// Every id the recording uses decodes as the tokenizer decodes it, after BOS and after any other
// token; the recording holds a piece for exactly those ids.
void expect_pieces_match(const Timeline& back, const Tokenizer& tok) {
  ASSERT_NE(back.header().text, nullptr);
  const auto* recorded = dynamic_cast<const RecordedText*>(back.header().text.get());
  ASSERT_NE(recorded, nullptr) << "a loaded recording holds RecordedText";
  EXPECT_EQ(recorded->bos_id(), tok.bos_id());
  const std::set<int> ids = used_ids(back);
  EXPECT_EQ(recorded->pieces().size(), ids.size());
  for (int id : ids) {
    EXPECT_EQ(recorded->decode(-1, id), tok.decode(-1, id)) << "token " << id;
    EXPECT_EQ(recorded->decode(tok.bos_id(), id), tok.decode(tok.bos_id(), id)) << "token " << id;
  }
}

TEST(RecordingText, RoundTripKeepsTheTokenizersPiecesAndPrompts) {
  const auto& m = test::real_model();
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 16;
  c.title = "text round trip";
  c.tokenizer = m.tokenizer;
  std::vector<SimRequest> requests = test::mixed_requests(4);
  requests[1].n_samples = 2;  // parallel samples: one prompt per sequence id
  Simulator sim(c, test::real_sim_model(), requests);
  sim.run(5000);
  const std::string path = test::temp_path("text.kvr");
  sim.timeline()->save(path);
  const Timeline back = Timeline::load(path);
  expect_pieces_match(back, *m.tokenizer);
  EXPECT_EQ(back.header().text->prompts(), sequence_prompts(requests));
  ASSERT_EQ(back.header().text->prompts().size(), 5u);
  // The text of each sequence reads as the tokenizer decodes its prompt and sampled ids.
  std::vector<std::vector<int>> tokens = back.header().text->prompts();
  for (const Event& e : back.events()) {
    if (e.type == EventType::kDecodeToken)
      tokens[static_cast<std::size_t>(e.request)].push_back(static_cast<int>(e.b));
  }
  for (std::size_t s = 0; s < tokens.size(); ++s) {
    std::string text;
    int prev = kTokenBos;
    for (std::size_t i = 1; i < tokens[s].size(); ++i) {  // after the prompt's BOS
      text += *back.header().text->decode(prev, tokens[s][i]);
      prev = tokens[s][i];
    }
    EXPECT_EQ(text, m.tokenizer->decode_all(tokens[s])) << "sequence " << s;
    EXPECT_GT(tokens[s].size(), sequence_prompts(requests)[s].size()) << "it sampled tokens";
  }
  // Saving the loaded recording gives the same bytes.
  const std::string again = test::temp_path("text2.kvr");
  back.save(again);
  EXPECT_EQ(test::read_bytes(path), test::read_bytes(again));
}

TEST(RecordingText, SmolLm2PiecesAreTheDecodedBytes) {
  const std::shared_ptr<const Tokenizer> tok = test::smollm2().tokenizer;
  // Byte-level BPE: "Ġ" stands for a space, and "é" / "🙂" are byte sequences of their own.
  const std::vector<int> prompt = tok->encode("Hello world, café 🙂\n", false, false);
  Timeline t(
      TimelineHeader{4, 16, "smollm2 text", "paged", "fp32", 1.0, false,
                     std::make_shared<TokenizerText>(tok, std::vector<std::vector<int>>{prompt})});
  t.emit(Event{EventType::kDecodeToken, 0, 0, -1, -1, static_cast<std::int64_t>(prompt.size()) - 1,
               prompt[1]});
  t.end_step(StepMetrics{});
  const std::string path = test::temp_path("smol.kvr");
  t.save(path);
  const Timeline back = Timeline::load(path);
  expect_pieces_match(back, *tok);
  std::string text;
  for (int id : prompt) text += *back.header().text->decode(-1, id);
  EXPECT_EQ(text, "Hello world, café 🙂\n");
  EXPECT_EQ(*back.header().text->decode(-1, prompt[1]), " world");
}

TEST(RecordingText, BookkeepingRunsCarryNone) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 16;
  c.tokenizer = test::real_model().tokenizer;
  Simulator sim(c, SimModel{test::real_model().model->config(), nullptr}, test::mixed_requests(2));
  sim.run(5000);
  EXPECT_EQ(sim.timeline()->header().text, nullptr) << "bookkeeping samples no real tokens";
  const std::string path = test::temp_path("bookkeeping.kvr");
  sim.timeline()->save(path);
  EXPECT_EQ(Timeline::load(path).header().text, nullptr);
}

// tests/data/recording_v1.kvr: `kvscope run tests/data/recording_v1.json` by the last version 1
// build (stories260K, 6 steps).
TEST(RecordingText, Version1RecordingStillLoadsWithoutText) {
  const std::string v1 = std::string(KVSCOPE_SOURCE_DIR) + "/tests/data/recording_v1.kvr";
  ASSERT_EQ(test::read_bytes(v1)[8], 1) << "the file is version 1";
  const Timeline t = Timeline::load(v1);
  EXPECT_EQ(t.header().title, "two short stories (a version 1 recording)");
  EXPECT_EQ(t.header().text, nullptr);
  EXPECT_EQ(t.num_steps(), 6);
  int sampled = 0;
  for (const Event& e : t.events()) sampled += e.type == EventType::kDecodeToken;
  EXPECT_EQ(sampled, 11);  // max_new_tokens 6 + 5
  EXPECT_EQ(t.state_at(t.num_steps() - 1).requests.size(), 2u);
  // Saved again it is version 2, with no text section, and holds the same events.
  const std::string again = test::temp_path("v1_again.kvr");
  t.save(again);
  EXPECT_EQ(test::read_bytes(again)[8], 2);
  const Timeline back = Timeline::load(again);
  EXPECT_EQ(back.header().text, nullptr);
  ASSERT_TRUE(
      std::equal(back.events().begin(), back.events().end(), t.events().begin(), t.events().end()));
}

// --- bad sections: a one-step recording without text, then sections spliced in by hand ---

void put32(std::vector<char>& b, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
}
void put64(std::vector<char>& b, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
}
void put_str(std::vector<char>& b, const std::string& s) {
  put32(b, static_cast<std::uint32_t>(s.size()));
  b.insert(b.end(), s.begin(), s.end());
}

// A token-text payload: BOS 1, one prompt [1, 5], and `pieces` as (id, text) without after-BOS.
std::vector<char> text_payload(const std::vector<std::pair<std::int32_t, std::string>>& pieces) {
  std::vector<char> b;
  put32(b, 1);               // bos_id
  put32(b, 1);               // num_prompts
  put32(b, 2);               // prompt 0: 2 ids
  put32(b, 1), put32(b, 5);  // ids
  put32(b, static_cast<std::uint32_t>(pieces.size()));
  for (const auto& [id, text] : pieces) {
    put32(b, static_cast<std::uint32_t>(id));
    put_str(b, text);
    b.push_back(0);  // has_after_bos
  }
  return b;
}

std::vector<char> section(std::uint32_t tag, const std::vector<char>& payload,
                          std::uint64_t length) {
  std::vector<char> b;
  put32(b, tag);
  put64(b, length);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// The bytes of a textless one-step recording with `num_sections` and `sections` in place of its
// empty section list, the checksum refreshed.
std::vector<char> with_sections(std::uint32_t num_sections, const std::vector<char>& sections) {
  Timeline t(TimelineHeader{4, 4, "t", "paged", "fp32", 1.0, false, nullptr});
  t.emit(Event{EventType::kDecodeToken, 0, 0, -1, -1, 1, 5});
  t.end_step(StepMetrics{});
  const std::string path = test::temp_path("sectionless.kvr");
  t.save(path);
  std::vector<char> b = test::read_bytes(path);
  b.resize(b.size() - 12);  // drop num_sections (0) and the checksum
  put32(b, num_sections);
  b.insert(b.end(), sections.begin(), sections.end());
  std::uint64_t h = 1469598103934665603ull;
  for (char c : b) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  put64(b, h);
  return b;
}

std::string load_error(const std::vector<char>& bytes) {
  const std::string path = test::temp_path("bad_text.kvr");
  test::write_bytes(path, bytes);
  return test::error_of([&] { Timeline::load(path); });
}

TEST(RecordingText, HandWrittenSectionLoads) {
  const std::vector<char> payload = text_payload({{1, "<s>"}, {5, " once"}});
  const std::string path = test::temp_path("hand.kvr");
  test::write_bytes(path, with_sections(1, section(1, payload, payload.size())));
  const Timeline t = Timeline::load(path);
  ASSERT_NE(t.header().text, nullptr);
  EXPECT_EQ(t.header().text->decode(-1, 5), " once");
  EXPECT_EQ(t.header().text->decode(-1, 6), std::nullopt) << "no piece: the panel shows the id";
  EXPECT_EQ(t.header().text->prompt(0).size(), 2u);
}

TEST(RecordingText, UnknownSectionsAreSkipped) {
  const std::vector<char> payload = text_payload({{5, " once"}});
  std::vector<char> sections = section(77, {'x', 'y', 'z'}, 3);
  const std::vector<char> text = section(1, payload, payload.size());
  sections.insert(sections.end(), text.begin(), text.end());
  const std::string path = test::temp_path("unknown_section.kvr");
  test::write_bytes(path, with_sections(2, sections));
  const Timeline t = Timeline::load(path);
  ASSERT_NE(t.header().text, nullptr);
  EXPECT_EQ(t.header().text->decode(-1, 5), " once");
}

TEST(RecordingText, BadSectionsAreOneLineErrorsNamingTheField) {
  const std::string file = test::temp_path("bad_text.kvr");
  const std::vector<char> good = text_payload({{1, "<s>"}, {5, " once"}});
  const auto expect_error = [&](const std::vector<char>& bytes, const std::string& want) {
    const std::string err = load_error(bytes);
    EXPECT_EQ(err.rfind(file + ": byte ", 0), 0u) << err;
    EXPECT_NE(err.find(want), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  };
  // Truncated: the section says it is shorter, and is (the last piece's flag, then text, cut).
  std::vector<char> cut(good.begin(), good.end() - 1);
  expect_error(with_sections(1, section(1, cut, cut.size())),
               "expected 1 more bytes (text.pieces[1].has_after_bos), got the end of the "
               "token-text (sections[0]) section after its " +
                   std::to_string(cut.size()) + " bytes (truncated section)");
  cut.resize(cut.size() - 5);
  expect_error(with_sections(1, section(1, cut, cut.size())),
               "expected text.pieces[1].text length within the token-text (sections[0]) section "
               "(0 bytes left), got 5");
  // A length past the file.
  expect_error(with_sections(1, section(1, good, good.size() + 100)),
               "expected sections[0].length within the " + std::to_string(good.size()) +
                   " bytes before the checksum (truncated recording?), got " +
                   std::to_string(good.size() + 100));
  // A section longer than what it holds.
  std::vector<char> longer = good;
  longer.push_back(0);
  expect_error(with_sections(1, section(1, longer, longer.size())),
               "expected the token-text (sections[0]) section to end at byte");
  // Ids out of order, a bad flag, a negative prompt id, counts larger than the bytes.
  const std::vector<char> twice = text_payload({{5, "a"}, {5, "b"}});
  expect_error(with_sections(1, section(1, twice, twice.size())),
               "expected text.pieces[1].id in [6, 16777215] (ids ascending), got 5");
  std::vector<char> flag = good;
  flag[good.size() - 1] = 2;
  expect_error(with_sections(1, section(1, flag, flag.size())),
               "expected text.pieces[1].has_after_bos of 0 or 1, got 2");
  std::vector<char> neg = good;
  std::memset(neg.data() + 12, 0xff, 4);  // prompt 0's first id: -1
  expect_error(with_sections(1, section(1, neg, neg.size())),
               "expected text.prompts[0][0]: a token id in [0, 16777215], got -1");
  std::vector<char> many = good;
  std::memset(many.data() + 4, 0x7f, 4);  // num_prompts
  expect_error(with_sections(1, section(1, many, many.size())), "text.num_prompts of at most");
  // Two text sections; more sections than bytes.
  const std::vector<char> one = section(1, good, good.size());
  std::vector<char> two = one;
  two.insert(two.end(), one.begin(), one.end());
  expect_error(with_sections(2, two), "expected at most one token-text section (tag 1)");
  expect_error(with_sections(1000, {}), "expected num_sections of at most 0");
}

}  // namespace
}  // namespace kvscope
