// The quality sweep's plan, its points and labels, and the sweep-CSV loader (three kinds; the
// columns and their parsing are engine/analysis/sweep_csv's, shared with the CLI's writers).
#include "app/core/quality_sweep.h"

#include <algorithm>

#include "engine/analysis/sweep_csv.h"
#include "engine/common/error.h"
#include "engine/common/text_lines.h"
#include "engine/mla/mla_codec.h"
#include "engine/quant/kv_format_registry.h"

namespace kvscope::ui {

namespace {

// Removes the first " <token>" word equal to `token` ("MLA-A r32 fp16" - "r32" = "MLA-A fp16").
std::string without_word(std::string text, const std::string& token) {
  std::string needle(1, ' ');
  needle.append(token);
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    const std::size_t end = at + needle.size();
    if (end == text.size() || text[end] == ' ') return text.erase(at, needle.size());
  }
  return text;
}

// Formats and MLA: the exact bytes per token (KIVI's open group spread over the mean window).
double exact_bytes_per_token(const QualityReport& r) {
  return r.effective_bytes_per_token > 0 ? r.effective_bytes_per_token
                                         : r.footprint.bytes_per_token;
}

QualityPoint read_point(SweepCsvKind kind, const SweepCsvRow& row) {
  using namespace sweep_csv;
  if (kind == SweepCsvKind::kFormats) return format_point(read_bytes_cells(row));
  if (kind == SweepCsvKind::kMla) {
    const QualityReport r = read_bytes_cells(row);
    const std::string& k = row.text(kKind);
    if (k == "format") return format_point(r);
    if (k != "mla-a" && k != "mla-b")
      fail_expected(row.where(kKind), "mla-a, mla-b or format", "\"" + k + "\"");
    return mla_point(r, row.integer(kRank, 1));
  }
  EvictionRunOptions o;
  o.evictor.policy.kind = parse_eviction_kind(row.text(kPolicy), row.where(kPolicy));
  o.evictor.policy.budget = row.integer(kBudget, 2);
  o.evictor.policy.sinks = row.integer(kSinks, 0);
  o.evictor.compaction = parse_compaction_policy(row.text(kCompaction), row.where(kCompaction));
  o.evictor.positions = parse_position_mode(row.text(kPositions), row.where(kPositions));
  o.context = row.integer(kContext, 0);
  const double bytes = row.number(kPeakBytesPerContextToken);
  if (!(bytes > 0)) {
    fail_expected(row.where(kPeakBytesPerContextToken), "a number > 0",
                  "\"" + row.text(kPeakBytesPerContextToken) + "\"");
  }
  return eviction_point(read_quality_cells(row, eviction_variant_name(o.evictor)), o, bytes);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> sweep_formats() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const quant::KvLadderEntry& e : quant::kv_format_sweep()) out.emplace_back(e.k, e.v);
  return out;
}

long mla_rebuild_macs_per_token(const ModelConfig& c) {
  return static_cast<long>(c.n_layers) * 2L * c.kv_dim() * mla_full_rank(c, 0);
}

std::vector<int> sweep_mla_ranks(const ModelConfig& c) {
  if (mla_rebuild_macs_per_token(c) > kSweepMlaRebuildLimit) return {};
  return mla_sweep_ranks(c, 0);
}

std::string sweep_mla_skip_note(const ModelConfig& c, const std::string& model_path) {
  if (!sweep_mla_ranks(c).empty()) return "";
  const int full = mla_full_rank(c, 0);
  return "no MLA points: mode A rebuilds K and V at " +
         std::to_string(mla_rebuild_macs_per_token(c)) +
         " multiply-adds per cached token (minutes per rank here); `kvscope eval mla-sweep "
         "--model " +
         model_path + " --long 512 --mla-series a --mla-ranks " + std::to_string(full / 4) + "," +
         std::to_string(full / 2) + "` writes mla_sweep.csv for Load CSV";
}

std::vector<EvictionRunOptions> sweep_evictions(int block_size) {
  const int budgets[] = {16, 32, 64, 128};
  return eviction_sweep_runs(block_size, budgets);
}

int sweep_num_variants(const ModelConfig& c) {
  return static_cast<int>(sweep_formats().size() + sweep_mla_ranks(c).size() +
                          sweep_evictions(16).size());
}

