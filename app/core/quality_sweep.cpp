// The quality sweep's plan, its points and labels, and the sweep-CSV loader (three kinds).
#include "app/core/quality_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>

#include "engine/common/error.h"
#include "engine/common/text_lines.h"
#include "engine/mla/mla_codec.h"

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

// Fields of one CSV line; a field may be wrapped in double quotes (no quotes inside).
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> f;
  std::string cell;
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      f.push_back(cell);
      cell.clear();
    } else if (ch != '\r') {
      cell.push_back(ch);
    }
  }
  f.push_back(cell);
  return f;
}

// Formats and MLA: the exact bytes per token (KIVI's open group spread over the mean window).
double exact_bytes_per_token(const QualityReport& r) {
  return r.effective_bytes_per_token > 0 ? r.effective_bytes_per_token
                                         : r.footprint.bytes_per_token;
}

enum class CsvKind { kFormats, kMla, kEviction };

// One data line with the header's column names: typed access that names the file, line, column.
class CsvRow {
 public:
  CsvRow(const std::string& path, int line, const std::map<std::string, std::size_t>& columns,
         std::vector<std::string> fields)
      : path_(path), line_(line), columns_(columns), fields_(std::move(fields)) {}
  std::string where(const std::string& column) const {
    return path_ + ": line " + std::to_string(line_) + ": " + column;
  }
  const std::string& text(const std::string& column) const {
    return fields_.at(columns_.at(column));
  }
  double number(const std::string& column) const {
    const std::string& cell = text(column);
    char* end = nullptr;
    const double v = std::strtod(cell.c_str(), &end);
    if (cell.empty() || *end != '\0' || !std::isfinite(v))
      fail_expected(where(column), "a number", "\"" + cell + "\"");
    return v;
  }
  int integer(const std::string& column, int min) const {
    const double v = number(column);
    if (v != std::floor(v) || v < min || v > 1e9)
      fail_expected(where(column), "an integer >= " + std::to_string(min),
                    "\"" + text(column) + "\"");
    return static_cast<int>(v);
  }

 private:
  const std::string& path_;
  int line_;
  const std::map<std::string, std::size_t>& columns_;
  std::vector<std::string> fields_;
};

// The figures every kind shares.
QualityReport read_report(const CsvRow& row, const std::string& variant) {
  QualityReport r;
  r.variant = variant;
  r.ppl_reference = row.number("ppl_reference");
  r.ppl_variant = row.number("ppl_variant");
  r.kl_mean = row.number("kl_mean");
  r.kl_max = row.number("kl_max");
  r.top1_agreement = row.number("top1_agreement");
  return r;
}

QualityReport read_bytes_report(const CsvRow& row) {
  QualityReport r = read_report(row, row.text("variant"));
  r.footprint.bytes_per_token = row.number("bytes_per_token");
  r.footprint.bytes_per_sequence = row.number("bytes_per_sequence");
  r.effective_bytes_per_token = row.number("effective_bytes_per_token");
  return r;
}

