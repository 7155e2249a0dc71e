// The CUDA backend's K/V writes and attention on device memory (cuda_backend_impl.h), shared by
// the op-level methods and run_step: a token's K and V into its pool in the pool's format (KIVI's
// open groups staged until they fill; MLA latents through MlaOnDevice), and a step's queries
// over their pools, in one batch launch when they can share one, capture rows included.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "engine/common/error.h"
#include "engine/mla/mla_codec.h"
#include "kernels/backend/cuda_backend_impl.h"

namespace kvscope {

// One token's K and V rows (device memory) into the view's write slot of `layer`, in the
// pool's format, through `table` (the view's block table on the device); an MLA view writes
// its latent and RoPE keys (its table staged by latent_sequence).
void CudaBackend::kv_write_on_device(const KvSeqView& view, int layer, const int* table,
                                     const float* dk, const float* dv) {
  DeviceKvMirror& p = pool(view, /*may_create=*/view.write_slot() == 0);
  const KvLayout& L = view.storage->layout();
  if (view.mla != nullptr) {  // the latent (and mode B's RoPE keys) instead of K and V
    mla_.write(*view.mla, layer, dk, dv, slot_position(view, view.write_slot()),
               latent_sequence(p, view, layer), view.write_slot());
    return;
  }
  auto [kt, vt] = p.layer(layer);
  // A KIVI kind's token joins its group's full-precision rows (the group is quantized into
  // the tiles when it fills); the other kinds are written and quantized now.
  if (L.k_format.is_kivi()) {
    stage_kivi(p, view, table, layer, KvKind::kKey, dk, kt);
    kt.base = nullptr;
  }
  if (L.v_format.is_kivi()) {
    stage_kivi(p, view, table, layer, KvKind::kValue, dv, vt);
    vt.base = nullptr;
  }
  if (kt.base != nullptr || vt.base != nullptr)
    ops_->kv_write(kt, vt, table, view.write_slot(), L.block_size, dk, dv, L.kv_heads, L.head_dim);
}

// KIVI: the token at the view's write slot into its group's rows on the device (a new entry
// when it opens the group); when it fills the group, the group is quantized into `tiles`.
void CudaBackend::stage_kivi(DeviceKvMirror& p, const KvSeqView& view, const int* table, int layer,
                             KvKind kind, const float* row, const device::DeviceTiles& tiles) {
  const KvLayout& L = view.storage->layout();
  const KvFormat& f = L.format(kind);
  const int R = f.residual, B = L.block_size, kv_dim = L.kv_heads * L.head_dim;
  const int slot = view.write_slot(), g0 = slot - slot % R;
  KiviOpenGroups& open = p.open_groups();
  const std::int64_t key = open.key(layer, kind, view, g0);
  const long at = slot % R == 0 ? open.take(key) : open.find(key);
  if (at < 0) {
    throw Error("kv cache", f.name() + " cannot continue the group starting at slot " +
                                std::to_string(g0) + " (layer " + std::to_string(layer) +
                                "): its full-precision staging does not exist (was the group "
                                "started in another sequence's block?)");
  }
  float* rows = open.base() + at;
  ops_->copy_on_device(rows + static_cast<long>(slot % R) * kv_dim, row,
                       static_cast<std::size_t>(kv_dim) * sizeof(float));
  if (slot % R == R - 1) {
    ops_->kivi_flush(tiles, kind == KvKind::kKey, table, g0, B, rows, kv_dim);
    open.give_back(key);
  }
}

CudaBackend::OpenGroup CudaBackend::open_group(const DeviceKvMirror& p, const KvSeqView& view,
                                               int layer, KvKind kind) const {
  const KvLayout& L = view.storage->layout();
  const KvFormat& f = L.format(kind);
  if (!f.is_kivi() || view.num_slots % f.residual == 0) return {view.num_slots, -1};
  const int start = view.num_slots - view.num_slots % f.residual;
  const long at = p.open_groups().find(p.open_groups().key(layer, kind, view, start));
  if (at < 0) {
    throw Error("kv cache", f.name() + ": no full-precision staging for the open group at slot " +
                                std::to_string(start) + " (layer " + std::to_string(layer) + ")");
  }
  return {start, at};
}

int CudaBackend::int_offset(long at) const {
  if (at > std::numeric_limits<int>::max())
    throw InternalError(flag_, "KIVI open-group arena past 2^31 floats");
  return static_cast<int>(at);
}

// The whole step's queries (dq, dout device memory, [queries][n_heads][head_dim]) in one
// launch of the batch kernel when they share a K/V pool and fit its one pass (every prefill
// chunk and decode step up to 4,096 slots, a lone decode query too: its block table and
// metadata then go up once per step, not once per layer); otherwise one by one (split-K past
// 4,096 slots; MLA latent caches).
void CudaBackend::attention_on_device(int layer, const AttentionShape& shape,
                                      std::span<const AttentionQuery> queries, const float* dq,
                                      float* dout) {
  const bool one_pool = std::all_of(queries.begin(), queries.end(), [&](const AttentionQuery& a) {
    return a.view.storage == queries.front().view.storage && a.view.mla == nullptr &&
           a.view.num_slots <= device::DeviceOps::batch_max_slots();
  });
  const std::size_t qn = static_cast<std::size_t>(shape.n_heads) * shape.head_dim;
  AttentionTiming* timing = attention_timing();
  if (timing != nullptr && (timing->layer != layer || timing->timed || timing->per_query))
    timing = nullptr;
  if (!one_pool) {
    if (timing != nullptr) timing->per_query = true;
    for (std::size_t i = 0; i < queries.size(); ++i)
      attend_on_device(queries[i], layer, shape, dq + i * qn, dout + i * qn);
    return;
  }
  DeviceKvMirror& p = pool(queries.front().view, /*may_create=*/false);
  const auto n = static_cast<int>(queries.size());
  const int* tables = stage_tables(queries, table_at_);
  const BatchExtent extent = fill_batch_metadata(p, layer, shape, queries);
  device::PagedBatchPool b;
  std::tie(b.k, b.v) = p.layer(layer);
  b.block_size = queries.front().view.block_size();
  b.kv_heads = shape.kv_heads;
  b.head_dim = shape.head_dim;
  // Every layer of a step has the same tables, slot counts and live maps: staged by the first.
  b.tables = tables;
  b.meta = batch_meta_.stage(*ops_, meta_host_);
  if (!live_host_.empty()) b.live = batch_live_.stage(*ops_, live_host_);
  b.staging = p.open_groups().base();
  float* dw =
      extent.weight_floats > 0
          ? scratch(attention_, static_cast<std::size_t>(extent.weight_floats) * 4).as<float>()
          : nullptr;
  ops_->paged_attention_batch(dout, dq, b, n, shape.n_heads, extent.max_slots, dw);
  if (dw != nullptr) report_batch_capture(layer, shape, queries, dw, extent.weight_floats);
  if (timing != nullptr) {
    time_batch_attention(*timing, shape, queries, [&] {
      ops_->paged_attention_batch(dout, dq, b, n, shape.n_heads, extent.max_slots, dw);
    });
  }
}

// The launch `launch` issues again, timed (attention_timing.h), with its shape and the distinct
// pool slots and bytes it reads; a device copy timed once beside it.
void CudaBackend::time_batch_attention(AttentionTiming& t, const AttentionShape& shape,
                                       std::span<const AttentionQuery> queries,
                                       const std::function<void()>& launch) {
  const KvLayout& L = queries.front().view.storage->layout();
  const int B = L.block_size;
  t.shape = LaunchShape{L.k_format.name(), L.v_format.name(), B, shape.n_heads,
                        shape.kv_heads,    shape.head_dim,    {}};
  std::vector<std::pair<std::uint32_t, int>> slots;  // (physical block, offset) read
  for (const AttentionQuery& a : queries) {
    t.shape.contexts.push_back(a.view.num_slots);
    for (int s = 0; s < a.view.num_slots; ++s)
      slots.emplace_back(a.view.blocks[static_cast<std::size_t>(s / B)].value, s % B);
  }
  std::sort(slots.begin(), slots.end());
  t.kv_slots = std::unique(slots.begin(), slots.end()) - slots.begin();
  const auto tiles = static_cast<long>(L.tile_bytes(KvKind::kKey) + L.tile_bytes(KvKind::kValue));
  t.kv_bytes = t.kv_slots * tiles / B;

  const int repeats = std::max(1, t.repeats);
  const auto round = [&] {
    return ops_->time_ms([&] {
      for (int r = 0; r < repeats; ++r) launch();
    }) / repeats;
  };
  round();  // warm: the first launches of a shape pay for caches and clocks
  t.round_ms.clear();
  for (int r = 0; r < std::max(1, t.rounds); ++r) t.round_ms.push_back(round());
  if (t.copy_bytes > 0 && t.copy_gb_per_s == 0.0) {
    const auto bytes = static_cast<std::size_t>(t.copy_bytes);
    DeviceBuffer from(*ops_, bytes), to(*ops_, bytes);
    ops_->copy_on_device(to.as<void>(), from.as<void>(), bytes);  // warm
    double best = 0.0;
    for (int r = 0; r < 5; ++r) {
      const double ms =
          ops_->time_ms([&] { ops_->copy_on_device(to.as<void>(), from.as<void>(), bytes); });
      if (ms > 0.0 && (best == 0.0 || ms < best)) best = ms;
    }
    if (best > 0.0) t.copy_gb_per_s = static_cast<double>(bytes) / best / 1e6;
  }
  t.timed = true;
}

// The batch kernel's host metadata: live maps (live_host_), and per query (meta_host_) {table
// offset (table_at_, from stage_tables), num_slots, live offset, weights offset, KIVI open
// groups}.
CudaBackend::BatchExtent CudaBackend::fill_batch_metadata(const DeviceKvMirror& p, int layer,
                                                          const AttentionShape& shape,
                                                          std::span<const AttentionQuery> queries) {
  live_host_.clear();
  meta_host_.clear();
  BatchExtent extent;
  for (std::size_t i = 0; i < queries.size(); ++i) {
    const AttentionQuery& a = queries[i];
    int live_at = -1;
    if (a.view.slot_live != nullptr) {
      live_at = static_cast<int>(live_host_.size());
      live_host_.insert(live_host_.end(), a.view.slot_live, a.view.slot_live + a.view.num_slots);
    }
    int weights_at = -1;
    if (a.observer != nullptr) {
      weights_at = static_cast<int>(extent.weight_floats);
      extent.weight_floats += static_cast<long>(shape.n_heads) * a.view.num_slots;
    }
    const OpenGroup ok = open_group(p, a.view, layer, KvKind::kKey);
    const OpenGroup ov = open_group(p, a.view, layer, KvKind::kValue);
    meta_host_.insert(meta_host_.end(), {table_at_[i], a.view.num_slots, live_at, weights_at,
                                         ok.start, int_offset(ok.at), ov.start, int_offset(ov.at)});
    extent.max_slots = std::max(extent.max_slots, a.view.num_slots);
  }
  return extent;
}

// Attention capture of a batch: the captured rows (dw, device memory) read back once, and each
// observed query's softmax rows, per head, handed to its observer.
void CudaBackend::report_batch_capture(int layer, const AttentionShape& shape,
                                       std::span<const AttentionQuery> queries, const float* dw,
                                       long weight_floats) {
  attention_host_.resize(static_cast<std::size_t>(weight_floats));
  ops_->to_host(attention_host_.data(), dw, attention_host_.size() * 4);
  for (std::size_t i = 0; i < queries.size(); ++i) {
    const AttentionQuery& a = queries[i];
    if (a.observer == nullptr) continue;
    const auto slots = static_cast<std::size_t>(a.view.num_slots);
    const float* rows =
        attention_host_.data() + meta_host_[device::DeviceOps::batch_meta_ints() * i + 3];
    for (int h = 0; h < shape.n_heads; ++h) {
      a.observer->on_attention(layer, h, a.query_pos,
                               std::span<const float>(rows + h * slots, slots));
    }
  }
}

// One query's attention (dq, dout device memory [n_heads][head_dim]); its softmax rows go to
// the observer when there is one.
void CudaBackend::attend_on_device(const AttentionQuery& a, int layer, const AttentionShape& shape,
                                   const float* dq, float* dout) {
  const KvSeqView& view = a.view;
  DeviceKvMirror& p = pool(view, /*may_create=*/false);
  const std::size_t wn = static_cast<std::size_t>(shape.n_heads) * view.num_slots;
  float* dw = a.observer != nullptr ? scratch(attention_, wn * 4).as<float>() : nullptr;
  if (view.mla != nullptr) {  // over the latent cache (mode A or B)
    std::vector<int> positions(static_cast<std::size_t>(view.num_slots));
    for (int t = 0; t < view.num_slots; ++t)
      positions[static_cast<std::size_t>(t)] = slot_position(view, t);
    mla_.attend(*view.mla, layer, dq, dout, a.query_pos, latent_sequence(p, view, layer), positions,
                dw);
  } else {
    paged_attention_on_device(p, view, layer, shape, dq, dout, dw);
  }
  if (a.observer == nullptr) return;
  // Attention capture: each head's softmax row, as the CPU backend reports it.
  attention_host_.resize(wn);
  ops_->to_host(attention_host_.data(), dw, wn * 4);
  const auto n = static_cast<std::size_t>(view.num_slots);
  for (int h = 0; h < shape.n_heads; ++h) {
    a.observer->on_attention(layer, h, a.query_pos,
                             std::span<const float>(attention_host_.data() + h * n, n));
  }
}

// One query's attention over a K/V pool: dq, dout and dw (capture, or nullptr) on the device.
void CudaBackend::paged_attention_on_device(DeviceKvMirror& p, const KvSeqView& view, int layer,
                                            const AttentionShape& shape, const float* dq,
                                            float* dout, float* dw) {
  device::PagedPool kv;
  std::tie(kv.k, kv.v) = p.layer(layer);
  kv.block_table = block_table(view);
  kv.num_slots = view.num_slots;
  kv.block_size = view.block_size();
  kv.kv_heads = shape.kv_heads;
  kv.head_dim = shape.head_dim;
  if (view.slot_live != nullptr) {  // token eviction: evicted slots get no weight
    kv.live = reinterpret_cast<const unsigned char*>(
        stage(live_, view.slot_live, static_cast<std::size_t>(view.num_slots)));
  }
  const OpenGroup ok = open_group(p, view, layer, KvKind::kKey);
  const OpenGroup ov = open_group(p, view, layer, KvKind::kValue);
  const float* open = p.open_groups().base();
  kv.open_k_start = ok.start;
  kv.open_k = ok.at >= 0 ? open + ok.at : nullptr;
  kv.open_v_start = ov.start;
  kv.open_v = ov.at >= 0 ? open + ov.at : nullptr;
  ops_->paged_attention(dout, dq, kv, shape.n_heads, dw);
}

LatentSequence CudaBackend::latent_sequence(const DeviceKvMirror& p, const KvSeqView& view,
                                            int layer) {
  const KvLayout& L = view.storage->layout();
  const MlaCodec& m = *view.mla;
  if (L.latent_dim != m.rank() || L.rope_heads != m.rope_heads() ||
      (m.rope_heads() > 0 && L.rope_dim != m.rope_dims())) {
    throw Error(flag_, "expected a latent pool of rank " + std::to_string(m.rank()) + " with " +
                           std::to_string(m.rope_heads()) + " RoPE keys of " +
                           std::to_string(m.rope_dims()) + ", got latent_dim " +
                           std::to_string(L.latent_dim));
  }
  LatentSequence seq;
  std::tie(seq.latents, seq.rope) = p.layer(layer);
  seq.block_table = block_table(view);
  seq.num_slots = view.num_slots;
  seq.block_size = L.block_size;
  if (view.slot_live != nullptr) {
    seq.live = reinterpret_cast<const unsigned char*>(
        stage(live_, view.slot_live, static_cast<std::size_t>(view.num_slots)));
  }
  return seq;
}

}  // namespace kvscope
