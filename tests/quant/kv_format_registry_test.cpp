// The one list of named KV formats and the sweep ladder: every name parses back to itself, the
// ladder is in its documented order and holds every format, every rung fits the shapes the sweep
// and the Controls panel use, and the docs' measured table has a row for every rung.
#include "engine/quant/kv_format_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/analysis/quality.h"
#include "engine/kv/kv_format.h"

namespace kvscope {
namespace {

using quant::kv_format_sweep;
using quant::kv_formats;
using quant::KvLadderEntry;

TEST(KvFormatRegistry, EveryNameParsesAndRoundTripsItsName) {
  for (const KvLadderEntry& e : kv_format_sweep()) {
    EXPECT_EQ(parse_kv_format(e.k, "test").name(), e.k);
    EXPECT_EQ(parse_kv_format(e.v, "test").name(), e.v);
    EXPECT_FALSE(e.family.empty()) << e.display_name();
    EXPECT_FALSE(e.description.empty()) << e.display_name();
    // The rung reads as the variant the sweep reports, so CSV rows match rungs by name.
    const auto variant =
        make_kv_format_variant(parse_kv_format(e.k, "test"), parse_kv_format(e.v, "test"), 16);
    EXPECT_EQ(e.display_name(), variant->name());
  }
}

TEST(KvFormatRegistry, LadderIsReferenceFirstThenBitsNonIncreasing) {
  const std::vector<KvLadderEntry>& ladder = kv_format_sweep();
  ASSERT_FALSE(ladder.empty());
  EXPECT_EQ(ladder.front().k, "fp32");
  EXPECT_EQ(ladder.front().v, "fp32");
  std::set<std::string> seen;
  int previous_bits = 64;
  std::string previous = "the start";
  for (const KvLadderEntry& e : ladder) {
    EXPECT_TRUE(seen.insert(e.display_name()).second) << "twice: " << e.display_name();
    const KvFormat k = parse_kv_format(e.k, "test"), v = parse_kv_format(e.v, "test");
    const int bits = k.bits() + v.bits();
    EXPECT_LE(bits, previous_bits) << e.display_name() << " after " << previous;
    previous_bits = bits;
    previous = e.display_name();
    // A -gN / -rN variant comes after the plain format it varies.
    KvFormat plain = k;
    plain.group_size = KvFormat{}.group_size;
    plain.residual = KvFormat{}.residual;
    if (!e.mixed() && plain != k) {
      EXPECT_TRUE(seen.count(plain.name())) << e.k << " before " << plain.name();
    }
  }
}

TEST(KvFormatRegistry, LadderHoldsEveryFormatAndTheFormatListIsItsPlainRungs) {
  std::vector<std::string> plain;
  for (const KvLadderEntry& e : kv_format_sweep())
    if (!e.mixed()) plain.push_back(e.k);
  std::vector<std::string> listed;
  for (const KvLadderEntry& e : kv_formats()) {
    EXPECT_FALSE(e.mixed());
    listed.push_back(e.k);
  }
  EXPECT_EQ(listed, plain);
  // Every base format the parser knows is a rung (its error message lists these).
  for (const std::string& base : kv_format_names()) {
    EXPECT_NE(std::find(listed.begin(), listed.end(), base), listed.end()) << base;
  }
  // kivi2-r64 is in the one list, so the CLI sweep, the app's sweep and the combos all have it.
  EXPECT_NE(std::find(listed.begin(), listed.end(), "kivi2-r64"), listed.end());
}

// The app offers every format in its K/V combos at any block size, and the sweep runs them at the
// run's block size: each must store stories260K's rows (4 KV heads x 8) and Llama's (8 x 128).
TEST(KvFormatRegistry, EveryRungStoresTheShapesAtEveryBlockSize) {
  for (const KvLadderEntry& e : kv_format_sweep()) {
    for (int block_size = 1; block_size <= 256; block_size *= 2) {
      for (const auto& [heads, head_dim] : {std::pair{4, 8}, std::pair{8, 128}}) {
        EXPECT_NO_THROW(parse_kv_format(e.k, "t").validate(block_size, heads, head_dim, "K"))
            << e.k << " block " << block_size;
        EXPECT_NO_THROW(parse_kv_format(e.v, "t").validate(block_size, heads, head_dim, "V"))
            << e.v << " block " << block_size;
      }
    }
  }
}

// docs/concepts/quantization.md shows the measured sweep: one table row per rung, in ladder order.
TEST(KvFormatRegistry, QuantizationDocsTableHasEveryRungInLadderOrder) {
  const std::string path = std::string(KVSCOPE_SOURCE_DIR) + "/docs/concepts/quantization.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string table_head = "| format | bytes/token (blocks) |";
  const std::size_t table = doc.find(table_head);
  ASSERT_NE(table, std::string::npos) << "the sweep table in " << path;
  std::size_t at = table;
  for (const KvLadderEntry& e : kv_format_sweep()) {
    std::string cell = "\n| ";
    const std::size_t row = doc.find(cell.append(e.display_name()).append(" |"), at);
    ASSERT_NE(row, std::string::npos) << e.display_name() << " after offset " << at;
    at = row + 1;
  }
}

}  // namespace
}  // namespace kvscope
