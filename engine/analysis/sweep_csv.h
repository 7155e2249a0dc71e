// The three sweep CSVs `kvscope eval` writes and kvscope-ui loads: quant_sweep.csv (--sweep),
// mla_sweep.csv (--mla-sweep) and evict_sweep.csv (--sweep-evict). Their columns are defined
// once, here: the CLI writes rows through SweepCsvWriter and the app reads them through
// read_sweep_csv, both naming cells by the column constants below, so a renamed or added column
// changes writer and reader together.
#pragma once

#include <iosfwd>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/analysis/quality.h"

namespace kvscope {

enum class SweepCsvKind { kFormats, kMla, kEviction };

struct SweepCsvColumn {
  std::string_view name;
  bool quoted = false;  // written in double quotes (variant names hold spaces)
};

namespace sweep_csv {
// Formats and MLA: the variant and its exact bytes.
inline constexpr SweepCsvColumn kVariant{"variant", true};
inline constexpr SweepCsvColumn kBytesPerToken{"bytes_per_token"};
inline constexpr SweepCsvColumn kBytesPerSequence{"bytes_per_sequence"};
inline constexpr SweepCsvColumn kEffectiveBytesPerToken{"effective_bytes_per_token"};
// MLA: which kind of row ("mla-a", "mla-b", "format") and the codec's figures.
inline constexpr SweepCsvColumn kKind{"kind"};
inline constexpr SweepCsvColumn kRank{"rank"};
inline constexpr SweepCsvColumn kRopeDims{"rope_dims"};
inline constexpr SweepCsvColumn kEnergyKeptMean{"energy_kept_mean"};
inline constexpr SweepCsvColumn kEnergyKeptMin{"energy_kept_min"};
// Every kind: quality against the fp32 cache.
inline constexpr SweepCsvColumn kPplReference{"ppl_reference"};
inline constexpr SweepCsvColumn kPplVariant{"ppl_variant"};
inline constexpr SweepCsvColumn kPplDelta{"ppl_delta"};
inline constexpr SweepCsvColumn kKlMean{"kl_mean"};
inline constexpr SweepCsvColumn kKlMax{"kl_max"};
inline constexpr SweepCsvColumn kTop1Agreement{"top1_agreement"};
// Eviction: the policy and what the run held and did.
inline constexpr SweepCsvColumn kPolicy{"policy"};
inline constexpr SweepCsvColumn kBudget{"budget"};
inline constexpr SweepCsvColumn kSinks{"sinks"};
inline constexpr SweepCsvColumn kCompaction{"compaction"};
inline constexpr SweepCsvColumn kPositions{"positions"};
inline constexpr SweepCsvColumn kContext{"context"};
inline constexpr SweepCsvColumn kPeakKvBytes{"peak_kv_bytes"};
inline constexpr SweepCsvColumn kFullCachePeakBytes{"full_cache_peak_bytes"};
inline constexpr SweepCsvColumn kMeanAttended{"mean_attended"};
inline constexpr SweepCsvColumn kTokensEvicted{"tokens_evicted"};
inline constexpr SweepCsvColumn kBlocksFreed{"blocks_freed"};
inline constexpr SweepCsvColumn kSlotsMoved{"slots_moved"};
// Added after the first evict_sweep.csv files (the Quality panel's memory axis): last column.
inline constexpr SweepCsvColumn kPeakBytesPerContextToken{"peak_bytes_per_context_token"};
}  // namespace sweep_csv

struct SweepCsvSchema {
  SweepCsvKind kind;
  std::string_view subverb;                 // the `kvscope eval` subverb that writes it
  std::span<const SweepCsvColumn> columns;  // in file order
};
const SweepCsvSchema& sweep_csv_schema(SweepCsvKind kind);
// The header line, without its newline.
std::string sweep_csv_header(SweepCsvKind kind);

// Writes one sweep CSV: the header at construction, then rows whose cells are set by column in
// any order and written in the schema's order by end_row(). Numbers are printed with 8
// significant digits, integers exactly. A column outside the schema, or one left unset at
// end_row(), is an InternalError (a bug in the writer, not bad input).
class SweepCsvWriter {
 public:
  SweepCsvWriter(std::ostream& os, SweepCsvKind kind);
  SweepCsvWriter& text(const SweepCsvColumn& column, const std::string& value);
  SweepCsvWriter& number(const SweepCsvColumn& column, double value);
  SweepCsvWriter& integer(const SweepCsvColumn& column, long long value);
  void end_row();

 private:
  std::size_t index(const SweepCsvColumn& column) const;
  std::ostream& os_;
  const SweepCsvSchema& schema_;
  std::vector<std::string> cells_;
  std::vector<bool> set_;
};

// Cells every kind has: ppl_reference, ppl_variant, ppl_delta, kl_mean, kl_max, top1_agreement.
void write_quality_cells(SweepCsvWriter& w, const QualityReport& r);
// Formats and MLA: variant, bytes_per_token, bytes_per_sequence, effective_bytes_per_token.
void write_bytes_cells(SweepCsvWriter& w, const QualityReport& r);

// One data line of a sweep CSV read back, its cells found by column; every error names the file,
// line, column, the value and what was expected.
class SweepCsvRow {
 public:
  SweepCsvRow(std::shared_ptr<const std::map<std::string, std::size_t, std::less<>>> columns,
              std::string path, int line, std::vector<std::string> fields);
  int line() const { return line_; }
  // "<path>: line <n>: <column>"
  std::string where(const SweepCsvColumn& column) const;
  const std::string& text(const SweepCsvColumn& column) const;
  double number(const SweepCsvColumn& column) const;  // finite
  int integer(const SweepCsvColumn& column, int min) const;

 private:
  std::shared_ptr<const std::map<std::string, std::size_t, std::less<>>> columns_;
  std::string path_;
  int line_;
  std::vector<std::string> fields_;
};

// The quality figures of a row (ppl_delta is derived, not read) under the name `variant`.
QualityReport read_quality_cells(const SweepCsvRow& row, const std::string& variant);
// The same plus the variant and its bytes (formats and MLA).
QualityReport read_bytes_cells(const SweepCsvRow& row);

struct SweepCsvTable {
  SweepCsvKind kind = SweepCsvKind::kFormats;
  std::vector<SweepCsvRow> rows;
};

// Reads a sweep CSV, its kind told apart by the header's first two columns. Every column of the
// kind's schema must be in the header (the others in any order; unknown ones are ignored), every
// line must have the header's field count, and there must be a data line. Throws kvscope::Error
// naming the file and line otherwise, or when the file cannot be opened.
SweepCsvTable read_sweep_csv(const std::string& path);
// The same from a stream; `path` names it in errors.
SweepCsvTable read_sweep_csv(std::istream& in, const std::string& path);

}  // namespace kvscope