std::vector<std::vector<int>> quality_eval_windows(const Tokenizer& tokenizer,
                                                   const std::string& text_path, int seq_len,
                                                   long max_tokens) {
  // A window is at most max_tokens long too: a text that is one long document (SmolLM2 reads the
  // eval text as one) is scored on its first max_tokens tokens, not on all of it.
  const int max_len = static_cast<int>(std::min<long>(seq_len, std::max(2L, max_tokens)));
  std::vector<std::vector<int>> all = text_windows(
      tokenizer, read_text_file(text_path, "cannot open the eval text"), max_len, text_path);
  std::vector<std::vector<int>> windows;
  long tokens = 0;
  for (auto& w : all) {
    if (tokens >= max_tokens) break;
    tokens += static_cast<long>(w.size());
    windows.push_back(std::move(w));
  }
  return windows;
}

QualityPoint format_point(const QualityReport& r) {
  QualityPoint p;
  p.family = QualityFamily::kFormat;
  p.series = "KV formats";
  p.label = r.variant;
  p.bytes_per_token = exact_bytes_per_token(r);
  p.report = r;
  return p;
}

QualityPoint mla_point(const QualityReport& r, int rank) {
  QualityPoint p;
  p.family = QualityFamily::kMla;
  // "MLA-A r32" -> "MLA-A"; "MLA-B r24 rope2 high-freq fp16" -> "MLA-B rope2 high-freq fp16".
  p.series = without_word(r.variant, std::string("r").append(std::to_string(rank)));
  p.label = "r=" + std::to_string(rank);
  p.bytes_per_token = exact_bytes_per_token(r);
  p.report = r;
  return p;
}

std::string sweep_variants_text(const ModelConfig& c, int block_size) {
  std::string out;
  for (const auto& [k, v] : sweep_formats()) out += k + "/" + v + ",";
  for (int rank : sweep_mla_ranks(c)) out += "mla-a r=" + std::to_string(rank) + ",";
  for (const EvictionRunOptions& o : sweep_evictions(block_size))
    out += eviction_variant_name(o.evictor) + ",";
  return out;
}

QualityPoint eviction_point(const QualityReport& r, const EvictionRunOptions& o,
                            double peak_bytes_per_context_token) {
  QualityPoint p;
  p.family = QualityFamily::kEviction;
  p.series = without_word(eviction_variant_name(o.evictor),
                          "B=" + std::to_string(o.evictor.policy.budget));
  if (o.context > 0) p.series.append(" context=").append(std::to_string(o.context));
  p.label = "B=" + std::to_string(o.evictor.policy.budget);
  p.bytes_per_token = peak_bytes_per_context_token;
  p.report = r;
  return p;
}

QualitySweep load_sweep_csv(const std::string& path) {
  QualitySweep s;
  s.loaded.push_back(path);
  s.from_csv = true;
  const SweepCsvTable table = read_sweep_csv(path);
  for (const SweepCsvRow& row : table.rows) {
    s.points.push_back(read_point(table.kind, row));
    const QualityPoint& p = s.points.back();
    if (p.family == QualityFamily::kFormat && p.label == "fp32")
      s.reference_bytes_per_token = p.bytes_per_token;
  }
  return s;
}

void merge_sweep(QualitySweep& into, const QualitySweep& from) {
  for (const QualityPoint& p : from.points) {
    auto same = std::find_if(into.points.begin(), into.points.end(), [&](const QualityPoint& q) {
      return q.series == p.series && q.label == p.label;
    });
    if (same != into.points.end())
      *same = p;
    else
      into.points.push_back(p);
  }
  into.loaded.insert(into.loaded.end(), from.loaded.begin(), from.loaded.end());
  into.from_csv = into.from_csv || from.from_csv;
  const bool adds_mla =
      std::any_of(from.points.begin(), from.points.end(),
                  [](const QualityPoint& p) { return p.family == QualityFamily::kMla; });
  if (adds_mla) into.mla_note.clear();  // the note said how to add them
  if (into.reference_bytes_per_token <= 0)
    into.reference_bytes_per_token = from.reference_bytes_per_token;
}

}  // namespace kvscope::ui
