// The sweep CSV schemas shared by `kvscope eval` (writer) and kvscope-ui (reader): the headers
// the docs and old files have, rows byte-identical to the stream writer the CLI had before the
// schema existed, write -> read round trips for all three kinds, and the one-line errors.
#include "engine/analysis/sweep_csv.h"

#include <gtest/gtest.h>

#include <iomanip>
#include <sstream>

#include "engine/common/error.h"

namespace kvscope {
namespace {

using namespace sweep_csv;

// The error reading a formats CSV (its cells too: numbers are parsed when asked for) gives.
std::string error_of(const std::string& text, const std::string& path = "s.csv") {
  std::istringstream in(text);
  try {
    for (const SweepCsvRow& row : read_sweep_csv(in, path).rows) read_bytes_cells(row);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

QualityReport report(const std::string& variant, double bytes, double per_sequence) {
  QualityReport r;
  r.variant = variant;
  r.ppl_reference = 4.8076892;
  r.ppl_variant = 4.8142117;
  r.kl_mean = 0.0019283746;
  r.kl_max = 0.095834;
  r.top1_agreement = 0.97982;
  r.footprint.bytes_per_token = bytes;
  r.footprint.bytes_per_sequence = per_sequence;
  r.effective_bytes_per_token = bytes + per_sequence / 363.5;
  return r;
}

// The header lines as the files have always had them (docs, tests and users' scripts read them).
TEST(SweepCsv, HeadersAreTheFilesColumns) {
  EXPECT_EQ(sweep_csv_header(SweepCsvKind::kFormats),
            "variant,bytes_per_token,bytes_per_sequence,effective_bytes_per_token,ppl_reference,"
            "ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement");
  EXPECT_EQ(sweep_csv_header(SweepCsvKind::kMla),
            "variant,kind,rank,rope_dims,energy_kept_mean,energy_kept_min,bytes_per_token,"
            "bytes_per_sequence,effective_bytes_per_token,ppl_reference,ppl_variant,ppl_delta,"
            "kl_mean,kl_max,top1_agreement");
  EXPECT_EQ(sweep_csv_header(SweepCsvKind::kEviction),
            "policy,budget,sinks,compaction,positions,context,ppl_reference,ppl_variant,ppl_delta,"
            "kl_mean,kl_max,top1_agreement,peak_kv_bytes,full_cache_peak_bytes,mean_attended,"
            "tokens_evicted,blocks_freed,slots_moved,peak_bytes_per_context_token");
}

// Rows come out exactly as the CLI's `os << std::setprecision(8) << ...` writers printed them.
TEST(SweepCsv, RowsAreByteIdenticalToTheFormerStreamWriters) {
  const QualityReport r = report("kivi2-r64", 140.0, 81920.0);
  std::ostringstream got, want;
  {
    SweepCsvWriter w(got, SweepCsvKind::kFormats);
    write_bytes_cells(w, r);
    write_quality_cells(w, r);
    w.end_row();
  }
  want << sweep_csv_header(SweepCsvKind::kFormats) << '\n' << std::setprecision(8);
  want << '"' << r.variant << "\"," << r.footprint.bytes_per_token << ','
       << r.footprint.bytes_per_sequence << ',' << r.effective_bytes_per_token << ','
       << r.ppl_reference << ',' << r.ppl_variant << ',' << r.ppl_variant - r.ppl_reference << ','
       << r.kl_mean << ',' << r.kl_max << ',' << r.top1_agreement << '\n';
  EXPECT_EQ(got.str(), want.str());

  std::ostringstream got_mla, want_mla;
  {
    SweepCsvWriter w(got_mla, SweepCsvKind::kMla);
    write_bytes_cells(w, r);
    w.text(kKind, "mla-b").integer(kRank, 24).integer(kRopeDims, 2);
    w.number(kEnergyKeptMean, 0.96791234567).number(kEnergyKeptMin, 1.0);
    write_quality_cells(w, r);
    w.end_row();
  }
  want_mla << sweep_csv_header(SweepCsvKind::kMla) << '\n' << std::setprecision(8);
  want_mla << '"' << r.variant << "\","
           << "mla-b" << ',' << 24 << ',' << 2 << ',' << 0.96791234567 << ',' << 1.0 << ','
           << r.footprint.bytes_per_token << ',' << r.footprint.bytes_per_sequence << ','
           << r.effective_bytes_per_token << ',' << r.ppl_reference << ',' << r.ppl_variant << ','
           << r.ppl_variant - r.ppl_reference << ',' << r.kl_mean << ',' << r.kl_max << ','
           << r.top1_agreement << '\n';
  EXPECT_EQ(got_mla.str(), want_mla.str());

  // Eviction: byte counts past 1e8 stay exact integers (as size_t / long streamed).
  const std::size_t peak = 123456789012;
  const long evicted = 9876543210;
  std::ostringstream got_ev, want_ev;
  {
    SweepCsvWriter w(got_ev, SweepCsvKind::kEviction);
    w.text(kPolicy, "h2o").integer(kBudget, 64).integer(kSinks, 4);
    w.text(kCompaction, "always").text(kPositions, "keep").integer(kContext, 0);
    write_quality_cells(w, r);
    w.integer(kPeakKvBytes, static_cast<long long>(peak)).number(kFullCachePeakBytes, 532480.0);
    w.number(kMeanAttended, 60.123456789).integer(kTokensEvicted, evicted);
    w.integer(kBlocksFreed, 300).integer(kSlotsMoved, 0);
    w.number(kPeakBytesPerContextToken, 230.25);
    w.end_row();
  }
  want_ev << sweep_csv_header(SweepCsvKind::kEviction) << '\n' << std::setprecision(8);
  want_ev << "h2o" << ',' << 64 << ',' << 4 << ',' << "always" << ',' << "keep" << ',' << 0 << ','
          << r.ppl_reference << ',' << r.ppl_variant << ',' << r.ppl_variant - r.ppl_reference
          << ',' << r.kl_mean << ',' << r.kl_max << ',' << r.top1_agreement << ',' << peak << ','
          << 532480.0 << ',' << 60.123456789 << ',' << evicted << ',' << 300L << ',' << 0L << ','
          << 230.25 << '\n';
  EXPECT_EQ(got_ev.str(), want_ev.str());
}

TEST(SweepCsv, WriteThenReadRoundTripsEveryKind) {
  const QualityReport fp32 = report("fp32", 1280.0, 0.0);
  const QualityReport mixed = report("K int8 + V int4", 300.0, 0.0);
  std::ostringstream formats;
  {
    SweepCsvWriter w(formats, SweepCsvKind::kFormats);
    for (const QualityReport& r : {fp32, mixed}) {
      write_quality_cells(w, r);  // cells in any order: written in the schema's
      write_bytes_cells(w, r);
      w.end_row();
    }
  }
  std::istringstream in(formats.str());
  const SweepCsvTable t = read_sweep_csv(in, "quant_sweep.csv");
  EXPECT_EQ(t.kind, SweepCsvKind::kFormats);
  ASSERT_EQ(t.rows.size(), 2u);
  const QualityReport back = read_bytes_cells(t.rows[1]);
  EXPECT_EQ(back.variant, "K int8 + V int4");  // quoted on write, unquoted on read
  // 8 significant digits: the test's figures have at most that many.
  EXPECT_DOUBLE_EQ(back.footprint.bytes_per_token, 300.0);
  EXPECT_DOUBLE_EQ(back.footprint.bytes_per_sequence, 0.0);
  EXPECT_DOUBLE_EQ(back.effective_bytes_per_token, 300.0);
  EXPECT_DOUBLE_EQ(back.ppl_reference, mixed.ppl_reference);
  EXPECT_DOUBLE_EQ(back.ppl_variant, mixed.ppl_variant);
  EXPECT_DOUBLE_EQ(back.kl_mean, mixed.kl_mean);
  EXPECT_DOUBLE_EQ(back.kl_max, mixed.kl_max);
  EXPECT_DOUBLE_EQ(back.top1_agreement, mixed.top1_agreement);
  EXPECT_EQ(t.rows[1].line(), 3);

  std::ostringstream mla;
  {
    SweepCsvWriter w(mla, SweepCsvKind::kMla);
    write_bytes_cells(w, report("MLA-B r24 rope2 high-freq", 280.0, 0.0));
    w.text(kKind, "mla-b").integer(kRank, 24).integer(kRopeDims, 2);
    w.number(kEnergyKeptMean, 0.9679).number(kEnergyKeptMin, 0.9146);
    write_quality_cells(w, mixed);
    w.end_row();
  }
  std::istringstream mla_in(mla.str());
  const SweepCsvTable m = read_sweep_csv(mla_in, "mla_sweep.csv");
  EXPECT_EQ(m.kind, SweepCsvKind::kMla);
  ASSERT_EQ(m.rows.size(), 1u);
  EXPECT_EQ(m.rows[0].text(kVariant), "MLA-B r24 rope2 high-freq");
  EXPECT_EQ(m.rows[0].text(kKind), "mla-b");
  EXPECT_EQ(m.rows[0].integer(kRank, 1), 24);
  EXPECT_EQ(m.rows[0].integer(kRopeDims, 0), 2);
  EXPECT_DOUBLE_EQ(m.rows[0].number(kEnergyKeptMin), 0.9146);
  EXPECT_DOUBLE_EQ(read_bytes_cells(m.rows[0]).footprint.bytes_per_token, 280.0);

  std::ostringstream evict;
  {
    SweepCsvWriter w(evict, SweepCsvKind::kEviction);
    w.text(kPolicy, "snapkv").integer(kBudget, 32).integer(kSinks, 4);
    w.text(kCompaction, "half").text(kPositions, "shift").integer(kContext, 256);
    write_quality_cells(w, mixed);
    w.integer(kPeakKvBytes, 61440).number(kFullCachePeakBytes, 532480.0);
    w.number(kMeanAttended, 31.5).integer(kTokensEvicted, 6000);
    w.integer(kBlocksFreed, 300).integer(kSlotsMoved, 12);
    w.number(kPeakBytesPerContextToken, 150.5);
    w.end_row();
  }
  std::istringstream evict_in(evict.str());
  const SweepCsvTable e = read_sweep_csv(evict_in, "evict_sweep.csv");
  EXPECT_EQ(e.kind, SweepCsvKind::kEviction);
  ASSERT_EQ(e.rows.size(), 1u);
  const SweepCsvRow& row = e.rows[0];
  EXPECT_EQ(row.text(kPolicy), "snapkv");
  EXPECT_EQ(row.integer(kBudget, 2), 32);
  EXPECT_EQ(row.text(kCompaction), "half");
  EXPECT_EQ(row.text(kPositions), "shift");
  EXPECT_EQ(row.integer(kContext, 0), 256);
  EXPECT_EQ(row.integer(kSlotsMoved, 0), 12);
  EXPECT_DOUBLE_EQ(row.number(kPeakBytesPerContextToken), 150.5);
  const QualityReport q = read_quality_cells(row, "snapkv B=32");
  EXPECT_EQ(q.variant, "snapkv B=32");
  EXPECT_DOUBLE_EQ(q.kl_mean, mixed.kl_mean);
}

// A writer bug (a column of another file, a cell left out) is an internal error, not a bad file.
TEST(SweepCsv, WriterRefusesForeignAndMissingColumns) {
  std::ostringstream os;
  SweepCsvWriter w(os, SweepCsvKind::kFormats);
  EXPECT_THROW(w.integer(kBudget, 3), InternalError);
  write_bytes_cells(w, report("int8", 400.0, 0.0));
  EXPECT_THROW(w.end_row(), InternalError);  // no quality cells
}

TEST(SweepCsv, ReaderErrorsNameFileLineColumnAndValue) {
  const std::string formats = sweep_csv_header(SweepCsvKind::kFormats) + "\n";
  EXPECT_NE(error_of(formats + "int8,340,0,340,5.5,5.52,0.02,lots,0.01,0.99\n")
                .find("s.csv: line 2: kl_mean: expected a number, got \"lots\""),
            std::string::npos);
  EXPECT_NE(error_of(formats + "int8,340\n")
                .find("s.csv: line 2: expected 10 comma-separated "
                      "fields, got 2"),
            std::string::npos);
  EXPECT_NE(error_of(formats).find("s.csv: expected at least one data row, got none"),
            std::string::npos);
  EXPECT_NE(error_of("").find("s.csv: line 1: expected the header of `kvscope eval format-sweep` "
                              "(variant,bytes_per_token,...), `kvscope eval mla-sweep` "
                              "(variant,kind,...) or `kvscope eval evict-sweep` "
                              "(policy,budget,...), got \"\""),
            std::string::npos)
      << error_of("");
  // A column of the schema missing from the header (an older file): named, with what to do.
  EXPECT_NE(error_of("variant,bytes_per_token,bytes_per_sequence,ppl_reference,ppl_variant,"
                     "ppl_delta,kl_mean,kl_max,top1_agreement\nint8,1,0,5,5,0,0,0,1\n")
                .find("s.csv: line 1: expected an effective_bytes_per_token column "
                      "(`kvscope eval format-sweep` writes it; run it again), got none"),
            std::string::npos);
  // Columns in another order, plus one the schema does not know: read by name.
  std::istringstream shuffled(
      "bytes_per_token,variant,note,bytes_per_sequence,effective_bytes_per_token,ppl_reference,"
      "ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement\r\n"
      "400,\"int8\",x,0,400,5.5,5.52,0.02,0.001,0.01,0.99\r\n");
  EXPECT_THROW(read_sweep_csv(shuffled, "s.csv"), Error) << "the kind is told by the first columns";
  std::istringstream extra(formats.substr(0, formats.size() - 1) +
                           ",note\r\n\"int8\",400,0,400,5.5,5.52,0.02,0.001,0.01,0.99,x\r\n");
  const SweepCsvTable t = read_sweep_csv(extra, "s.csv");
  EXPECT_EQ(read_bytes_cells(t.rows[0]).variant, "int8");
  EXPECT_DOUBLE_EQ(t.rows[0].number(kKlMean), 0.001);
  EXPECT_NE(t.rows[0].where(kKlMean).find("s.csv: line 2: kl_mean"), std::string::npos);
  try {
    t.rows[0].integer(kBytesPerToken, 500);
    FAIL() << "400 is below the minimum";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes_per_token: expected an integer >= 500, got "
                                         "\"400\""),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(read_sweep_csv("/nonexistent/kvscope/sweep.csv"), Error);
}

}  // namespace
}  // namespace kvscope
