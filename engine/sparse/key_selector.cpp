// The selectors of sparse attention and their bookkeeping.
#include "engine/sparse/key_selector.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/common/error.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/checkpoint.h"
#include "engine/quant/kv_codec.h"

namespace kvscope {

const char* selector_kind_name(SelectorKind kind) {
  switch (kind) {
    case SelectorKind::kOracle:
      return "oracle";
    case SelectorKind::kQuest:
      return "quest";
    case SelectorKind::kProxy:
      return "proxy";
    case SelectorKind::kSparq:
      return "sparq";
  }
  return "?";
}

SelectorKind parse_selector_kind(const std::string& text, const std::string& flag) {
  for (SelectorKind k :
       {SelectorKind::kOracle, SelectorKind::kQuest, SelectorKind::kProxy, SelectorKind::kSparq})
    if (text == selector_kind_name(k)) return k;
  fail_expected(flag, "oracle, quest, proxy or sparq", text);
}

std::string sparse_variant_name(const SparseOptions& o) {
  std::string name = selector_kind_name(o.selector);
  name.append(" k=").append(std::to_string(o.topk));
  if (o.selector == SelectorKind::kProxy || o.selector == SelectorKind::kSparq)
    name.append(" r=").append(std::to_string(o.proxy_dims));
  if (o.sinks > 0) name.append(" sinks=").append(std::to_string(o.sinks));
  if (o.recent > 0) name.append(" recent=").append(std::to_string(o.recent));
  if (o.dense_layers > 0) name.append(" dense=").append(std::to_string(o.dense_layers));
  return name;
}

void validate(const SparseOptions& o, const ModelConfig& c, int block_size) {
  const std::string topk(kSparseTopk);
  if (o.topk < 1) fail_expected(topk, "integers >= 1 (keys per query)", std::to_string(o.topk));
  if (o.selector == SelectorKind::kQuest && o.topk < block_size) {
    fail_expected(topk,
                  "at least the block size " + std::to_string(block_size) +
                      " for quest (it attends whole blocks)",
                  std::to_string(o.topk));
  }
  if (o.sinks < 0)
    fail_expected(std::string(kSparseSinks), "an integer >= 0", std::to_string(o.sinks));
  if (o.recent < 0)
    fail_expected(std::string(kSparseRecent), "an integer >= 0", std::to_string(o.recent));
  if (o.dense_layers < 0 || o.dense_layers > c.n_layers) {
    fail_expected(std::string(kSparseDenseLayers),
                  "an integer in [0, " + std::to_string(c.n_layers) + "] (the model's layers)",
                  std::to_string(o.dense_layers));
  }
  const int hd = c.head_dim();
  if (o.selector == SelectorKind::kProxy &&
      (o.proxy_dims < 2 || o.proxy_dims > hd || o.proxy_dims % 2 != 0)) {
    fail_expected(std::string(kSparseProxyDims),
                  "an even number in [2, " + std::to_string(hd) + "] (indexer channels per head)",
                  std::to_string(o.proxy_dims));
  }
  if (o.selector == SelectorKind::kSparq && (o.proxy_dims < 1 || o.proxy_dims > hd)) {
    fail_expected(std::string(kSparseProxyDims),
                  "an integer in [1, " + std::to_string(hd) + "] (channels each query reads)",
                  std::to_string(o.proxy_dims));
  }
}

std::vector<int> top_slots(std::span<const float> rank, std::span<const int> candidates, int k) {
  std::vector<int> order(candidates.begin(), candidates.end());
  const auto keep = static_cast<std::size_t>(std::clamp(k, 0, static_cast<int>(order.size())));
  auto better = [&](int a, int b) {
    const float ra = rank[static_cast<std::size_t>(a)], rb = rank[static_cast<std::size_t>(b)];
    return ra > rb || (ra == rb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                   better);
  order.resize(keep);
  std::sort(order.begin(), order.end());
  return order;
}

float quest_bound(const float* q, const float* mins, const float* maxs, int d) {
  // In double: the bound must not fall below a key's float score by rounding.
  double s = 0.0;
  for (int i = 0; i < d; ++i) {
    const double a = static_cast<double>(q[i]) * mins[i], b = static_cast<double>(q[i]) * maxs[i];
    s += std::max(a, b);
  }
  return static_cast<float>(s / std::sqrt(static_cast<double>(d)));
}

std::vector<int> quest_blocks(std::span<const float> bounds, std::span<const int> sizes,
                              int budget) {
  std::vector<int> order(bounds.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return bounds[static_cast<std::size_t>(a)] > bounds[static_cast<std::size_t>(b)];
  });
  std::vector<int> out;
  int used = 0;
  for (int b : order) {
    const int size = sizes[static_cast<std::size_t>(b)];
    if (used + size > budget) break;
    used += size;
    out.push_back(b);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int>> proxy_channels(const ModelConfig& c, const Weights& w, int dims) {
  std::vector<std::vector<int>> out;
  for (int l = 0; l < c.n_layers; ++l) {
    for (int g = 0; g < c.n_kv_heads; ++g) {
      std::vector<double> score(static_cast<std::size_t>(c.head_dim() / 2), 0.0);
      add_rope_pair_norms(c, w, l, g, score);
      std::vector<int> order(score.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
      });
      order.resize(static_cast<std::size_t>(dims / 2));
      std::sort(order.begin(), order.end());
      std::vector<int> channels;
      for (int p : order) {
        channels.push_back(2 * p);
        channels.push_back(2 * p + 1);
      }
      out.push_back(std::move(channels));
    }
  }
  return out;
}

std::vector<std::vector<int>> selector_channels(const ModelConfig& c, const Weights& w,
                                                const SparseOptions& o) {
  if (o.selector != SelectorKind::kProxy) return {};
  return proxy_channels(c, w, o.proxy_dims);
}

SparseStats& SparseStats::operator+=(const SparseStats& o) {
  queries += o.queries;
  keys_attended += o.keys_attended;
  keys_dense += o.keys_dense;
  keys_read += o.keys_read;
  keys_dense_read += o.keys_dense_read;
  indexer_macs += o.indexer_macs;
  indexer_elems += o.indexer_elems;
  return *this;
}

SparseSelector::SparseSelector(const ModelConfig& c, const SparseOptions& o,
                               std::vector<std::vector<int>> channels, bool record)
    : c_(c), o_(o), record_(record), channels_(std::move(channels)) {
  const auto heads = static_cast<std::size_t>(c_.n_layers) * c_.n_heads;
  if (o_.selector == SelectorKind::kProxy &&
      channels_.size() != static_cast<std::size_t>(c_.n_layers) * c_.n_kv_heads) {
    throw InternalError("SparseSelector", "proxy channels for " + std::to_string(channels_.size()) +
                                              " (layer, KV head) pairs");
  }
  selected_.assign(heads, 0);
  live_.assign(heads, 0);
  indexer_macs_.assign(heads, 0.0);
  indexer_elems_.assign(heads, 0.0);
}

void SparseSelector::begin_query(int num_slots) {
  n_ = num_slots;
  picks_.assign(selected_.size() * static_cast<std::size_t>(n_), 0);
  std::fill(selected_.begin(), selected_.end(), 0);
}

std::uint8_t* SparseSelector::row(int layer, int head) {
  return picks_.data() + (static_cast<std::size_t>(layer) * c_.n_heads + head) * n_;
}

std::span<const std::uint8_t> SparseSelector::picked(int layer, int head) const {
  return {picks_.data() + (static_cast<std::size_t>(layer) * c_.n_heads + head) * n_,
          static_cast<std::size_t>(n_)};
}

void SparseSelector::select(const SelectionQuery& query, std::span<float> scores) {
  const KvSeqView& v = *query.view;
  const int n = static_cast<int>(scores.size()), hd = query.head_dim;
  const std::size_t at = static_cast<std::size_t>(query.layer) * c_.n_heads + query.head;
  // Not recording: this call's own picks (threads select distinct heads concurrently).
  thread_local std::vector<std::uint8_t> own;
  std::uint8_t* pick = nullptr;
  if (record_) {
    if (n != n_ || selected_[at] != 0) {
      throw InternalError("SparseSelector", "layer " + std::to_string(query.layer) + " head " +
                                                std::to_string(query.head) + " selected over " +
                                                std::to_string(n) + " slots, query of " +
                                                std::to_string(n_) +
                                                (selected_[at] ? ", twice" : ""));
    }
    selected_[at] = 1;
    pick = row(query.layer, query.head);
  } else {
    own.assign(static_cast<std::size_t>(n), 0);
    pick = own.data();
  }
  std::vector<int> live;
  for (int t = 0; t < n; ++t)
    if (v.slot_live == nullptr || v.slot_live[t] != 0) live.push_back(t);
  // What the indexer spends (stored for end_query when recording; 0 when nothing is chosen).
  double macs = 0.0, elems = 0.0;
  if (record_) {
    live_[at] = static_cast<int>(live.size());
    indexer_macs_[at] = indexer_elems_[at] = 0.0;
  }
  // Every key fits, or a layer left dense: nothing to choose.
  if (static_cast<int>(live.size()) <= o_.topk || query.layer < o_.dense_layers) {
    for (int t : live) pick[t] = 1;
    return;
  }
  // Forced keys first: the first `sinks` and the last `recent` live slots.
  int forced = 0;
  auto force = [&](int t) {
    if (pick[t] == 0) ++forced;
    pick[t] = 1;
  };
  for (std::size_t i = 0; i < live.size() && static_cast<int>(i) < o_.sinks; ++i) force(live[i]);
  for (std::size_t i = 0; i < live.size() && static_cast<int>(i) < o_.recent; ++i)
    force(live[live.size() - 1 - i]);
  std::vector<int> candidates;
  for (int t : live)
    if (pick[t] == 0) candidates.push_back(t);
  const int budget = o_.topk - forced;
  const auto nlive = static_cast<double>(live.size());
  const quant::TileReader keys(v, query.layer, KvKind::kKey);
  std::vector<float> tmp(static_cast<std::size_t>(hd));
  if (budget > 0) {
    switch (o_.selector) {
      case SelectorKind::kOracle: {
        for (int t : top_slots(scores, candidates, budget)) pick[t] = 1;
        macs = nlive * hd;  // every score
        elems = nlive * hd;
        break;
      }
      case SelectorKind::kProxy:
      case SelectorKind::kSparq: {
        // proxy: the layer's and KV head's fixed channels; sparq: the query's r largest |q_i|
        // (equal: the lower channel). Then the top keys by q . k over those channels only.
        std::vector<int> ch;
        if (o_.selector == SelectorKind::kProxy) {
          ch = channels_[static_cast<std::size_t>(query.layer) * c_.n_kv_heads + query.kv_head];
        } else {
          std::vector<float> magnitude(static_cast<std::size_t>(hd));
          std::vector<int> dims(static_cast<std::size_t>(hd));
          for (int i = 0; i < hd; ++i) {
            magnitude[static_cast<std::size_t>(i)] = std::fabs(query.q[i]);
            dims[static_cast<std::size_t>(i)] = i;
          }
          ch = top_slots(magnitude, dims, o_.proxy_dims);
        }
        std::vector<float> rank(static_cast<std::size_t>(n), -INFINITY);
        for (int t : candidates) {
          const float* k = keys.head(t, query.kv_head, tmp.data());
          float s = 0.0f;
          for (int i : ch) s += query.q[i] * k[i];
          rank[static_cast<std::size_t>(t)] = s;
        }
        for (int t : top_slots(rank, candidates, budget)) pick[t] = 1;
        macs = nlive * static_cast<double>(ch.size());
        elems = nlive * static_cast<double>(ch.size());
        break;
      }
      case SelectorKind::kQuest: {
        const int bs = v.block_size(), nb = (n + bs - 1) / bs;
        std::vector<float> bounds(static_cast<std::size_t>(nb), -INFINITY);
        std::vector<int> sizes(static_cast<std::size_t>(nb), 0);
        std::vector<float> mins(static_cast<std::size_t>(hd)), maxs(static_cast<std::size_t>(hd));
        for (int b = 0; b < nb; ++b) {
          std::fill(mins.begin(), mins.end(), INFINITY);
          std::fill(maxs.begin(), maxs.end(), -INFINITY);
          bool any = false;
          for (int t = b * bs; t < std::min(n, (b + 1) * bs); ++t) {
            if (v.slot_live != nullptr && v.slot_live[t] == 0) continue;
            any = true;
            const float* k = keys.head(t, query.kv_head, tmp.data());
            for (int i = 0; i < hd; ++i) {
              mins[static_cast<std::size_t>(i)] = std::min(mins[static_cast<std::size_t>(i)], k[i]);
              maxs[static_cast<std::size_t>(i)] = std::max(maxs[static_cast<std::size_t>(i)], k[i]);
            }
            if (pick[t] == 0) ++sizes[static_cast<std::size_t>(b)];
          }
          // A block of forced or dead keys only has nothing left to pick: it ranks last.
          if (any && sizes[static_cast<std::size_t>(b)] > 0)
            bounds[static_cast<std::size_t>(b)] =
                quest_bound(query.q, mins.data(), maxs.data(), hd);
        }
        for (int b : quest_blocks(bounds, sizes, budget)) {
          for (int t = b * bs; t < std::min(n, (b + 1) * bs); ++t)
            if (v.slot_live == nullptr || v.slot_live[t] != 0) pick[t] = 1;
        }
        macs = 2.0 * nb * hd;  // q_i * min_i and q_i * max_i per channel
        elems = 2.0 * nb * hd;
        break;
      }
    }
  }
  if (record_) {
    indexer_macs_[at] = macs;
    indexer_elems_[at] = elems;
  }
  if (std::find(pick, pick + n, 1) == pick + n) {
    throw InternalError("SparseSelector", std::string(selector_kind_name(o_.selector)) +
                                              " picked no key of " + std::to_string(live.size()) +
                                              " with k " + std::to_string(o_.topk));
  }
  for (int t = 0; t < n; ++t)
    if (pick[t] == 0) scores[static_cast<std::size_t>(t)] = -INFINITY;
}

void SparseSelector::end_query() {
  const int group = c_.gqa_group();
  for (int l = 0; l < c_.n_layers; ++l) {
    for (int g = 0; g < c_.n_kv_heads; ++g) {
      int union_count = 0;
      for (int t = 0; t < n_; ++t) {
        bool any = false;
        for (int h = g * group; h < (g + 1) * group && !any; ++h) any = picked(l, h)[t] != 0;
        union_count += any ? 1 : 0;
      }
      stats_.keys_read += union_count;
      const std::size_t first = static_cast<std::size_t>(l) * c_.n_heads + g * group;
      stats_.keys_dense_read += live_[first];
      // The indexer reads its keys (or bounds) once for the group; each head computes its own.
      // SparQ's heads each read their own channels.
      if (o_.selector != SelectorKind::kSparq) stats_.indexer_elems += indexer_elems_[first];
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const std::size_t at = static_cast<std::size_t>(l) * c_.n_heads + h;
        if (o_.selector == SelectorKind::kSparq) stats_.indexer_elems += indexer_elems_[at];
        if (selected_[at] == 0) {
          throw InternalError("SparseSelector", "layer " + std::to_string(l) + " head " +
                                                    std::to_string(h) + " was never selected");
        }
        const std::span<const std::uint8_t> p = picked(l, h);
        stats_.keys_attended += static_cast<double>(std::count(p.begin(), p.end(), 1));
        stats_.keys_dense += live_[at];
        stats_.indexer_macs += indexer_macs_[at];
      }
    }
  }
  ++stats_.queries;
}

}  // namespace kvscope
