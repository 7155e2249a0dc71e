// Sweep CSV schemas, the writer the CLI uses and the reader the app uses.
#include "engine/analysis/sweep_csv.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <istream>
#include <iterator>
#include <ostream>
#include <sstream>

#include "engine/common/error.h"

namespace kvscope {
namespace {

using namespace sweep_csv;

constexpr SweepCsvColumn kFormatColumns[] = {
    kVariant,      kBytesPerToken, kBytesPerSequence, kEffectiveBytesPerToken,
    kPplReference, kPplVariant,    kPplDelta,         kKlMean,
    kKlMax,        kTop1Agreement};
constexpr SweepCsvColumn kMlaColumns[] = {kVariant,
                                          kKind,
                                          kRank,
                                          kRopeDims,
                                          kEnergyKeptMean,
                                          kEnergyKeptMin,
                                          kBytesPerToken,
                                          kBytesPerSequence,
                                          kEffectiveBytesPerToken,
                                          kPplReference,
                                          kPplVariant,
                                          kPplDelta,
                                          kKlMean,
                                          kKlMax,
                                          kTop1Agreement};
constexpr SweepCsvColumn kEvictionColumns[] = {kPolicy,
                                               kBudget,
                                               kSinks,
                                               kCompaction,
                                               kPositions,
                                               kContext,
                                               kPplReference,
                                               kPplVariant,
                                               kPplDelta,
                                               kKlMean,
                                               kKlMax,
                                               kTop1Agreement,
                                               kPeakKvBytes,
                                               kFullCachePeakBytes,
                                               kMeanAttended,
                                               kTokensEvicted,
                                               kBlocksFreed,
                                               kSlotsMoved,
                                               kPeakBytesPerContextToken};

const SweepCsvSchema kSchemas[] = {
    {SweepCsvKind::kFormats, "format-sweep", kFormatColumns},
    {SweepCsvKind::kMla, "mla-sweep", kMlaColumns},
    {SweepCsvKind::kEviction, "evict-sweep", kEvictionColumns},
};

// Fields of one CSV line; a field may be wrapped in double quotes (no quotes inside, as the
// writer never puts one in a name).
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

std::string quoted(const std::string& cell) {
  std::string out(1, '"');
  return out.append(cell).append(1, '"');
}

}  // namespace

const SweepCsvSchema& sweep_csv_schema(SweepCsvKind kind) {
  for (const SweepCsvSchema& s : kSchemas)
    if (s.kind == kind) return s;
  throw InternalError("sweep csv", "no schema for kind " + std::to_string(static_cast<int>(kind)));
}

std::string sweep_csv_header(SweepCsvKind kind) {
  std::string header;
  for (const SweepCsvColumn& c : sweep_csv_schema(kind).columns) {
    if (!header.empty()) header.push_back(',');
    header.append(c.name);
  }
  return header;
}

// ---- writing ----

SweepCsvWriter::SweepCsvWriter(std::ostream& os, SweepCsvKind kind)
    : os_(os),
      schema_(sweep_csv_schema(kind)),
      cells_(schema_.columns.size()),
      set_(schema_.columns.size(), false) {
  os_ << sweep_csv_header(kind) << '\n';
}

std::size_t SweepCsvWriter::index(const SweepCsvColumn& column) const {
  for (std::size_t i = 0; i < schema_.columns.size(); ++i)
    if (schema_.columns[i].name == column.name) return i;
  std::string what = "no column ";
  what.append(column.name).append(" in the ").append(schema_.subverb).append(" CSV");
  throw InternalError("sweep csv writer", what);
}

SweepCsvWriter& SweepCsvWriter::text(const SweepCsvColumn& column, const std::string& value) {
  const std::size_t i = index(column);
  cells_[i] = schema_.columns[i].quoted ? quoted(value) : value;
  set_[i] = true;
  return *this;
}

SweepCsvWriter& SweepCsvWriter::number(const SweepCsvColumn& column, double value) {
  // 8 significant digits, the stream's default notation: what the files have always held.
  std::ostringstream s;
  s << std::setprecision(8) << value;
  const std::size_t i = index(column);
  cells_[i] = s.str();
  set_[i] = true;
  return *this;
}

SweepCsvWriter& SweepCsvWriter::integer(const SweepCsvColumn& column, long long value) {
  const std::size_t i = index(column);
  cells_[i] = std::to_string(value);  // exact: byte counts pass 1e8, where %.8g would round
  set_[i] = true;
  return *this;
}

void SweepCsvWriter::end_row() {
  std::string line;
  for (std::size_t i = 0; i < cells_.size(); ++i) {
    if (!set_[i]) {
      std::string what = "a ";
      what.append(schema_.subverb).append(" row without its ").append(schema_.columns[i].name);
      throw InternalError("sweep csv writer", what.append(" cell"));
    }
    if (i > 0) line.push_back(',');
    line.append(cells_[i]);
    set_[i] = false;
  }
  os_ << line << '\n';
}

void write_quality_cells(SweepCsvWriter& w, const QualityReport& r) {
  w.number(kPplReference, r.ppl_reference)
      .number(kPplVariant, r.ppl_variant)
      .number(kPplDelta, r.ppl_variant - r.ppl_reference)
      .number(kKlMean, r.kl_mean)
      .number(kKlMax, r.kl_max)
      .number(kTop1Agreement, r.top1_agreement);
}

void write_bytes_cells(SweepCsvWriter& w, const QualityReport& r) {
  w.text(kVariant, r.variant)
      .number(kBytesPerToken, r.footprint.bytes_per_token)
      .number(kBytesPerSequence, r.footprint.bytes_per_sequence)
      .number(kEffectiveBytesPerToken, r.effective_bytes_per_token);
}

// ---- reading ----

SweepCsvRow::SweepCsvRow(
    std::shared_ptr<const std::map<std::string, std::size_t, std::less<>>> columns,
    std::string path, int line, std::vector<std::string> fields)
    : columns_(std::move(columns)),
      path_(std::move(path)),
      line_(line),
      fields_(std::move(fields)) {}

std::string SweepCsvRow::where(const SweepCsvColumn& column) const {
  std::string w = path_;
  return w.append(": line ").append(std::to_string(line_)).append(": ").append(column.name);
}

const std::string& SweepCsvRow::text(const SweepCsvColumn& column) const {
  const auto it = columns_->find(column.name);
  // read_sweep_csv checked the schema's columns, and readers ask for those only.
  if (it == columns_->end())
    throw InternalError(path_, "read of column " + std::string(column.name) + " not in its header");
  return fields_.at(it->second);
}

double SweepCsvRow::number(const SweepCsvColumn& column) const {
  const std::string& cell = text(column);
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  if (cell.empty() || *end != '\0' || !std::isfinite(v))
    fail_expected(where(column), "a number", quoted(cell));
  return v;
}

int SweepCsvRow::integer(const SweepCsvColumn& column, int min) const {
  const double v = number(column);
  if (v != std::floor(v) || v < min || v > 1e9)
    fail_expected(where(column), "an integer >= " + std::to_string(min), quoted(text(column)));
  return static_cast<int>(v);
}

QualityReport read_quality_cells(const SweepCsvRow& row, const std::string& variant) {
  QualityReport r;
  r.variant = variant;
  r.ppl_reference = row.number(kPplReference);
  r.ppl_variant = row.number(kPplVariant);
  r.kl_mean = row.number(kKlMean);
  r.kl_max = row.number(kKlMax);
  r.top1_agreement = row.number(kTop1Agreement);
  return r;
}

QualityReport read_bytes_cells(const SweepCsvRow& row) {
  QualityReport r = read_quality_cells(row, row.text(kVariant));
  r.footprint.bytes_per_token = row.number(kBytesPerToken);
  r.footprint.bytes_per_sequence = row.number(kBytesPerSequence);
  r.effective_bytes_per_token = row.number(kEffectiveBytesPerToken);
  return r;
}

SweepCsvTable read_sweep_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path, "cannot open the sweep CSV");
  return read_sweep_csv(in, path);
}

