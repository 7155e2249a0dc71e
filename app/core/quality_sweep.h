// The quality-vs-memory sweep as the UI shows it: one point per cache variant (KV format, MLA rank,
// eviction policy at a budget) on one memory axis, what the background sweep runs, and the loader
// for the three sweep CSVs `kvscope eval` writes (quant_sweep.csv, mla_sweep.csv, evict_sweep.csv).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/analysis/eviction_quality.h"
#include "engine/analysis/quality.h"
#include "engine/common/config.h"
#include "engine/model/tokenizer.h"

namespace kvscope::ui {

enum class QualityFamily { kFormat, kMla, kEviction };

// One plotted point. The memory axis is KV bytes per token of context (all layers, K+V):
//   formats and MLA: the exact bytes per token at the mean window length
//     (QualityReport::effective_bytes_per_token; KIVI's open group included);
//   eviction: each window's peak block bytes summed over windows, divided by their tokens
//     (EvictionRunStats::peak_bytes_per_context_token: what the cache held, whole blocks).
struct QualityPoint {
  QualityFamily family = QualityFamily::kFormat;
  std::string series;  // legend entry: "KV formats", "MLA-A", "window", "h2o compact=always"
  std::string label;   // beside the marker: "int8", "r=32", "B=64"
  double bytes_per_token = 0.0;
  QualityReport report;
};

struct QualitySweep {
  std::string model;   // checkpoint path of the computed points (empty when only loaded)
  std::string source;  // eval text of the computed points (empty when only loaded)
  std::vector<std::string> loaded;  // CSVs merged in, in order
  long positions = 0;               // scored next-token predictions per variant (computed)
  int windows = 0;
  int block_size = 16;
  bool from_csv = false;  // some points came from a CSV (the panel does not restart the sweep)
  // Where the computed points came from or went: "from the disk cache <file>", "cached in
  // <file>", or why the cache was not written ("" without a cache).
  std::string cache_note;
  std::string mla_note;  // sweep_mla_skip_note() of the computed points' model ("" when MLA ran)
  bool from_cache = false;
  // Shipped results shown while the live sweep runs (app/core/quality_shipped.h): "shipped
  // results: `<command>`, <date>"; "" for a sweep computed or read from the disk cache.
  std::string shipped_note;
  std::string shipped_detail;  // the shipped file, its commit and run time (the note's tooltip)
  int points_recomputed = 0;   // of shipped results: points the live sweep has replaced so far
  double reference_bytes_per_token = 0.0;  // the fp32 cache (0: not known)
  std::vector<QualityPoint> points;        // computed: formats (fp32 first), MLA, eviction
  std::string error;                       // set instead of points on failure
};

// ---- what the background sweep runs ----

// Tokens of the eval text the panel's sweep scores per variant (quality_eval_windows).
inline constexpr long kQualitySweepTokens = 2048;
// The block size of the shipped sweeps (app/core/quality_shipped.h): every shipped scenario's but
// two; a run at another block size computes its own sweep.
inline constexpr int kQualitySweepBlockSize = 16;

// The format ladder as (K, V) names parse_kv_format takes, fp32 first: quant::kv_format_sweep(),
// the rungs `kvscope eval format-sweep` runs, in its order.
std::vector<std::pair<std::string, std::string>> sweep_formats();
// MLA mode A rebuilds every cached K and V for every query: n_layers x 2 kv_dim x rank
// multiply-adds per cached token, at full rank here (stories260K: 20,480; SmolLM2-135M:
// 4,423,680, minutes per rank on this CPU, docs/concepts/mla.md).
long mla_rebuild_macs_per_token(const ModelConfig& c);
// The sweep runs MLA ranks only up to this rebuild cost, so a first sweep stays minutes long.
inline constexpr long kSweepMlaRebuildLimit = 1000000;
// MLA mode A ranks (fp32 latents): mla_sweep_ranks(c, 0), those of `kvscope eval mla-sweep`;
// none when mla_rebuild_macs_per_token(c) > kSweepMlaRebuildLimit.
std::vector<int> sweep_mla_ranks(const ModelConfig& c);
// Why a model's sweep has no MLA points and the command that adds them (a CSV to load), or "".
std::string sweep_mla_skip_note(const ModelConfig& c, const std::string& model_path);
// Streaming eviction (K/V fp32): window and H2O (never compacted, and compacted always) at
// budgets 16, 32, 64, 128 in the run's block size.
std::vector<EvictionRunOptions> sweep_evictions(int block_size);
// Variants run after the fp32 reference: formats + MLA ranks + eviction points.
int sweep_num_variants(const ModelConfig& c);
// Every variant the sweep runs, by name, in order, on one line (part of its disk cache key).
std::string sweep_variants_text(const ModelConfig& c, int block_size);
// The eval windows: one per story of `text_path` (each cut to at most seq_len and at most
// `max_tokens` tokens), whole windows until at least `max_tokens` tokens are taken. A text read as
// one document (SmolLM2's tokenizer) gives one window of its first `max_tokens` tokens.
std::vector<std::vector<int>> quality_eval_windows(const Tokenizer& tokenizer,
                                                   const std::string& text_path, int seq_len,
                                                   long max_tokens);

// ---- points ----

QualityPoint format_point(const QualityReport& r);
QualityPoint mla_point(const QualityReport& r, int rank);
QualityPoint eviction_point(const QualityReport& r, const EvictionRunOptions& o,
                            double peak_bytes_per_context_token);

// ---- CSV ----

// Reads a sweep CSV written by `kvscope eval format-sweep`, `mla-sweep` or `evict-sweep`, told
// apart by the header. Throws kvscope::Error naming the file, line and column, the bad value and
// what was expected.
QualitySweep load_sweep_csv(const std::string& path);
// Merges `from` into `into`: a point with the same series and label replaces the old one, others
// are appended; the CSV names are appended to `into.loaded`.
void merge_sweep(QualitySweep& into, const QualitySweep& from);

}  // namespace kvscope::ui
