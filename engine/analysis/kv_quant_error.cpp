// Per-position KV quantization error: storage round trip of the exact K/V and attention-row total
// variation between an fp32-cache run and a quantized-cache run of the same tokens.
#include "engine/analysis/kv_quant_error.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/common/error.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/cache_manager.h"
#include "engine/kv/kv_storage.h"
#include "engine/quant/kv_codec.h"

namespace kvscope {

void copy_token_kv(const KvSeqView& src, int slot, const KvSeqView& dst) {
  const KvLayout& sl = src.storage->layout();
  const KvLayout& dl = dst.storage->layout();
  if (sl.n_layers != dl.n_layers || sl.kv_heads != dl.kv_heads || sl.head_dim != dl.head_dim)
    fail_expected("copy_token_kv", "two caches of one model's K/V shape",
                  std::to_string(sl.n_layers) + "x" + std::to_string(sl.kv_heads) + "x" +
                      std::to_string(sl.head_dim) + " vs " + std::to_string(dl.n_layers) + "x" +
                      std::to_string(dl.kv_heads) + "x" + std::to_string(dl.head_dim));
  const auto hd = static_cast<std::size_t>(sl.head_dim);
  std::vector<float> row(static_cast<std::size_t>(sl.kv_heads) * hd);  // [kv_heads][head_dim]
  std::vector<float> tmp(hd);
  for (int layer = 0; layer < sl.n_layers; ++layer) {
    for (const KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      const quant::TileReader reader(src, layer, kind);
      for (int h = 0; h < sl.kv_heads; ++h) {
        const float* x = reader.head(slot, h, tmp.data());
        std::copy(x, x + hd, row.begin() + static_cast<std::ptrdiff_t>(h * hd));
      }
      quant::write_token(dst, layer, kind, row.data());
    }
  }
}

void relative_kv_error(const KvSeqView& exact, const KvSeqView& quantized, int layer, KvKind kind,
                       int n, std::span<float> out) {
  const KvLayout& el = exact.storage->layout();
  const int heads = el.kv_heads;
  const auto hd = static_cast<std::size_t>(el.head_dim);
  if (out.size() != static_cast<std::size_t>(heads) * static_cast<std::size_t>(n))
    fail_expected("relative_kv_error: out", std::to_string(heads * n) + " values",
                  std::to_string(out.size()));
  const quant::TileReader a(exact, layer, kind), b(quantized, layer, kind);
  std::vector<float> ta(hd), tb(hd);
  for (int h = 0; h < heads; ++h) {
    for (int s = 0; s < n; ++s) {
      const float* x = a.head(s, h, ta.data());
      const float* y = b.head(s, h, tb.data());
      double num = 0.0, den = 0.0;
      for (std::size_t i = 0; i < hd; ++i) {
        const double d = static_cast<double>(y[i]) - x[i];
        num += d * d;
        den += static_cast<double>(x[i]) * x[i];
      }
      const double e = den > 0.0 ? std::sqrt(num / den) : (num > 0.0 ? 1.0 : 0.0);
      out[static_cast<std::size_t>(h) * static_cast<std::size_t>(n) + static_cast<std::size_t>(s)] =
          static_cast<float>(e);
    }
  }
}

double total_variation(std::span<const float> p, std::span<const float> q) {
  if (p.size() != q.size())
    fail_expected("total_variation", "two rows of one length",
                  std::to_string(p.size()) + " and " + std::to_string(q.size()));
  double sum = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) sum += std::fabs(static_cast<double>(p[i]) - q[i]);
  return 0.5 * sum;
}

namespace {

// The fp32-cache run's rows for the queries of the current chunk (positions first .. first +
// chunk - 1), kept until the quantized run compares.
class ExactRows final : public AttentionObserver {
 public:
  ExactRows(int n_layers, int n_heads, int max_pos, int chunk, AttentionObserver* next)
      : n_layers_(n_layers),
        n_heads_(n_heads),
        max_pos_(max_pos),
        chunk_(chunk),
        rows_(static_cast<std::size_t>(chunk) * static_cast<std::size_t>(n_layers) *
              static_cast<std::size_t>(n_heads) * static_cast<std::size_t>(max_pos)),
        len_(static_cast<std::size_t>(chunk) * static_cast<std::size_t>(n_layers) *
                 static_cast<std::size_t>(n_heads),
             0),
        next_(next) {}
  // The next chunk's queries start at position `first`.
  void begin(int first) {
    first_ = first;
    std::fill(len_.begin(), len_.end(), 0);
  }
  void on_attention(int layer, int head, int query_pos, std::span<const float> w) override {
    if (const std::size_t i = row_index(layer, head, query_pos); i != kNone) {
      const std::size_t n = std::min(w.size(), static_cast<std::size_t>(max_pos_));
      std::copy(
          w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n),
          rows_.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(max_pos_)));
      len_[i] = n;
    }
    if (next_ != nullptr) next_->on_attention(layer, head, query_pos, w);
  }
  // The row of query_pos (empty when it is not in the chunk).
  std::span<const float> row(int layer, int head, int query_pos) const {
    const std::size_t i = row_index(layer, head, query_pos);
    if (i == kNone) return {};
    return {rows_.data() + i * static_cast<std::size_t>(max_pos_), len_[i]};
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::size_t row_index(int layer, int head, int query_pos) const {
    const int q = query_pos - first_;
    if (q < 0 || q >= chunk_) return kNone;
    return (static_cast<std::size_t>(q) * static_cast<std::size_t>(n_layers_) +
            static_cast<std::size_t>(layer)) *
               static_cast<std::size_t>(n_heads_) +
           static_cast<std::size_t>(head);
  }

  int n_layers_, n_heads_;
  int max_pos_;
  int chunk_;
  int first_ = 0;
  std::vector<float> rows_;       // [chunk][n_layers][n_heads][max_pos] the chunk's weights
  std::vector<std::size_t> len_;  // [chunk][n_layers][n_heads] valid weights of each row
  AttentionObserver* next_;
};

