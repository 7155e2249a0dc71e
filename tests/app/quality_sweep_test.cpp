// The Quality panel's sweep plan and CSV loader read the engine's single definitions: the format
// ladder and MLA ranks are the ones `kvscope eval` runs, and a CSV written through the shared
// schema writer (as the CLI writes it) loads back into the points the panel plots.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "app/core/quality_sweep.h"
#include "engine/analysis/sweep_csv.h"
#include "engine/mla/mla_codec.h"
#include "engine/quant/kv_format_registry.h"

namespace kvscope::ui {
namespace {

TEST(QualitySweepPlan, FormatsAreTheLadderTheCliSweeps) {
  // cli/eval_report.cpp's evaluate_format_sweep iterates quant::kv_format_sweep() itself.
  std::vector<std::pair<std::string, std::string>> ladder;
  for (const quant::KvLadderEntry& e : quant::kv_format_sweep()) ladder.emplace_back(e.k, e.v);
  EXPECT_EQ(sweep_formats(), ladder);
  EXPECT_EQ(sweep_formats().front(), (std::pair<std::string, std::string>{"fp32", "fp32"}));
  const auto has = [](const std::string& name) {
    for (const auto& [k, v] : sweep_formats())
      if (k == name && v == name) return true;
    return false;
  };
  EXPECT_TRUE(has("kivi2-r64"));
}

TEST(QualitySweepPlan, MlaRanksAreTheCliModeARanks) {
  ModelConfig c;
  c.dim = 64;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.n_layers = 5;
  EXPECT_EQ(sweep_mla_ranks(c), mla_sweep_ranks(c, 0));
  EXPECT_EQ(sweep_num_variants(c),
            static_cast<int>(quant::kv_format_sweep().size() + mla_sweep_ranks(c, 0).size() +
                             sweep_evictions(16).size()));
}

TEST(QualitySweepPlan, ModelsWhereModeAIsSlowGetNoMlaRanksAndANoteThatSaysHowToAddThem) {
  ModelConfig small;  // stories260K: 5 x 2 x 32 x 64 multiply-adds per cached token
  small.dim = 64;
  small.n_heads = 8;
  small.n_kv_heads = 4;
  small.n_layers = 5;
  EXPECT_EQ(mla_rebuild_macs_per_token(small), 20480);
  EXPECT_EQ(sweep_mla_skip_note(small, "stories260K.bin"), "");
  ModelConfig smollm2;  // 30 layers, 9 heads, 3 KV heads of 64
  smollm2.dim = 576;
  smollm2.n_heads = 9;
  smollm2.n_kv_heads = 3;
  smollm2.n_layers = 30;
  EXPECT_EQ(mla_rebuild_macs_per_token(smollm2), 30L * 2 * 192 * 384);
  EXPECT_TRUE(sweep_mla_ranks(smollm2).empty());
  EXPECT_EQ(sweep_num_variants(smollm2),
            static_cast<int>(quant::kv_format_sweep().size() + sweep_evictions(16).size()));
  EXPECT_EQ(sweep_mla_skip_note(smollm2, "m.gguf"),
            "no MLA points: mode A rebuilds K and V at 4423680 multiply-adds per cached token "
            "(minutes per rank here); `kvscope eval mla-sweep --model m.gguf --long 512 "
            "--mla-series a --mla-ranks 96,192` writes mla_sweep.csv for Load CSV");

  // Loading MLA points (an mla_sweep.csv) drops the note; loading formats keeps it.
  QualitySweep computed;
  computed.mla_note = sweep_mla_skip_note(smollm2, "m.gguf");
  QualitySweep formats;
  formats.points.push_back(QualityPoint{});
  merge_sweep(computed, formats);
  EXPECT_FALSE(computed.mla_note.empty());
  QualitySweep mla;
  QualityPoint p;
  p.family = QualityFamily::kMla;
  p.series = "MLA-A";
  p.label = "r=96";
  mla.points.push_back(p);
  merge_sweep(computed, mla);
  EXPECT_TRUE(computed.mla_note.empty());
}

std::string write(const std::string& name, const std::function<void(std::ostream&)>& body) {
  const auto dir = std::filesystem::temp_directory_path() / "kvscope_quality_sweep_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream os(path);
  body(os);
  return path;
}

TEST(QualitySweepCsv, LoadsWhatTheSharedWriterWritesForEveryKind) {
  using namespace sweep_csv;
  QualityReport fp32, kivi;
  fp32.variant = "fp32";
  fp32.ppl_reference = fp32.ppl_variant = 4.8077;
  fp32.top1_agreement = 1.0;
  fp32.footprint.bytes_per_token = fp32.effective_bytes_per_token = 1280.0;
  kivi = fp32;
  kivi.variant = "kivi2-r64";
  kivi.ppl_variant = 6.5927;
  kivi.kl_mean = 0.334;
  kivi.footprint.bytes_per_token = 140.0;
  kivi.footprint.bytes_per_sequence = 81920.0;
  kivi.effective_bytes_per_token = 365.38;
  const std::string quant = write("quant_sweep.csv", [&](std::ostream& os) {
    SweepCsvWriter w(os, SweepCsvKind::kFormats);
    for (const QualityReport& r : {fp32, kivi}) {
      write_bytes_cells(w, r);
      write_quality_cells(w, r);
      w.end_row();
    }
  });
  QualityReport mla = kivi;
  mla.variant = "MLA-A r32 fp16";
  mla.effective_bytes_per_token = mla.footprint.bytes_per_token = 320.0;
  mla.footprint.bytes_per_sequence = 0.0;
  const std::string mla_path = write("mla_sweep.csv", [&](std::ostream& os) {
    SweepCsvWriter w(os, SweepCsvKind::kMla);
    write_bytes_cells(w, mla);
    w.text(kKind, "mla-a").integer(kRank, 32).integer(kRopeDims, 0);
    w.number(kEnergyKeptMean, 0.9774).number(kEnergyKeptMin, 0.9468);
    write_quality_cells(w, mla);
    w.end_row();
  });
  const std::string evict = write("evict_sweep.csv", [&](std::ostream& os) {
    SweepCsvWriter w(os, SweepCsvKind::kEviction);
    w.text(kPolicy, "h2o").integer(kBudget, 64).integer(kSinks, 4);
    w.text(kCompaction, "always").text(kPositions, "keep").integer(kContext, 0);
    write_quality_cells(w, kivi);
    w.integer(kPeakKvBytes, 81920).number(kFullCachePeakBytes, 532480.0);
    w.number(kMeanAttended, 60.0).integer(kTokensEvicted, 5000);
    w.integer(kBlocksFreed, 200).integer(kSlotsMoved, 9000);
    w.number(kPeakBytesPerContextToken, 230.25);
    w.end_row();
  });

  QualitySweep s = load_sweep_csv(quant);
  EXPECT_DOUBLE_EQ(s.reference_bytes_per_token, 1280.0);
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[1].label, "kivi2-r64");
  EXPECT_EQ(s.points[1].family, QualityFamily::kFormat);
  EXPECT_DOUBLE_EQ(s.points[1].bytes_per_token, 365.38);
  EXPECT_DOUBLE_EQ(s.points[1].report.kl_mean, 0.334);
  merge_sweep(s, load_sweep_csv(mla_path));
  merge_sweep(s, load_sweep_csv(evict));
  ASSERT_EQ(s.points.size(), 4u);
  EXPECT_EQ(s.points[2].series, "MLA-A fp16");
  EXPECT_EQ(s.points[2].label, "r=32");
  EXPECT_DOUBLE_EQ(s.points[2].bytes_per_token, 320.0);
  EXPECT_EQ(s.points[3].family, QualityFamily::kEviction);
  EXPECT_EQ(s.points[3].label, "B=64");
  EXPECT_DOUBLE_EQ(s.points[3].bytes_per_token, 230.25);
  EXPECT_DOUBLE_EQ(s.points[3].report.ppl_variant, 6.5927);
}

}  // namespace
}  // namespace kvscope::ui