QualityPoint read_point(CsvKind kind, const CsvRow& row) {
  if (kind == CsvKind::kFormats) return format_point(read_bytes_report(row));
  if (kind == CsvKind::kMla) {
    const QualityReport r = read_bytes_report(row);
    const std::string& k = row.text("kind");
    if (k == "format") return format_point(r);
    if (k != "mla-a" && k != "mla-b")
      fail_expected(row.where("kind"), "mla-a, mla-b or format", "\"" + k + "\"");
    return mla_point(r, row.integer("rank", 1));
  }
  EvictionRunOptions o;
  o.evictor.policy.kind = parse_eviction_kind(row.text("policy"), row.where("policy"));
  o.evictor.policy.budget = row.integer("budget", 2);
  o.evictor.policy.sinks = row.integer("sinks", 0);
  o.evictor.compaction = parse_compaction_policy(row.text("compaction"), row.where("compaction"));
  o.evictor.positions = parse_position_mode(row.text("positions"), row.where("positions"));
  o.context = row.integer("context", 0);
  const double bytes = row.number("peak_bytes_per_context_token");
  if (!(bytes > 0)) {
    fail_expected(row.where("peak_bytes_per_context_token"), "a number > 0",
                  "\"" + row.text("peak_bytes_per_context_token") + "\"");
  }
  QualityReport r = read_report(row, eviction_variant_name(o.evictor));
  return eviction_point(r, o, bytes);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> sweep_formats() {
  return {{"fp32", "fp32"},         {"fp16", "fp16"},         {"bf16", "bf16"},
          {"fp8-e4m3", "fp8-e4m3"}, {"fp8-e5m2", "fp8-e5m2"}, {"int8", "int8"},
          {"int8", "int4"},         {"int4", "int4"},         {"int4-g8", "int4-g8"},
          {"kivi4", "kivi4"},       {"kivi2", "kivi2"},       {"int2", "int2"},
          {"int2-g8", "int2-g8"}};
}

std::vector<int> sweep_mla_ranks(const ModelConfig& c) {
  const int full = mla_full_rank(c, 0);
  std::vector<int> ranks;
  for (int k = 1; k <= 8; ++k) {
    const int r = std::max(1, full * k / 8);
    if (ranks.empty() || ranks.back() != r) ranks.push_back(r);
  }
  return ranks;
}

std::vector<EvictionRunOptions> sweep_evictions(int block_size) {
  std::vector<EvictionRunOptions> out;
  const std::pair<EvictionKind, CompactionPolicy> series[] = {
      {EvictionKind::kWindow, CompactionPolicy::kNever},
      {EvictionKind::kH2O, CompactionPolicy::kNever},
      {EvictionKind::kH2O, CompactionPolicy::kAlways}};
  for (const auto& [kind, compaction] : series) {
    for (int budget : {16, 32, 64, 128}) {
      EvictionRunOptions o;
      o.block_size = block_size;
      o.evictor.policy.kind = kind;
      o.evictor.policy.budget = budget;
      o.evictor.compaction = compaction;
      out.push_back(o);
    }
  }
  return out;
}

int sweep_num_variants(const ModelConfig& c) {
  return static_cast<int>(sweep_formats().size() + sweep_mla_ranks(c).size() +
                          sweep_evictions(16).size());
}

std::vector<std::vector<int>> quality_eval_windows(const Tokenizer& tokenizer,
                                                   const std::string& text_path, int seq_len,
                                                   long max_tokens) {
  std::vector<std::vector<int>> all = text_windows(
      tokenizer, read_text_file(text_path, "cannot open the eval text"), seq_len, text_path);
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
  std::ifstream in(path);
  if (!in) throw Error(path, "cannot open the sweep CSV");
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  CsvKind kind;
  std::vector<std::string> required = {"ppl_reference", "ppl_variant", "kl_mean", "kl_max",
                                       "top1_agreement"};
  const std::vector<std::string> bytes = {"variant", "bytes_per_token", "bytes_per_sequence",
                                          "effective_bytes_per_token"};
  if (line.rfind("variant,bytes_per_token,", 0) == 0) {
    kind = CsvKind::kFormats;
    required.insert(required.end(), bytes.begin(), bytes.end());
  } else if (line.rfind("variant,kind,rank,", 0) == 0) {
    kind = CsvKind::kMla;
    required.insert(required.end(), bytes.begin(), bytes.end());
    required.insert(required.end(), {"kind", "rank"});
  } else if (line.rfind("policy,budget,", 0) == 0) {
    kind = CsvKind::kEviction;
    required.insert(required.end(), {"policy", "budget", "sinks", "compaction", "positions",
                                     "context", "peak_bytes_per_context_token"});
  } else {
    throw Error(path + ": line 1",
                "expected the header of `kvscope eval --sweep` (variant,bytes_per_token,...), "
                "`--mla-sweep` (variant,kind,rank,...) or `--sweep-evict` (policy,budget,...), "
                "got \"" +
                    line.substr(0, 40) + "\"");
  }
  const std::vector<std::string> names = split_csv(line);
  std::map<std::string, std::size_t> columns;
  for (std::size_t i = 0; i < names.size(); ++i) columns.emplace(names[i], i);
  for (const std::string& c : required) {
    if (columns.count(c) != 0) continue;
    std::string expected = "expected a ";
    expected.append(c).append(" column");
    if (c == "peak_bytes_per_context_token")
      expected.append(
          " (written by `kvscope eval --sweep-evict` from this version on; run it again)");
    throw Error(path + ": line 1", expected.append(", got none"));
  }
  for (int ln = 2; std::getline(in, line); ++ln) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> f = split_csv(line);
    if (f.size() != names.size())
      throw Error(path + ": line " + std::to_string(ln),
                  "expected " + std::to_string(names.size()) + " comma-separated fields, got " +
                      std::to_string(f.size()));
    s.points.push_back(read_point(kind, CsvRow(path, ln, columns, std::move(f))));
    const QualityPoint& p = s.points.back();
    if (p.family == QualityFamily::kFormat && p.label == "fp32")
      s.reference_bytes_per_token = p.bytes_per_token;
  }
  if (s.points.empty()) throw Error(path, "expected at least one data row, got none");
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
  if (into.reference_bytes_per_token <= 0)
    into.reference_bytes_per_token = from.reference_bytes_per_token;
}

}  // namespace kvscope::ui
