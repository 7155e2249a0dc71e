// Sparse attention by token selection (DeepSeek Sparse Attention, Quest): the whole KV cache is
// kept, and each query head attends only to the keys a selector picks from it. Unlike eviction
// nothing is lost for good: a key skipped by one query can be picked by the next.
//
// The seam: a KvSeqView may carry a KeySelector. Attention computes every live slot's score, hands
// the row to the selector, which sets the scores of the slots the query does not attend to -inf;
// softmax and the value sum then run as for dense attention. A selector that keeps every slot
// leaves the row untouched, so the result is dense attention's, bit for bit.
//
// Four selectors (docs/concepts/sparse-attention.md):
// - oracle: the query's true top-k scores. The upper bound on what any indexer can pick; it reads
//   every key to find them, so it saves no reads: it measures what selection itself costs.
// - quest: whole KV blocks by Quest's bound. Each block keeps the per-channel minimum and maximum
//   of its keys; a query's bound for the block, sum_i max(q_i min_i, q_i max_i) / sqrt(d), is at
//   least the score of every key in it. Blocks are taken by bound, highest first, while their keys
//   fit the budget.
// - proxy: a low-dimensional indexer in the spirit of DSA's lightning indexer, derived from the
//   model's own weights (no training): per layer and KV head, the r/2 RoPE pairs whose rows of W_q
//   and W_k have the largest product of Frobenius norms (summed over the group's query heads) are
//   the indexer's channels; the proxy score of a key is q . k over those r channels only (RoPE
//   rotates each pair as a unit, so this is exactly those channels' share of the true score).
//   The top-k keys by proxy score are attended.
// - sparq: SparQ Attention's first step (Ribar et al., 2023), query-aware and training-free: the r
//   channels where this query head's |q_i| is largest, then the top-k keys by q . k over those
//   channels. Each query head reads its own channels of every key.
// Sinks (the first S slots) and a recent window (the last R, the query's own slot among them) can
// be forced in; they count against the budget k. The first L layers can be left dense.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/config.h"
#include "engine/kv/kv_view.h"