// The quantized-cache run's rows, compared with the exact run's row of the same query.
class RowDistance final : public AttentionObserver {
 public:
  RowDistance(const ExactRows& exact, KvErrorProfile& profile, AttentionObserver* next)
      : exact_(exact), profile_(profile), next_(next) {}
  void on_attention(int layer, int head, int query_pos, std::span<const float> w) override {
    const std::span<const float> ref = exact_.row(layer, head, query_pos);
    if (query_pos >= 0 && query_pos < profile_.positions && ref.size() == w.size()) {
      profile_.attention_tv[profile_.tv_index(layer, head, query_pos)] =
          static_cast<float>(total_variation(ref, w));
    }
    if (next_ != nullptr) next_->on_attention(layer, head, query_pos, w);
  }

 private:
  const ExactRows& exact_;
  KvErrorProfile& profile_;
  AttentionObserver* next_;
};

}  // namespace

std::optional<KvErrorProfile> measure_kv_error(Transformer& transformer,
                                               std::span<const int> tokens, const KvFormat& k,
                                               const KvFormat& v, int block_size,
                                               const KvErrorHooks& hooks) {
  const ModelConfig& c = transformer.config();
  const int n = static_cast<int>(tokens.size());
  const KvFormat fp32;
  // exact: the reference run; quantized: the run in (k, v); round_trip: exact K/V stored in (k, v).
  SoloSequence exact(kv_layout_for(c, block_size, 1, fp32, fp32), std::max(1, n));
  SoloSequence quantized(kv_layout_for(c, block_size, 1, k, v), std::max(1, n));
  SoloSequence round_trip(kv_layout_for(c, block_size, 1, k, v), std::max(1, n));
  KvErrorProfile p;
  p.n_layers = c.n_layers;
  p.n_heads = c.n_heads;
  p.kv_heads = c.n_kv_heads;
  p.positions = n;
  p.k_format = k;
  p.v_format = v;
  const std::size_t kv_size = static_cast<std::size_t>(c.n_layers) *
                              static_cast<std::size_t>(c.n_kv_heads) * static_cast<std::size_t>(n);
  p.k_error.assign(kv_size, 0.0f);
  p.v_error.assign(kv_size, 0.0f);
  p.attention_tv.assign(static_cast<std::size_t>(c.n_layers) * static_cast<std::size_t>(c.n_heads) *
                            static_cast<std::size_t>(n),
                        0.0f);
  // kChunk positions per engine step for each run (SoloSequence::watch hands the observers each
  // query's rows in order): the exact run's rows of the chunk are kept, then the quantized run's
  // are compared with them.
  constexpr int kChunk = 8;
  ExactRows exact_rows(c.n_layers, c.n_heads, std::max(1, n), kChunk, hooks.exact_observer);
  RowDistance distance(exact_rows, p, hooks.quantized_observer);
  for (int first = 0; first < n; first += kChunk) {
    if (hooks.cancelled && hooks.cancelled()) return std::nullopt;
    const std::span<const int> chunk = tokens.subspan(
        static_cast<std::size_t>(first), static_cast<std::size_t>(std::min(kChunk, n - first)));
    exact_rows.begin(first);
    exact.watch(transformer, chunk, exact_rows, kChunk);
    quantized.watch(transformer, chunk, distance, kChunk);
    for (int pos = first; pos < first + static_cast<int>(chunk.size()); ++pos)
      copy_token_kv(exact.view(), pos, round_trip.append());
  }
  // Read back once every token is in: what the cache holds at the end of the sequence (a KIVI
  // group still open is full precision, so its positions read back exactly).
  const auto per_layer = static_cast<std::size_t>(c.n_kv_heads) * static_cast<std::size_t>(n);
  for (int layer = 0; layer < c.n_layers && n > 0; ++layer) {
    const std::size_t at = static_cast<std::size_t>(layer) * per_layer;
    relative_kv_error(exact.view(), round_trip.view(), layer, KvKind::kKey, n,
                      std::span<float>(p.k_error).subspan(at, per_layer));
    relative_kv_error(exact.view(), round_trip.view(), layer, KvKind::kValue, n,
                      std::span<float>(p.v_error).subspan(at, per_layer));
  }
  return p;
}

}  // namespace kvscope
