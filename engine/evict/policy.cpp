// The eviction policies: window, sinks + window, H2O, SnapKV, TOVA, random.
#include "engine/evict/policy.h"

#include <algorithm>
#include <numeric>

#include "engine/common/error.h"

namespace kvscope {
namespace {

// Keeps the `count` highest-scoring entries among `candidates` (ties: the more recent wins).
void keep_top(const std::vector<float>& score, std::vector<int>& candidates, int count,
              std::vector<int>& keep) {
  count = std::clamp(count, 0, static_cast<int>(candidates.size()));
  std::stable_sort(candidates.begin(), candidates.end(), [&](int a, int b) {
    const float sa = score[static_cast<std::size_t>(a)], sb = score[static_cast<std::size_t>(b)];
    return sa != sb ? sa > sb : a > b;
  });
  keep.insert(keep.end(), candidates.begin(), candidates.begin() + count);
}

std::vector<float> pooled(const std::vector<float>& votes, int kernel) {
  const int n = static_cast<int>(votes.size()), half = std::max(0, kernel / 2);
  std::vector<float> out(votes.size());
  for (int i = 0; i < n; ++i) {
    float sum = 0.0f;
    int count = 0;
    for (int j = std::max(0, i - half); j <= std::min(n - 1, i + half); ++j, ++count)
      sum += votes[static_cast<std::size_t>(j)];
    out[static_cast<std::size_t>(i)] = sum / static_cast<float>(count);
  }
  return out;
}

}  // namespace

std::vector<int> select_keep(const EvictionConfig& config, const TokenStats& stats,
                             int call_index) {
  const int n = static_cast<int>(stats.positions.size());
  std::vector<int> keep;
  if (config.kind == EvictionKind::kNone || n <= config.budget || config.budget <= 0) {
    keep.resize(static_cast<std::size_t>(n));
    std::iota(keep.begin(), keep.end(), 0);
    return keep;
  }
  const int budget = config.budget;
  auto keep_recent = [&](int count, int floor_index) {  // the last `count` entries >= floor_index
    for (int i = std::max(floor_index, n - count); i < n; ++i) keep.push_back(i);
  };
  std::vector<int> middle;
  switch (config.kind) {
    case EvictionKind::kNone:
      break;
    case EvictionKind::kWindow:
      keep_recent(budget, 0);
      break;
    case EvictionKind::kSinksWindow: {
      const int sinks = std::min(config.sinks, budget - 1);
      for (int i = 0; i < sinks; ++i) keep.push_back(i);
      keep_recent(budget - sinks, sinks);
      break;
    }
    case EvictionKind::kH2O: {
      const int recent = std::clamp(config.recent < 0 ? budget / 2 : config.recent, 1, budget);
      for (int i = 0; i < n - recent; ++i) middle.push_back(i);
      keep_top(stats.cumulative, middle, budget - recent, keep);
      keep_recent(recent, 0);
      break;
    }
    case EvictionKind::kSnapKV: {
      const int window = std::clamp(config.observation_window, 1, budget);
      for (int i = 0; i < n - window; ++i) middle.push_back(i);
      std::vector<float> votes = pooled(stats.window_votes, config.pool_kernel);
      keep_top(votes, middle, budget - window, keep);
      keep_recent(window, 0);
      break;
    }
    case EvictionKind::kTova: {
      // Drop the lowest current attention, keeping the newest token (it has no score yet).
      for (int i = 0; i < n - 1; ++i) middle.push_back(i);
      keep_top(stats.last_query, middle, budget - 1, keep);
      keep.push_back(n - 1);
      break;
    }
    case EvictionKind::kRandom: {
      // Seeded per call: a deterministic but uninformed baseline.
      std::uint64_t state =
          config.seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(call_index) + 1;
      std::vector<float> score(static_cast<std::size_t>(n));
      for (auto& s : score) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        s = static_cast<float>((state * 0x2545F4914F6CDD1Dull) >> 40);
      }
      for (int i = 0; i < n - 1; ++i) middle.push_back(i);
      keep_top(score, middle, budget - 1, keep);
      keep.push_back(n - 1);
      break;
    }
  }
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  return keep;
}

void validate(const EvictionConfig& c) {
  if (c.kind == EvictionKind::kNone) return;
  auto fail = [](std::string_view setting, const std::string& expected, int got) {
    fail_expected(std::string(setting), expected, std::to_string(got));
  };
  if (c.budget < 2) fail(kEvictionBudget, "an integer >= 2", c.budget);
  if (c.kind == EvictionKind::kSinksWindow && (c.sinks < 0 || c.sinks >= c.budget - 1)) {
    fail(kEvictionSinks,
         "an integer in [0, budget - 1) = [0, " + std::to_string(c.budget - 1) + ")", c.sinks);
  }
  if (c.sinks < 0) fail(kEvictionSinks, "an integer >= 0", c.sinks);
  if (c.observation_window < 1)
    fail(kEvictionObservationWindow, "an integer >= 1", c.observation_window);
  if (c.pool_kernel < 1 || c.pool_kernel % 2 == 0)
    fail(kEvictionPoolKernel, "an odd integer >= 1", c.pool_kernel);
}

std::vector<std::string> eviction_kind_names() {
  return {"none", "window", "sinks", "h2o", "snapkv", "tova", "random"};
}

std::string eviction_kind_name(EvictionKind kind) {
  return eviction_kind_names()[static_cast<std::size_t>(kind)];
}

EvictionKind parse_eviction_kind(const std::string& name, const std::string& where) {
  const auto names = eviction_kind_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<EvictionKind>(i);
  }
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  fail_expected(where, "an eviction policy (" + all + ")", "'" + name + "'");
}

}  // namespace kvscope
