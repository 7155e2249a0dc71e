// CacheBlend: chunks prefilled alone, reused by concatenation, a share of tokens recomputed.
#include "engine/analysis/cache_blend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "engine/common/error.h"
#include "engine/common/log_softmax.h"
#include "engine/quant/kv_codec.h"

namespace kvscope {
namespace {

std::size_t sz(long v) {
  return static_cast<std::size_t>(v);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Appends the context's slots to `seq` (which must be empty) and returns its view over them.
KvSeqView context_slots(SoloSequence& seq, int context_tokens) {
  if (seq.size() != 0) {
    throw InternalError("cache blend", "the sequence already holds " + std::to_string(seq.size()) +
                                           " tokens; a context needs an empty one");
  }
  for (int s = 0; s < context_tokens; ++s) seq.append();
  return seq.view();
}

// K then V of `layer` for slots [0, n), each row kv_dim floats: [n][2][kv_dim].
std::vector<float> read_kv_rows(const KvSeqView& view, int layer, int n, const ModelConfig& c) {
  const int hd = c.head_dim(), kv_dim = c.kv_dim();
  std::vector<float> out(sz(n) * 2 * sz(kv_dim));
  std::vector<float> tmp(sz(hd));
  const quant::TileReader readers[] = {{view, layer, KvKind::kKey}, {view, layer, KvKind::kValue}};
  for (int s = 0; s < n; ++s) {
    for (int kind = 0; kind < 2; ++kind) {
      float* row = out.data() + (sz(s) * 2 + sz(kind)) * sz(kv_dim);
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const float* head = readers[kind].head(s, h, tmp.data());
        std::copy_n(head, hd, row + sz(h) * sz(hd));
      }
    }
  }
  return out;
}

// Copies every layer's K and V tiles of the first `tokens` slots from `from` to `to`, which hold
// the same layout (the blocks a cache copy would share, copied instead so each row runs alone).
void copy_cache(SoloSequence& from, SoloSequence& to, int tokens) {
  KvStorage& src = *from.cache().storage();
  KvStorage& dst = *to.cache().storage();
  const KvLayout& L = src.layout();
  if (src.on_device() || dst.on_device()) {
    throw Error("cache blend",
                "the pool lives in a device backend's memory; run on the CPU backend");
  }
  const KvSeqView a = from.view(), b = to.view();
  const int blocks = (tokens + L.block_size - 1) / L.block_size;
  for (int l = 0; l < L.n_layers; ++l) {
    for (const KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      for (int i = 0; i < blocks; ++i) {
        std::memcpy(dst.tile(l, kind, b.blocks[sz(i)]), src.tile(l, kind, a.blocks[sz(i)]),
                    L.tile_bytes(kind));
      }
    }
  }
}

// The keys of every chunk after the first re-rotated from positions 0.. to their place.
void rotate_into_place(Transformer& t, SoloSequence& seq, std::span<const int> starts,
                       int context_tokens) {
  rotate_chunks_into_place(t, *seq.cache().storage(), seq.view(), starts, context_tokens);
}

// The chunks alone, without the re-rotation (prefill_chunks_alone's first half).
void prefill_chunks_unrotated(Transformer& t, SoloSequence& seq, std::span<const int> context,
                              std::span<const int> starts) {
  prefill_chunks_in_place(t, context_slots(seq, static_cast<int>(context.size())), context, starts);
}

// log softmax of each continuation prediction: rows [continuation - 1][vocab].
std::vector<double> continuation_log_probs(Transformer& t, SoloSequence& seq,
                                           std::span<const int> continuation) {
  const auto vocab = sz(t.config().vocab_size);
  const int scored = static_cast<int>(continuation.size()) - 1;
  std::vector<double> out(sz(scored) * vocab);
  const int first = seq.size();
  seq.run(t, continuation, [&](int pos, std::span<const float> logits) {
    const int i = pos - first;
    if (i < scored) log_softmax(logits, std::span<double>(out.data() + sz(i) * vocab, vocab));
  });
  return out;
}

}  // namespace

void validate(const BlendOptions& o, const ModelConfig& c, int context_tokens) {
  if (o.chunks < 1 || o.chunks > context_tokens) {
    fail_expected("blend chunks",
                  "1 to the context's " + std::to_string(context_tokens) +
                      " tokens (each chunk holds at least one)",
                  std::to_string(o.chunks));
  }
  check_blend_layer(o.check_layer, c, "blend check layer");
}

void check_blend_layer(int check_layer, const ModelConfig& c, const std::string& where) {
  if (check_layer < 0 || check_layer >= c.n_layers - 1) {
    fail_expected(where,
                  "a layer from 0 to " + std::to_string(c.n_layers - 2) + " (the model has " +
                      std::to_string(c.n_layers) + " layers; some must run after the check)",
                  std::to_string(check_layer));
  }
}

void check_blend_percent(int percent, const std::string& where) {
  if (percent < 0 || percent > 100)
    fail_expected(where, "a percentage from 0 to 100", std::to_string(percent));
}

std::vector<int> chunk_starts(int context_tokens, int chunks) {
  if (chunks < 1 || chunks > context_tokens) {
    throw InternalError("cache blend", std::to_string(chunks) + " chunks of " +
                                           std::to_string(context_tokens) + " tokens");
  }
  std::vector<int> starts;
  const int base = context_tokens / chunks, longer = context_tokens % chunks;
  int at = 0;
  for (int i = 0; i < chunks; ++i) {
    starts.push_back(at);
    at += base + (i < longer ? 1 : 0);
  }
  return starts;
}

int recompute_count(int context_tokens, int percent) {
  return static_cast<int>(std::lround(static_cast<double>(percent) * context_tokens / 100.0));
}

std::vector<int> pick_largest(std::span<const double> deviation, int count) {
  std::vector<int> order(deviation.size());
  std::iota(order.begin(), order.end(), 0);
  const auto k = std::min(sz(std::max(count, 0)), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                    [&](int a, int b) {
                      const double da = deviation[sz(a)], db = deviation[sz(b)];
                      return da != db ? da > db : a < b;
                    });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

void prefill_chunks_in_place(Transformer& t, const KvSeqView& base, std::span<const int> context,
                             std::span<const int> starts) {
  const int n = static_cast<int>(context.size());
  if (base.num_slots < n || starts.empty() || starts.front() != 0) {
    throw InternalError("cache blend", "chunks of " + std::to_string(n) + " tokens in a view of " +
                                           std::to_string(base.num_slots) + " slots");
  }
  std::vector<std::uint8_t> live(sz(n), 0);
  KvSeqView masked = base;
  masked.slot_live = live.data();
  std::vector<StepToken> step;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const int begin = starts[i], end = i + 1 < starts.size() ? starts[i + 1] : n;
    std::fill(live.begin(), live.end(), 0);
    std::fill(live.begin() + begin, live.begin() + end, 1);
    step.clear();
    add_chunk(step, masked, begin, context.subspan(sz(begin), sz(end - begin)), 0);
    t.forward_step(step);
  }
}

void rotate_chunks_into_place(Transformer& t, KvStorage& storage, const KvSeqView& view,
                              std::span<const int> starts, int context_tokens) {
  const int bs = view.block_size();
  std::vector<KvKeyRotation> rotations;
  for (std::size_t i = 1; i < starts.size(); ++i) {
    const int end = i + 1 < starts.size() ? starts[i + 1] : context_tokens;
    for (int s = starts[i]; s < end; ++s)
      rotations.push_back({view.blocks[sz(s / bs)], s % bs, starts[i]});
  }
  if (!rotations.empty()) t.backend().rotate_keys(storage, rotations, t.config().rope_theta);
}

void prefill_chunks_alone(Transformer& t, SoloSequence& seq, std::span<const int> context,
                          std::span<const int> starts) {
  prefill_chunks_unrotated(t, seq, context, starts);
  rotate_into_place(t, seq, starts, static_cast<int>(context.size()));
}

void prefill_full(Transformer& t, SoloSequence& seq, std::span<const int> context) {
  const int n = static_cast<int>(context.size());
  std::vector<StepToken> tokens;
  add_chunk(tokens, context_slots(seq, n), 0, context, 0);
  t.forward_step(tokens);
}

BlendPass blend_recompute(Transformer& t, HostStep& step, SoloSequence& seq,
                          std::span<const int> context, int check_layer, int count) {
  return blend_recompute_in(t, step, seq.view(), context, check_layer, count);
}

BlendPass blend_recompute_in(Transformer& t, HostStep& step, const KvSeqView& base,
                             std::span<const int> context, int check_layer, int count) {
  const ModelConfig& c = t.config();
  const int n = static_cast<int>(context.size());
  if (base.num_slots < n || check_layer < 0 || check_layer >= c.n_layers - 1 || count < 0 ||
      count > n) {
    throw InternalError("cache blend", "recompute " + std::to_string(count) + " of " +
                                           std::to_string(n) + " tokens checked at layer " +
                                           std::to_string(check_layer) + " in a view of " +
                                           std::to_string(base.num_slots) + " slots");
  }
  const std::vector<float> reused = read_kv_rows(base, check_layer, n, c);
  std::vector<StepToken> tokens;
  add_chunk(tokens, base, 0, context, 0);
  BlendPass pass;
  const StepNarrowing narrow =
      [&](int layer, std::span<const StepToken> live) -> std::optional<std::vector<int>> {
    if (layer != check_layer) return std::nullopt;
    if (live.size() != sz(n))
      throw InternalError("cache blend", "a step narrowed before its check layer");
    const std::vector<float> fresh = read_kv_rows(base, check_layer, n, c);
    const std::size_t row = 2 * sz(c.kv_dim());
    pass.deviation.assign(sz(n), 0.0);
    for (std::size_t s = 0; s < sz(n); ++s) {
      double d = 0.0;
      for (std::size_t i = s * row; i < (s + 1) * row; ++i) {
        const double e = static_cast<double>(fresh[i]) - reused[i];
        d += e * e;
      }
      pass.deviation[s] = d;
    }
    pass.recomputed = pick_largest(pass.deviation, count);
    return pass.recomputed;
  };
  step.run_narrowing(t.backend(), t.model(), tokens, narrow);
  return pass;
}

std::string blend_method_name(BlendRow::Method m) {
  switch (m) {
    case BlendRow::Method::kReuse:
      return "reuse";
    case BlendRow::Method::kBlend:
      return "blend";
    case BlendRow::Method::kFull:
      return "full";
  }
  return "blend";
}

BlendReport evaluate_blend(Transformer& t, std::span<const BlendSample> samples,
                           const BlendOptions& options, std::span<const int> percents,
                           const ProgressFn& progress) {
  const ModelConfig& c = t.config();
  BlendReport report;
  report.options = options;
  for (const int p : percents) {
    check_blend_percent(p, "blend recompute percent");
    BlendRow row;
    row.method = p == 0 ? BlendRow::Method::kReuse : BlendRow::Method::kBlend;
    row.recompute_percent = p;
    report.rows.push_back(row);
  }
  BlendRow full;
  full.method = BlendRow::Method::kFull;
  full.recompute_percent = 100;
  report.rows.push_back(full);
  for (BlendRow& r : report.rows) r.recomputed_per_chunk.assign(sz(options.chunks), 0);

  const KvLayout layout = kv_layout_for(c, options.block_size, 1, KvFormat{}, KvFormat{});
  HostStep step;
  const long total = static_cast<long>(samples.size()) * static_cast<long>(percents.size() + 2);
  long done = 0;
  const auto tick = [&] {
    ++done;
    if (progress) progress(done, total);
  };
  const auto vocab = sz(c.vocab_size);
  for (const BlendSample& sample : samples) {
    const int n = static_cast<int>(sample.context.size());
    const int cap = n + static_cast<int>(sample.continuation.size());
    validate(options, c, n);
    if (sample.continuation.size() < 2) {
      throw InternalError("cache blend", "a sample's continuation has " +
                                             std::to_string(sample.continuation.size()) +
                                             " tokens; scoring needs two");
    }
    const std::vector<int> starts = chunk_starts(n, options.chunks);
    const auto chunk_of = [&](int s) {
      return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), s) -
                                      starts.begin() - 1);
    };
    const std::span<const int> targets(sample.continuation.data() + 1,
                                       sample.continuation.size() - 1);

    // The reference: the full prefill, then the continuation.
    SoloSequence reference(layout, cap);
    auto start = std::chrono::steady_clock::now();
    prefill_full(t, reference, sample.context);
    const double full_seconds = seconds_since(start);
    const std::vector<double> ref = continuation_log_probs(t, reference, sample.continuation);
    tick();
    // The chunks alone, as a cache would hold them (positions from 0 each).
    SoloSequence chunks(layout, cap);
    start = std::chrono::steady_clock::now();
    prefill_chunks_unrotated(t, chunks, sample.context, starts);
    report.chunk_prefill_seconds += seconds_since(start);
    tick();

    const bool first = report.samples == 0;
    if (first) report.first_starts = starts;
    for (std::size_t r = 0; r < report.rows.size(); ++r) {
      BlendRow& row = report.rows[r];
      row.context_tokens += n;
      std::vector<int> recomputed;
      std::span<const double> var = ref;
      std::vector<double> own;
      if (row.method == BlendRow::Method::kFull) {
        row.prefill_seconds += full_seconds;
        row.token_layers += static_cast<long>(n) * c.n_layers;
        recomputed.resize(sz(n));
        std::iota(recomputed.begin(), recomputed.end(), 0);
      } else {
        SoloSequence seq(layout, cap);
        context_slots(seq, n);
        copy_cache(chunks, seq, n);
        start = std::chrono::steady_clock::now();
        rotate_into_place(t, seq, starts, n);
        if (row.method == BlendRow::Method::kBlend) {
          const int count = recompute_count(n, row.recompute_percent);
          recomputed =
              blend_recompute(t, step, seq, sample.context, options.check_layer, count).recomputed;
          row.token_layers += static_cast<long>(n) * (options.check_layer + 1) +
                              static_cast<long>(count) * (c.n_layers - options.check_layer - 1);
        }
        row.prefill_seconds += seconds_since(start);
        own = continuation_log_probs(t, seq, sample.continuation);
        var = own;
        tick();
      }
      row.tokens_recomputed += static_cast<long>(recomputed.size());
      for (const int s : recomputed) ++row.recomputed_per_chunk[chunk_of(s)];
      for (std::size_t i = 0; i < targets.size(); ++i) {
        row.quality.add(std::span<const double>(ref.data() + i * vocab, vocab),
                        var.subspan(i * vocab, vocab), targets[i]);
      }
      if (first) report.first_recomputed.push_back(std::move(recomputed));
    }
    report.full_token_layers += static_cast<long>(n) * c.n_layers;
    ++report.samples;
  }
  return report;
}

}  // namespace kvscope
