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

// The fp32-cache run's rows for the current query, kept until the quantized run compares.
class ExactRows final : public AttentionObserver {
 public:
  ExactRows(int n_layers, int n_heads, int max_pos, AttentionObserver* next)
      : n_heads_(n_heads),
        max_pos_(max_pos),
        rows_(static_cast<std::size_t>(n_layers) * static_cast<std::size_t>(n_heads) *
              static_cast<std::size_t>(max_pos)),
        len_(static_cast<std::size_t>(n_layers) * static_cast<std::size_t>(n_heads), 0),
        next_(next) {}
  void on_attention(int layer, int head, int query_pos, std::span<const float> w) override {
    const std::size_t lh = row_index(layer, head);
    const std::size_t n = std::min(w.size(), static_cast<std::size_t>(max_pos_));
    std::copy(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n),
              rows_.begin() + static_cast<std::ptrdiff_t>(lh * static_cast<std::size_t>(max_pos_)));
    len_[lh] = n;
    if (next_ != nullptr) next_->on_attention(layer, head, query_pos, w);
  }
  std::span<const float> row(int layer, int head) const {
    const std::size_t lh = row_index(layer, head);
    return {rows_.data() + lh * static_cast<std::size_t>(max_pos_), len_[lh]};
  }

 private:
  std::size_t row_index(int layer, int head) const {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(n_heads_) +
           static_cast<std::size_t>(head);
  }

  int n_heads_;
  int max_pos_;
  std::vector<float> rows_;       // [n_layers][n_heads][max_pos] the current query's weights
  std::vector<std::size_t> len_;  // [n_layers][n_heads] valid weights of each row
  AttentionObserver* next_;
};

// The quantized-cache run's rows, compared with the exact run's row of the same query.
class RowDistance final : public AttentionObserver {
 public:
  RowDistance(const ExactRows& exact, KvErrorProfile& profile, AttentionObserver* next)
      : exact_(exact), profile_(profile), next_(next) {}
  void on_attention(int layer, int head, int query_pos, std::span<const float> w) override {
    const std::span<const float> ref = exact_.row(layer, head);
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
  ExactRows exact_rows(c.n_layers, c.n_heads, std::max(1, n), hooks.exact_observer);
  RowDistance distance(exact_rows, p, hooks.quantized_observer);
  for (int pos = 0; pos < n; ++pos) {
    if (hooks.cancelled && hooks.cancelled()) return std::nullopt;
    const int token = tokens[static_cast<std::size_t>(pos)];
    exact.step(transformer, token, &exact_rows);
    quantized.step(transformer, token, &distance);
    const KvSeqView into = round_trip.append();
    copy_token_kv(exact.view(), pos, into);
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
