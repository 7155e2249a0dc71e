// Token eviction policies: given per-position attention statistics of one sequence and a budget,
// choose which cached positions to keep. Pure functions over plain data, so each policy can be
// tested on hand-built attention patterns and reused by the engine, the evaluator and the UI.
//
// kvscope evicts whole token positions (all layers and heads together), scoring each position by
// attention summed over layers and heads: a freed position frees its slot in every layer's tile,
// which is what returns paged blocks to the pool. Per-head variants only mask; see eviction.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

enum class EvictionKind { kNone, kWindow, kSinksWindow, kH2O, kSnapKV, kTova, kRandom };

struct EvictionConfig {
  EvictionKind kind = EvictionKind::kNone;
  int budget = 0;              // live tokens kept (the current token included)
  int sinks = 4;               // StreamingLLM: first positions always kept
  int recent = -1;             // H2O: recent window kept; -1 = budget / 2
  int observation_window = 8;  // SnapKV: last queries that vote
  int pool_kernel = 5;         // SnapKV: width of the average pooling over votes (odd)
  std::uint64_t seed = 1;      // random baseline
};

// The settings validate() names in its errors (their where()), in the engine's words; a caller
// that knows which flag or JSON key carried one puts that in its place (setting_source.h).
inline constexpr std::string_view kEvictionBudget = "eviction budget";
inline constexpr std::string_view kEvictionSinks = "sink tokens";
inline constexpr std::string_view kEvictionObservationWindow = "SnapKV observation window";
inline constexpr std::string_view kEvictionPoolKernel = "SnapKV pool kernel";

// What a token evictor needs of `config`, checked in this one place (the evictor, the scenario
// loader and the CLI's eviction flags all call it): nothing for kNone; otherwise a budget of at
// least 2 (the current token and one more), sinks >= 0 (sinks + window: fewer than budget - 1, so
// the window keeps two), an observation window >= 1 and an odd pool kernel. Throws
// kvscope::Error located at one of the settings above.
void validate(const EvictionConfig& config);

// What the policies may look at, one entry per live cached position (ascending positions).
struct TokenStats {
  std::vector<std::int32_t> positions;  // [live] original token positions, ascending
  std::vector<float> cumulative;        // [live] attention received so far (H2O)
  std::vector<float> last_query;        // [live] attention from the newest query (TOVA)
  std::vector<float> window_votes;      // [live] attention from the last queries (SnapKV)
};

// Returns indices into `stats` (ascending) of the positions to keep; all of them when the
// sequence fits the budget. The newest position is always kept.
std::vector<int> select_keep(const EvictionConfig& config, const TokenStats& stats, int call_index);

EvictionKind parse_eviction_kind(const std::string& name, const std::string& where);
std::string eviction_kind_name(EvictionKind kind);
std::vector<std::string> eviction_kind_names();

}  // namespace kvscope