namespace kvscope {

struct Weights;  // engine/model/checkpoint.h

// One query head's selection: its view, layer, head, KV head and q [head_dim] (RoPE applied).
struct SelectionQuery {
  const KvSeqView* view = nullptr;
  int layer = 0;
  int head = 0;
  int kv_head = 0;
  const float* q = nullptr;
  int head_dim = 0;
};

// What attention calls. `scores` [view.num_slots]: q . k / sqrt(head_dim) for live slots, -inf
// for evicted ones. The selector sets to -inf the score of every slot the query skips. Called
// concurrently for distinct heads of one layer (the CPU backend splits heads over threads).
class KeySelector {
 public:
  virtual ~KeySelector() = default;
  virtual void select(const SelectionQuery& query, std::span<float> scores) = 0;
};

enum class SelectorKind { kOracle, kQuest, kProxy, kSparq };
const char* selector_kind_name(SelectorKind kind);
// "oracle" | "quest" | "proxy" | "sparq"; throws Error(flag, ...) naming the choices otherwise.
SelectorKind parse_selector_kind(const std::string& text, const std::string& flag);

struct SparseOptions {
  SelectorKind selector = SelectorKind::kOracle;
  int topk = 64;         // keys each query head attends to (forced ones included)
  int sinks = 0;         // first slots always attended
  int recent = 0;        // last slots always attended (the query's own slot is the last)
  int proxy_dims = 16;   // proxy: indexer channels per KV head (even, <= head_dim)
  int dense_layers = 0;  // the first layers attend every key (Quest leaves its first two dense)
  bool operator==(const SparseOptions&) const = default;
};

// "oracle k=64", "quest k=64 sinks=4", ...
std::string sparse_variant_name(const SparseOptions& o);
// The settings validate() names in its errors (their where()), in the engine's words; a caller
// that knows which flag or JSON key carried one puts that in its place (setting_source.h).
inline constexpr std::string_view kSparseTopk = "sparse attention's k";
inline constexpr std::string_view kSparseSinks = "sparse attention's sinks";
inline constexpr std::string_view kSparseRecent = "sparse attention's recent keys";
inline constexpr std::string_view kSparseDenseLayers = "sparse attention's dense layers";
inline constexpr std::string_view kSparseProxyDims = "sparse attention's indexer channels";
// Throws Error(setting, ...) for k < 1, quest's k below the block size (it takes whole blocks: a
// smaller budget fits none), negative sinks/recent, dense layers outside [0, layers], or proxy
// dims odd / out of range.
void validate(const SparseOptions& o, const ModelConfig& c, int block_size);

// ---- the selection rules (pure functions, unit-tested on hand-built patterns) ----

// The `k` best slots among `candidates` by `rank` (higher first; equal ranks: the lower slot), in
// slot order.
std::vector<int> top_slots(std::span<const float> rank, std::span<const int> candidates, int k);
// Quest's upper bound on q . k / sqrt(d) for any key whose channels lie in [mins, maxs].
float quest_bound(const float* q, const float* mins, const float* maxs, int d);
// The blocks Quest takes: in bound order (highest first; equal bounds: the lower block) while the
// running sum of `sizes` stays within `budget`; stops at the first block that does not fit. In
// block order.
std::vector<int> quest_blocks(std::span<const float> bounds, std::span<const int> sizes,
                              int budget);
// The proxy indexer's channels: for each [layer][kv head] the dims of the r/2 RoPE pairs (2p,
// 2p + 1) with the largest ||W_q pair|| * ||W_k pair|| summed over the group's query heads (equal:
// the lower pair; the score is MLA's rope_pair_norms), in dim order. Reads the fp32 weights.
std::vector<std::vector<int>> proxy_channels(const ModelConfig& c, const Weights& w, int dims);
// What a SparseSelector for `o` needs from the weights: proxy_channels() for the proxy selector,
// nothing for the others.
std::vector<std::vector<int>> selector_channels(const ModelConfig& c, const Weights& w,
                                                const SparseOptions& o);

// What a selector did, summed over the queries it served (each a token: every layer, every head).
// Counts, not bytes: the caller prices them in its cache's format.
struct SparseStats {
  long queries = 0;
  double keys_attended = 0.0;    // sum over layers x query heads of the keys attended
  double keys_dense = 0.0;       // ... of the live keys dense attention attends
  double keys_read = 0.0;        // sum over layers x KV heads of the union of the group's picks
  double keys_dense_read = 0.0;  // ... of the live keys (what dense attention reads)
  double indexer_macs = 0.0;     // multiply-adds the selector spent choosing
  double indexer_elems = 0.0;    // key-format elements it read to choose (bounds, channels, keys)
  SparseStats& operator+=(const SparseStats& o);
};

// A KeySelector for one sequence of a model: one query (a token, all layers) at a time.
// begin_query(n) before the token's forward pass, end_query() after it; between them each
// (layer, head) is selected once. Keeps each head's picks of the current query (picked()), for
// counting what a GQA group reads and for the UI.
class SparseSelector final : public KeySelector {
 public:
  // `channels`: proxy_channels() of the model, for the proxy selector (ignored otherwise). The
  // options must pass validate() for the views' block size. `record` false: a selector for any
  // number of queries and sequences at once (the Simulator's steps: a prefill chunk's queries, many
  // sequences), which keeps no picks and no counts (begin_query/end_query are not called).
  SparseSelector(const ModelConfig& c, const SparseOptions& o,
                 std::vector<std::vector<int>> channels = {}, bool record = true);
  void begin_query(int num_slots);
  void select(const SelectionQuery& query, std::span<float> scores) override;
  // Adds the query's counts to stats(). Throws InternalError if a (layer, head) went unselected.
  void end_query();
  // The current query's picks for (layer, head): 1 where it attends [num_slots].
  std::span<const std::uint8_t> picked(int layer, int head) const;
  const SparseStats& stats() const { return stats_; }
  const SparseOptions& options() const { return o_; }

 private:
  std::uint8_t* row(int layer, int head);
  ModelConfig c_;
  SparseOptions o_;
  bool record_ = true;
  std::vector<std::vector<int>> channels_;  // [layer * kv_heads + kv_head]
  int n_ = 0;
  // Per query: [layers][heads][n_] picks; per (layer, head): selected yet, its live keys and what
  // its indexer cost (0 when every live key was attended and no indexer ran).
  std::vector<std::uint8_t> picks_;
  std::vector<std::uint8_t> selected_;
  std::vector<int> live_;
  std::vector<double> indexer_macs_, indexer_elems_;
  SparseStats stats_;
};

}  // namespace kvscope