SweepCsvTable read_sweep_csv(std::istream& in, const std::string& path) {
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::vector<std::string> names = split_csv(line);
  const SweepCsvSchema* schema = nullptr;
  for (const SweepCsvSchema& s : kSchemas) {
    if (names.size() >= 2 && names[0] == s.columns[0].name && names[1] == s.columns[1].name)
      schema = &s;
  }
  if (schema == nullptr) {
    std::string expected = "the header of ";
    for (std::size_t i = 0; i < std::size(kSchemas); ++i) {
      const SweepCsvSchema& s = kSchemas[i];
      if (i > 0) expected.append(i + 1 == std::size(kSchemas) ? " or " : ", ");
      expected.append("`kvscope eval ").append(s.subverb).append("` (");
      expected.append(s.columns[0].name).append(",").append(s.columns[1].name).append(",...)");
    }
    fail_expected(path + ": line 1", expected, quoted(line.substr(0, 40)));
  }
  auto columns = std::make_shared<std::map<std::string, std::size_t, std::less<>>>();
  for (std::size_t i = 0; i < names.size(); ++i) columns->emplace(names[i], i);
  for (const SweepCsvColumn& c : schema->columns) {
    if (columns->count(c.name) != 0) continue;
    std::string expected =
        std::string_view("aeiou").find(c.name[0]) != std::string_view::npos ? "an " : "a ";
    expected.append(c.name).append(" column (`kvscope eval ").append(schema->subverb);
    fail_expected(path + ": line 1", expected.append("` writes it; run it again)"), "none");
  }
  SweepCsvTable table;
  table.kind = schema->kind;
  for (int ln = 2; std::getline(in, line); ++ln) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> f = split_csv(line);
    if (f.size() != names.size()) {
      fail_expected(path + ": line " + std::to_string(ln),
                    std::to_string(names.size()) + " comma-separated fields",
                    std::to_string(f.size()));
    }
    table.rows.emplace_back(columns, path, ln, std::move(f));
  }
  if (table.rows.empty()) throw Error(path, "expected at least one data row, got none");
  return table;
}

}  // namespace kvscope
