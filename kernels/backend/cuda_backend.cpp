// See cuda_backend.h.
#include "kernels/backend/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/common/error.h"
#include "engine/kv/kv_storage.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/checkpoint.h"
#include "kernels/backend/cuda_mla.h"
#include "kernels/backend/device_buffer.h"

namespace kvscope {

GemmType parse_gemm_type(const std::string& value, const std::string& flag) {
  if (value == "f32") return GemmType::kF32;
  if (value == "f16") return GemmType::kF16;
  if (value == "bf16") return GemmType::kBF16;
  throw Error(flag, "expected f32, f16 or bf16, got \"" + value + "\"");
}

const char* gemm_type_name(GemmType type) {
  switch (type) {
    case GemmType::kF32:
      return "f32";
    case GemmType::kF16:
      return "f16";
    case GemmType::kBF16:
      return "bf16";
  }
  return "?";
}

namespace {

// Runs `body`, turning a device failure into the flag's one-line error.
template <class F>
void guarded(const std::string& flag, F&& body) {
  try {
    body();
  } catch (const device::DeviceError& e) {
    throw Error(flag, e.what());
  }
}

// KIVI's open groups on the device: the full-precision rows [residual][kv_dim] of each group
// not yet quantized, per (layer, K or V, slot where the group starts), as KvStorage keeps them on
// the host for the CPU. Entries of equal size in one arena, grown by doubling; an entry is taken
// when a group's first token is written and given back when the group is quantized or the block
// it starts in is freed.
class OpenGroups {
 public:
  OpenGroups(device::DeviceOps& ops, long entry_floats, int n_layers, int block_size)
      : ops_(ops), entry_floats_(entry_floats), n_layers_(n_layers), block_size_(block_size) {}
  // The group of `layer`'s K or V whose first slot is the sequence's slot `first` (it lives in
  // row first % block_size of the physical block the view maps first / block_size to).
  std::int64_t key(int layer, KvKind kind, const KvSeqView& view, int first) const {
    const BlockId block = view.blocks[static_cast<std::size_t>(first / block_size_)];
    return ((static_cast<std::int64_t>(block.value) * block_size_ + first % block_size_) *
                n_layers_ +
            layer) *
               2 +
           static_cast<int>(kind);
  }
  // The entry's offset in floats from base(), -1 when the group has none.
  long find(std::int64_t k) const {
    const auto it = open_.find(k);
    return it == open_.end() ? -1 : it->second;
  }
  // The entry of a group whose first token is being written (its old one, if any, reused).
  long take(std::int64_t k) {
    if (const long at = find(k); at >= 0) return at;
    if (free_.empty()) grow();
    const long at = free_.back();
    free_.pop_back();
    open_.emplace(k, at);
    return at;
  }
  void give_back(std::int64_t k) {
    const auto it = open_.find(k);
    if (it == open_.end()) return;
    free_.push_back(it->second);
    open_.erase(it);
  }
  void drop_block(BlockId block) {
    const std::int64_t per_block = static_cast<std::int64_t>(block_size_) * n_layers_ * 2;
    std::erase_if(open_, [&](const auto& e) {
      if (e.first / per_block != block.value) return false;
      free_.push_back(e.second);
      return true;
    });
  }
  float* base() const { return arena_.as<float>(); }

 private:
  void grow() {
    const long entries = std::max(4L, 2 * capacity_);
    DeviceBuffer bigger(ops_, static_cast<std::size_t>(entries * entry_floats_) * sizeof(float));
    if (capacity_ > 0) {
      ops_.copy_on_device(bigger.as<void>(), arena_.as<void>(),
                          static_cast<std::size_t>(capacity_ * entry_floats_) * sizeof(float));
    }
    for (long e = entries - 1; e >= capacity_; --e) free_.push_back(e * entry_floats_);
    arena_ = std::move(bigger);
    capacity_ = entries;
  }
  device::DeviceOps& ops_;
  long entry_floats_;
  int n_layers_, block_size_;
  DeviceBuffer arena_;
  long capacity_ = 0;                            // entries the arena holds
  std::vector<long> free_;                       // offsets of free entries
  std::unordered_map<std::int64_t, long> open_;  // key() -> entry offset
};

// The device copy of one host KV pool: the host's layout, K and V regions, any format. It holds
// the pool's bytes (KvStorage::attach_device): copy-on-write, compaction and swap reach it as byte
// moves, token eviction's position shift as key rotations (kernels/ops/kv_rotate.cuh), and KIVI's
// open groups live in `open` until they are quantized.
class DevicePool final : public KvDeviceBytes {
 public:
  DevicePool(device::DeviceOps& ops, const std::string& flag, const KvLayout& L)
      : open(ops, open_entry_floats(L), L.n_layers, L.block_size), ops_(ops), flag_(flag) {}
  // Floats of one open group's rows: the larger KIVI residual of K and V times a row.
  static long open_entry_floats(const KvLayout& L) {
    const int kivi_k = L.k_format.is_kivi() ? L.k_format.residual : 0;
    const int kivi_v = L.v_format.is_kivi() ? L.v_format.residual : 0;
    return static_cast<long>(std::max(kivi_k, kivi_v)) * L.kv_heads * L.head_dim;
  }

  DeviceBuffer k, v;
  device::DeviceTiles k_tiles, v_tiles;  // layer 0
  int num_blocks = 0;
  int n_layers = 0, block_size = 0, kv_heads = 0, head_dim = 0;
  std::weak_ptr<const void> storage;  // expires with the host storage: the copy is freed then
  OpenGroups open;                    // KIVI formats' open groups

  // The tiles of `layer`.
  std::pair<device::DeviceTiles, device::DeviceTiles> layer(int l) const {
    device::DeviceTiles a = k_tiles, b = v_tiles;
    a.base += static_cast<long>(l) * num_blocks * a.tile_bytes;
    b.base += static_cast<long>(l) * num_blocks * b.tile_bytes;
    return {a, b};
  }

  void move(std::span<const KvMove> moves) override {
    guarded(flag_, [&] {
      for (const KvMove& m : moves)
        ops_.copy_on_device(at(m.kind, m.dst), at(m.kind, m.src), m.bytes);
    });
  }
  void read(std::span<const KvSpan> spans, std::byte* out) override {
    guarded(flag_, [&] {
      for (const KvSpan& s : spans) {
        ops_.to_host(out, at(s.kind, s.offset), s.bytes);
        out += s.bytes;
      }
    });
  }
  void write(std::span<const KvSpan> spans, const std::byte* in) override {
    guarded(flag_, [&] {
      for (const KvSpan& s : spans) {
        ops_.to_device(at(s.kind, s.offset), in, s.bytes);
        in += s.bytes;
      }
    });
  }
  void drop_staging(BlockId block) override { open.drop_block(block); }
  void rotate_keys(std::span<const KvKeyRotation> rotations, float theta) override {
    std::vector<int> rot;
    rot.reserve(rotations.size() * 3);
    for (const KvKeyRotation& r : rotations) {
      rot.push_back(static_cast<int>(r.block.value));
      rot.push_back(r.offset);
      rot.push_back(r.delta);
    }
    guarded(flag_, [&] {
      // The rotations' buffer is kept and grown, not allocated per shift (an allocation
      // synchronizes the device); the launch before read it in stream order.
      const std::size_t bytes = rot.size() * sizeof(int);
      if (rot_.bytes() < bytes) rot_ = DeviceBuffer(ops_, std::max(bytes, 2 * rot_.bytes()));
      ops_.to_device(rot_.as<void>(), rot.data(), bytes);
      ops_.rotate_keys(k_tiles, static_cast<long>(num_blocks) * k_tiles.tile_bytes, n_layers,
                       rot_.as<int>(), static_cast<int>(rotations.size()), block_size, kv_heads,
                       head_dim, theta);
    });
  }

 private:
  unsigned char* at(KvKind kind, std::size_t offset) const {
    return (kind == KvKind::kKey ? k : v).as<unsigned char>() + offset;
  }
  device::DeviceOps& ops_;
  std::string flag_;
  DeviceBuffer rot_;  // {block, row, delta} per rotated key
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<device::DeviceOps> ops, GemmType weights, std::string flag)
      : ops_(std::move(ops)), weights_type_(weights), flag_(std::move(flag)) {}

  std::string name() const override { return ops_->name(); }

  void matmul(float* out, const float* x, const float* w, int n, int d) override {
    const MatmulOut o{out, w, d};
    matmul_batch(x, 1, n, std::span(&o, 1));
  }
  void matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs) override {
    matmul_batch(x, 1, n, outs);
  }
  void matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs) override {
    guard([&] {
      const std::size_t xs = static_cast<std::size_t>(m) * n;
      const void* dx = gemm_input(stage(x_, x, xs), xs);
      for (const MatmulOut& o : outs) {
        if (o.q.data != nullptr) refuse_quantized();
        const std::size_t ys = static_cast<std::size_t>(m) * o.d;
        auto* dy = scratch(y_, ys * 4).as<float>();
        gemm(dy, dx, o.w, m, n, o.d, /*accumulate=*/false);
        ops_->to_host(o.out, dy, ys * 4);
      }
    });
  }
  void rmsnorm(float* out, const float* x, const float* w, int n, float eps) override {
    guard([&] {
      float* dx = stage(x_, x, static_cast<std::size_t>(n));
      const auto* dw =
          static_cast<const float*>(weight(w, static_cast<std::size_t>(n), GemmType::kF32));
      auto* dy = scratch(y_, static_cast<std::size_t>(n) * 4).as<float>();
      ops_->rmsnorm(dy, dx, dw, 1, n, eps);
      ops_->to_host(out, dy, static_cast<std::size_t>(n) * 4);
    });
  }
  void rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim,
            float theta) override {
    guard([&] {
      float* dq = stage(x_, q, static_cast<std::size_t>(q_dim));
      float* dk = stage(y_, k, static_cast<std::size_t>(kv_dim));
      int* dpos = stage(ints_, &pos, 1);
      ops_->rope(dq, dk, dpos, 1, q_dim, kv_dim, head_dim, theta);
      ops_->to_host(q, dq, static_cast<std::size_t>(q_dim) * 4);
      ops_->to_host(k, dk, static_cast<std::size_t>(kv_dim) * 4);
    });
  }
  void swiglu(float* hb, const float* hb2, int n) override {
    guard([&] {
      float* da = stage(x_, hb, static_cast<std::size_t>(n));
      float* db = stage(y_, hb2, static_cast<std::size_t>(n));
      ops_->swiglu(da, db, n);
      ops_->to_host(hb, da, static_cast<std::size_t>(n) * 4);
    });
  }
  // The position shift on the device's copy of the pool (kv_rotate_keys_kernel, through the
  // KvDeviceBytes the pool attached when it was made).
  void rotate_keys(KvStorage& storage, std::span<const KvKeyRotation> rotations,
                   float theta) override {
    guard([&] {
      if (!storage.rotate_keys_on_device(rotations, theta))
        throw InternalError(flag_, "key re-rotation in a KV pool the device never held");
    });
  }
  void kv_write(const KvSeqView& view, int layer, const float* k, const float* v) override {
    guard([&] {
      const KvLayout& L = view.storage->layout();
      const auto kv_dim = static_cast<std::size_t>(
          view.mla != nullptr ? view.mla->kv_heads * view.mla->head_dim : L.kv_heads * L.head_dim);
      kv_write_on_device(view, layer, view.mla != nullptr ? nullptr : block_table(view),
                         stage(x_, k, kv_dim), stage(y_, v, kv_dim));
    });
  }
  void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape,
                       const float* q, float* out, int query_pos,
                       AttentionObserver* observer) override {
    const AttentionQuery a{view, q, out, query_pos, observer};
    attention_batch(layer, shape, std::span(&a, 1));
  }
  // One query's attention over a K/V pool: dq, dout and dw (capture, or nullptr) on the device.
  void paged_attention_on_device(DevicePool& p, const KvSeqView& view, int layer,
                                 const AttentionShape& shape, const float* dq, float* dout,
                                 float* dw) {
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
    kv.open_k_start = ok.start;
    kv.open_k = ok.at >= 0 ? p.open.base() + ok.at : nullptr;
    kv.open_v_start = ov.start;
    kv.open_v = ov.at >= 0 ? p.open.base() + ov.at : nullptr;
    ops_->paged_attention(dout, dq, kv, shape.n_heads, dw);
  }

  void attention_batch(int layer, const AttentionShape& shape,
                       std::span<const AttentionQuery> queries) override {
    guard([&] {
      const std::size_t qn = static_cast<std::size_t>(shape.n_heads) * shape.head_dim;
      batch_q_.resize(qn * queries.size());
      for (std::size_t i = 0; i < queries.size(); ++i)
        std::copy_n(queries[i].q, qn, batch_q_.begin() + static_cast<long>(i * qn));
      const float* dq = stage(x_, batch_q_.data(), batch_q_.size());
      auto* dout = scratch(y_, batch_q_.size() * 4).as<float>();
      attention_on_device(layer, shape, queries, dq, dout);
      ops_->to_host(batch_q_.data(), dout, batch_q_.size() * 4);  // reused for the outputs
      for (std::size_t i = 0; i < queries.size(); ++i)
        std::copy_n(batch_q_.begin() + static_cast<long>(i * qn), qn, queries[i].out);
    });
  }

  // The whole step on the device: embeddings go up, the logits of the wanted tokens come back,
  // and nothing else crosses the bus but the step's metadata (positions, block tables, live maps)
  // and captured attention rows. Each op is the kernel or GEMM the op-by-op path runs, in the
  // same order, so the two give the same logits
  // (CudaSimBackend.TheWholeStepOnTheDeviceEqualsItsOpsOneByOne).
  void run_step(const Model& model, std::span<const StepToken> tokens, std::span<float> logits,
                std::span<int> greedy) override {
    guard([&] { step_on_device(model, tokens, logits, greedy); });
  }

  device::Traffic traffic() const { return ops_->traffic(); }

 private:
  template <class F>
  void guard(F&& body) {
    guarded(flag_, body);
  }

  [[noreturn]] void refuse_quantized() const {
    throw Error(flag_,
                "expected fp32 weights (--weight-format f32), got a quantized matrix "
                "(quantized-weight GEMMs are not written yet)");
  }

  // The GEMMs' input: dx itself for fp32 weights, else dx rounded once to the weights' 16-bit type
  // (into x16_, which holds it until the next call).
  const void* gemm_input(const float* dx, std::size_t count) {
    if (weights_type_ == GemmType::kF32) return dx;
    auto* x16 = scratch(x16_, count * 2).as<std::uint16_t>();
    ops_->to_16bit(x16, dx, static_cast<long>(count), weights_type_ == GemmType::kBF16);
    return x16;
  }
  // dy[m][d] (= or +=) W x for the host weights w [d][n], uploaded in the GEMM type on first use.
  void gemm(float* dy, const void* dx, const float* w, int m, int n, int d, bool accumulate) {
    ops_->gemm(dy, dx, weight(w, static_cast<std::size_t>(d) * n, weights_type_), weights_type_, m,
               n, d, accumulate);
  }

  // Activations of one step on the device, one row per token (grown to the largest step, then
  // reused): the residual stream, a norm's output, Q/K/V, attention's output, the FFN's hidden
  // pair, the wanted tokens' logits and greedy tokens, positions.
  struct StepBuffers {
    DeviceBuffer x, xn, q, k, v, att, hb, hb2, logits, greedy, pos;
  };

  void step_on_device(const Model& model, std::span<const StepToken> tokens,
                      std::span<float> logits, std::span<int> greedy) {
    if (tokens.empty()) return;
    const ModelConfig& c = model.config();
    const Weights& w = model.weights();
    const NativeWeights* nw = model.native();
    // The fp32 rows of a projection; a model that keeps the matrix quantized is refused (the
    // device has no quantized GEMM yet), as matmul_batch refuses it.
    using PerLayer = std::vector<QuantMatrix> NativeWeights::*;
    auto f32 = [&](const float* rows, PerLayer which, int l) {
      if (nw != nullptr && (nw->*which)[static_cast<std::size_t>(l)].data != nullptr)
        refuse_quantized();
      return rows;
    };
    const int m = static_cast<int>(tokens.size());
    const long dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim;
    const auto rows = [&](long width) { return static_cast<std::size_t>(m * width) * 4; };
    StepBuffers& b = step_;
    float* x = scratch(b.x, rows(dim)).as<float>();
    float* xn = scratch(b.xn, rows(dim)).as<float>();
    float* q = scratch(b.q, rows(q_dim)).as<float>();
    float* k = scratch(b.k, rows(kv_dim)).as<float>();
    float* v = scratch(b.v, rows(kv_dim)).as<float>();
    float* att = scratch(b.att, rows(q_dim)).as<float>();
    float* hb = scratch(b.hb, rows(hidden)).as<float>();
    float* hb2 = scratch(b.hb2, rows(hidden)).as<float>();

    // Token embeddings and positions up (the embedding table stays on the host: a row per token).
    embed_host_.resize(static_cast<std::size_t>(m * dim));
    pos_host_.resize(static_cast<std::size_t>(m));
    std::vector<AttentionQuery> queries;
    queries.reserve(tokens.size());
    for (int t = 0; t < m; ++t) {
      const StepToken& s = tokens[static_cast<std::size_t>(t)];
      std::copy_n(w.token_embedding + s.token * dim, dim, embed_host_.begin() + t * dim);
      pos_host_[static_cast<std::size_t>(t)] = s.pos;
      queries.push_back({s.view, nullptr, nullptr, s.pos, s.observer});
    }
    ops_->to_device(x, embed_host_.data(), rows(dim));
    int* pos = stage(b.pos, pos_host_.data(), pos_host_.size());
    // The step's block tables, staged once for every layer's K/V writes (and found already there
    // by the attention batch, which stages the same tables).
    const int* tables = stage_tables(queries, table_at_);
    const auto norm = [&](const float* weights) {
      return static_cast<const float*>(
          weight(weights, static_cast<std::size_t>(dim), GemmType::kF32));
    };
    const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};

    for (int l = 0; l < c.n_layers; ++l) {
      // Attention block: pre-norm, Q/K/V, RoPE, K/V into the pool, attention, output projection
      // added to the residual by the GEMM itself.
      ops_->rmsnorm(xn, x, norm(w.rms_att + l * dim), m, c.dim, c.rms_eps);
      const void* in = gemm_input(xn, static_cast<std::size_t>(m * dim));
      gemm(q, in, f32(w.wq + l * q_dim * dim, &NativeWeights::wq, l), m, c.dim, c.q_dim(), false);
      gemm(k, in, f32(w.wk + l * kv_dim * dim, &NativeWeights::wk, l), m, c.dim, c.kv_dim(), false);
      gemm(v, in, f32(w.wv + l * kv_dim * dim, &NativeWeights::wv, l), m, c.dim, c.kv_dim(), false);
      ops_->rope(q, k, pos, m, c.q_dim(), c.kv_dim(), c.head_dim(), c.rope_theta);
      for (int t = 0; t < m; ++t) {
        const KvSeqView& view = tokens[static_cast<std::size_t>(t)].view;
        kv_write_on_device(view, l, tables + table_at_[static_cast<std::size_t>(t)], k + t * kv_dim,
                           v + t * kv_dim);
      }
      attention_on_device(l, shape, queries, q, att);
      gemm(x, gemm_input(att, static_cast<std::size_t>(m * q_dim)),
           f32(w.wo + l * dim * q_dim, &NativeWeights::wo, l), m, c.q_dim(), c.dim, true);
      // FFN block: pre-norm, gate and up, SwiGLU, down projection added to the residual.
      ops_->rmsnorm(xn, x, norm(w.rms_ffn + l * dim), m, c.dim, c.rms_eps);
      in = gemm_input(xn, static_cast<std::size_t>(m * dim));
      gemm(hb, in, f32(w.w1 + l * hidden * dim, &NativeWeights::w1, l), m, c.dim, c.hidden_dim,
           false);
      gemm(hb2, in, f32(w.w3 + l * hidden * dim, &NativeWeights::w3, l), m, c.dim, c.hidden_dim,
           false);
      ops_->swiglu(hb, hb2, m * hidden);
      gemm(x, gemm_input(hb, static_cast<std::size_t>(m * hidden)),
           f32(w.w2 + l * dim * hidden, &NativeWeights::w2, l), m, c.hidden_dim, c.dim, true);
    }

    // Final norm and classifier for the wanted tokens only: their rows gathered (all of them,
    // in a prefill chunk that wants only its last, is one row), normed, multiplied, read back.
    int wanted = 0;
    for (int t = 0; t < m; ++t) {
      if (!tokens[static_cast<std::size_t>(t)].want_logits) continue;
      if (wanted != t)
        ops_->copy_on_device(x + wanted * dim, x + t * dim, static_cast<std::size_t>(dim) * 4);
      ++wanted;
    }
    if (wanted == 0) return;
    if (nw != nullptr && nw->wcls.data != nullptr) refuse_quantized();
    ops_->rmsnorm(xn, x, norm(w.rms_final), wanted, c.dim, c.rms_eps);
    const std::size_t logit_floats = static_cast<std::size_t>(wanted) * c.vocab_size;
    if ((!logits.empty() && logits.size() != logit_floats) ||
        (!greedy.empty() && greedy.size() != static_cast<std::size_t>(wanted))) {
      throw InternalError(flag_, "the step's logits or greedy span does not hold its wanted rows");
    }
    float* dl = scratch(b.logits, logit_floats * 4).as<float>();
    gemm(dl, gemm_input(xn, static_cast<std::size_t>(wanted * dim)), w.wcls, wanted, c.dim,
         c.vocab_size, false);
    if (!logits.empty()) ops_->to_host(logits.data(), dl, logit_floats * 4);
    if (greedy.empty()) return;
    // Greedy sampling on the device: one int per token comes back, not a row of logits.
    int* dg = scratch(b.greedy, greedy.size() * sizeof(int)).as<int>();
    ops_->argmax(dg, dl, wanted, c.vocab_size);
    ops_->to_host(greedy.data(), dg, greedy.size() * sizeof(int));
  }

  // One token's K and V rows (device memory) into the view's write slot of `layer`, in the
  // pool's format, through `table` (the view's block table on the device); an MLA view writes
  // its latent and RoPE keys (its table staged by latent_sequence).
  void kv_write_on_device(const KvSeqView& view, int layer, const int* table, const float* dk,
                          const float* dv) {
    DevicePool& p = pool(view, /*may_create=*/view.write_slot() == 0);
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
      ops_->kv_write(kt, vt, table, view.write_slot(), L.block_size, dk, dv, L.kv_heads,
                     L.head_dim);
  }

  // One query's attention (dq, dout device memory [n_heads][head_dim]); its softmax rows go to
  // the observer when there is one.
  void attend_on_device(const AttentionQuery& a, int layer, const AttentionShape& shape,
                        const float* dq, float* dout) {
    const KvSeqView& view = a.view;
    DevicePool& p = pool(view, /*may_create=*/false);
    const std::size_t wn = static_cast<std::size_t>(shape.n_heads) * view.num_slots;
    float* dw = a.observer != nullptr ? scratch(attention_, wn * 4).as<float>() : nullptr;
    if (view.mla != nullptr) {  // over the latent cache (mode A or B)
      std::vector<int> positions(static_cast<std::size_t>(view.num_slots));
      for (int t = 0; t < view.num_slots; ++t)
        positions[static_cast<std::size_t>(t)] = slot_position(view, t);
      mla_.attend(*view.mla, layer, dq, dout, a.query_pos, latent_sequence(p, view, layer),
                  positions, dw);
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

  // The whole step's queries (dq, dout device memory, [queries][n_heads][head_dim]) in one
  // launch of the batch kernel when they share a K/V pool and fit its one pass (every prefill
  // chunk and decode step up to 4,096 slots, a lone decode query too: its block table and
  // metadata then go up once per step, not once per layer); otherwise one by one (split-K past
  // 4,096 slots; MLA latent caches).
  void attention_on_device(int layer, const AttentionShape& shape,
                           std::span<const AttentionQuery> queries, const float* dq, float* dout) {
    const bool one_pool = std::all_of(queries.begin(), queries.end(), [&](const AttentionQuery& a) {
      return a.view.storage == queries.front().view.storage && a.view.mla == nullptr &&
             a.view.num_slots <= device::DeviceOps::batch_max_slots();
    });
    const std::size_t qn = static_cast<std::size_t>(shape.n_heads) * shape.head_dim;
    if (!one_pool) {
      for (std::size_t i = 0; i < queries.size(); ++i)
        attend_on_device(queries[i], layer, shape, dq + i * qn, dout + i * qn);
      return;
    }
    DevicePool& p = pool(queries.front().view, /*may_create=*/false);
    const auto n = static_cast<int>(queries.size());
    // Host staging: block tables (stage_tables), live maps, and per query {table offset,
    // num_slots, live offset, weights offset, KIVI open groups}.
    const int* tables = stage_tables(queries, table_at_);
    live_host_.clear();
    meta_host_.clear();
    int max_slots = 0;
    long weight_floats = 0;
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const AttentionQuery& a = queries[i];
      int live_at = -1;
      if (a.view.slot_live != nullptr) {
        live_at = static_cast<int>(live_host_.size());
        live_host_.insert(live_host_.end(), a.view.slot_live, a.view.slot_live + a.view.num_slots);
      }
      int weights_at = -1;
      if (a.observer != nullptr) {
        weights_at = static_cast<int>(weight_floats);
        weight_floats += static_cast<long>(shape.n_heads) * a.view.num_slots;
      }
      const OpenGroup ok = open_group(p, a.view, layer, KvKind::kKey);
      const OpenGroup ov = open_group(p, a.view, layer, KvKind::kValue);
      meta_host_.insert(meta_host_.end(),
                        {table_at_[i], a.view.num_slots, live_at, weights_at, ok.start,
                         int_offset(ok.at), ov.start, int_offset(ov.at)});
      max_slots = std::max(max_slots, a.view.num_slots);
    }
    device::PagedBatchPool b;
    std::tie(b.k, b.v) = p.layer(layer);
    b.block_size = queries.front().view.block_size();
    b.kv_heads = shape.kv_heads;
    b.head_dim = shape.head_dim;
    // Every layer of a step has the same tables, slot counts and live maps: staged by the first.
    b.tables = tables;
    b.meta = batch_meta_.stage(*this, meta_host_);
    if (!live_host_.empty()) b.live = batch_live_.stage(*this, live_host_);
    b.staging = p.open.base();
    float* dw = weight_floats > 0
                    ? scratch(attention_, static_cast<std::size_t>(weight_floats) * 4).as<float>()
                    : nullptr;
    ops_->paged_attention_batch(dout, dq, b, n, shape.n_heads, max_slots, dw);
    if (dw == nullptr) return;
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

  // The queries' block tables in one device buffer, each sequence's once: its views share one
  // table (a prefill chunk's earlier queries may see a prefix of it), staged as long as the
  // longest. offsets[i]: where query i's table starts. Uploaded only when it changed, so the
  // step's K/V writes and every layer's attention batch share one upload.
  const int* stage_tables(std::span<const AttentionQuery> queries, std::vector<int>& offsets) {
    std::unordered_map<const BlockId*, std::size_t> longest;
    for (const AttentionQuery& a : queries) {
      std::size_t& n = longest[a.view.blocks.data()];
      n = std::max(n, a.view.blocks.size());
    }
    std::unordered_map<const BlockId*, int> staged;
    tables_host_.clear();
    offsets.resize(queries.size());
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const BlockId* blocks = queries[i].view.blocks.data();
      const auto [it, fresh] = staged.try_emplace(blocks, static_cast<int>(tables_host_.size()));
      if (fresh) {
        for (std::size_t b = 0; b < longest[blocks]; ++b)
          tables_host_.push_back(static_cast<int>(blocks[b].value));
      }
      offsets[i] = it->second;
    }
    return batch_tables_.stage(*this, tables_host_);
  }

  // KIVI: the token at the view's write slot into its group's rows on the device (a new entry
  // when it opens the group); when it fills the group, the group is quantized into `tiles`.
  void stage_kivi(DevicePool& p, const KvSeqView& view, const int* table, int layer, KvKind kind,
                  const float* row, const device::DeviceTiles& tiles) {
    const KvLayout& L = view.storage->layout();
    const KvFormat& f = L.format(kind);
    const int R = f.residual, B = L.block_size, kv_dim = L.kv_heads * L.head_dim;
    const int slot = view.write_slot(), g0 = slot - slot % R;
    const std::int64_t key = p.open.key(layer, kind, view, g0);
    const long at = slot % R == 0 ? p.open.take(key) : p.open.find(key);
    if (at < 0) {
      throw Error("kv cache", f.name() + " cannot continue the group starting at slot " +
                                  std::to_string(g0) + " (layer " + std::to_string(layer) +
                                  "): its full-precision staging does not exist (was the group "
                                  "started in another sequence's block?)");
    }
    float* rows = p.open.base() + at;
    ops_->copy_on_device(rows + static_cast<long>(slot % R) * kv_dim, row,
                         static_cast<std::size_t>(kv_dim) * sizeof(float));
    if (slot % R == R - 1) {
      ops_->kivi_flush(tiles, kind == KvKind::kKey, table, g0, B, rows, kv_dim);
      p.open.give_back(key);
    }
  }

  // KIVI: where a sequence's open group of `kind` in `layer` starts and its rows' offset in the
  // pool's open-group arena; {num_slots, -1} when there is none (not KIVI, or no partial group).
  struct OpenGroup {
    int start = 0;
    long at = -1;
  };
  OpenGroup open_group(const DevicePool& p, const KvSeqView& view, int layer, KvKind kind) const {
    const KvLayout& L = view.storage->layout();
    const KvFormat& f = L.format(kind);
    if (!f.is_kivi() || view.num_slots % f.residual == 0) return {view.num_slots, -1};
    const int start = view.num_slots - view.num_slots % f.residual;
    const long at = p.open.find(p.open.key(layer, kind, view, start));
    if (at < 0) {
      throw Error("kv cache", f.name() + ": no full-precision staging for the open group at slot " +
                                  std::to_string(start) + " (layer " + std::to_string(layer) + ")");
    }
    return {start, at};
  }
  // An arena offset as the batch kernel's int metadata.
  int int_offset(long at) const {
    if (at > std::numeric_limits<int>::max())
      throw InternalError(flag_, "KIVI open-group arena past 2^31 floats");
    return static_cast<int>(at);
  }

  // Host data kept on the device in a buffer of its own, copied again only when it changed.
  template <class T>
  struct Mirror {
    DeviceBuffer buffer;
    std::vector<T> held;  // what `buffer` holds
    const T* stage(CudaBackend& b, const std::vector<T>& host) {
      if (host != held) {  // equal data is already there (same size: the buffer holds it)
        b.stage(buffer, host.data(), host.size());
        held = host;
      }
      return buffer.as<T>();
    }
  };

  // A scratch buffer of at least `bytes`, grown (never shrunk) as needed.
  DeviceBuffer& scratch(DeviceBuffer& b, std::size_t bytes) { return grown(*ops_, b, bytes); }
  // `count` values of host data copied into scratch buffer b; returns its device pointer.
  template <class T>
  T* stage(DeviceBuffer& b, const T* host, std::size_t count) {
    T* d = scratch(b, count * sizeof(T)).template as<T>();
    ops_->to_device(d, host, count * sizeof(T));
    return d;
  }

  // The device copy of host weights w[count] in `type`, uploaded (and converted) on first use.
  // Weights belong to the model and outlive the backend's use of them; a pointer seen again
  // with another count or type (another model at a reused address) is uploaded again.
  const void* weight(const float* w, std::size_t count, GemmType type) {
    auto it = weights_.find(w);
    if (it != weights_.end() && it->second.count == count && it->second.type == type)
      return it->second.buffer.as<void>();
    DeviceBuffer f32(*ops_, count * 4);
    ops_->to_device(f32.as<void>(), w, count * 4);
    if (type != GemmType::kF32) {
      DeviceBuffer h(*ops_, count * 2);
      ops_->to_16bit(h.as<std::uint16_t>(), f32.as<float>(), static_cast<long>(count),
                     type == GemmType::kBF16);
      f32 = std::move(h);
    }
    DeviceWeight& slot = weights_[w];
    slot = {std::move(f32), count, type};
    return slot.buffer.as<void>();
  }

  // The device copy of the view's pool, keyed by the storage's id and kept while the storage
  // lives (copies of destroyed storages are freed on the next call). It is made when a sequence
  // writes its first slot, and from then on holds the pool's bytes; needing one for a sequence
  // that already has slots means the device never saw them: a bug, refused rather than computed
  // on uninitialized memory.
  DevicePool& pool(const KvSeqView& view, bool may_create) {
    KvStorage& s = *view.storage;
    const KvLayout& L = s.layout();
    if ((view.mla != nullptr) != L.is_latent())
      throw InternalError(flag_, "an MLA view over a K/V pool, or a latent pool without its codec");
    if (L.is_latent() && (L.k_format.is_kivi() || L.v_format.is_kivi())) {
      throw Error(flag_, "expected a per-token format for MLA latents, got " + L.k_format.name() +
                             " (KIVI latents are not written for the device)");
    }
    std::erase_if(pools_, [](const auto& p) { return p.second->storage.expired(); });
    for (auto it = pools_.begin(); it != pools_.end(); ++it) {
      if (it->first != s.id()) continue;
      pools_.splice(pools_.begin(), pools_, it);
      return *pools_.front().second;
    }
    if (!may_create) {
      throw InternalError(flag_,
                          "the KV pool has slots the device never saw (a sequence that began "
                          "on another backend)");
    }
    auto made = std::make_shared<DevicePool>(*ops_, flag_, L);
    DevicePool& p = *made;
    p.num_blocks = L.num_blocks;
    p.n_layers = L.n_layers;
    p.block_size = L.block_size;
    p.kv_heads = L.kv_heads;
    p.head_dim = L.head_dim;
    const auto region = [&](KvKind kind) {
      return static_cast<std::size_t>(L.n_layers) * L.num_blocks * L.tile_bytes(kind);
    };
    p.k = DeviceBuffer(*ops_, region(KvKind::kKey));
    p.v = DeviceBuffer(*ops_, region(KvKind::kValue));
    const auto tiles = [&](DeviceBuffer& buffer, KvKind kind) {
      const KvFormat& f = L.format(kind);
      const int row = L.row_heads(kind) * L.row_head_dim(kind);  // a latent cache's rows differ
      return device::DeviceTiles{buffer.as<unsigned char>(), static_cast<long>(L.tile_bytes(kind)),
                                 cuda_kv_code(f, kind), f.effective_group(row),
                                 f.is_kivi() ? f.residual : 0};
    };
    p.k_tiles = tiles(p.k, KvKind::kKey);
    p.v_tiles = tiles(p.v, KvKind::kValue);
    p.storage = s.liveness();
    s.attach_device(made);
    pools_.emplace_front(s.id(), std::move(made));
    return p;
  }

  static int slot_position(const KvSeqView& view, int slot) {
    return view.slot_pos != nullptr ? view.slot_pos[slot] : slot;
  }

  // A sequence's latent cache in `layer`, as the MLA kernels read it (block table and live map
  // staged on the device). Throws kvscope::Error when the pool is not the codec's shape.
  LatentSequence latent_sequence(const DevicePool& p, const KvSeqView& view, int layer) {
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

  // The view's block table on the device.
  const int* block_table(const KvSeqView& view) {
    table_host_.resize(view.blocks.size());
    for (std::size_t i = 0; i < view.blocks.size(); ++i)
      table_host_[i] = static_cast<int>(view.blocks[i].value);
    return stage(table_, table_host_.data(), table_host_.size());
  }

  std::unique_ptr<device::DeviceOps> ops_;
  MlaOnDevice mla_{*ops_};  // after ops_: it keeps a reference to it
  GemmType weights_type_;
  std::string flag_;
  struct DeviceWeight {
    DeviceBuffer buffer;
    std::size_t count = 0;
    GemmType type = GemmType::kF32;
  };
  std::unordered_map<const float*, DeviceWeight> weights_;
  std::list<std::pair<std::uint64_t, std::shared_ptr<DevicePool>>> pools_;
  DeviceBuffer x_, y_, x16_, ints_, table_, live_, attention_;
  Mirror<int> batch_tables_, batch_meta_;
  Mirror<std::uint8_t> batch_live_;
  std::vector<int> table_host_, tables_host_, meta_host_;
  std::vector<std::uint8_t> live_host_;
  std::vector<float> batch_q_;
  std::vector<float> attention_host_;
  StepBuffers step_;
  std::vector<int> table_at_;  // stage_tables' offsets for the current step's queries
  std::vector<float> embed_host_;
  std::vector<int> pos_host_;
};

}  // namespace

device::KvCode cuda_kv_code(const KvFormat& f, KvKind kind) {
  const bool key = kind == KvKind::kKey;
  switch (f.dtype) {
    case KvDtype::kF32:
      return device::KvCode::kF32;
    case KvDtype::kF16:
      return device::KvCode::kF16;
    case KvDtype::kBF16:
      return device::KvCode::kBF16;
    case KvDtype::kInt8:
      return device::KvCode::kInt8;
    case KvDtype::kFp8E4M3:
      return device::KvCode::kE4M3;
    case KvDtype::kFp8E5M2:
      return device::KvCode::kE5M2;
    case KvDtype::kInt4:
      return device::KvCode::kInt4;
    case KvDtype::kInt2:
      return device::KvCode::kInt2;
    case KvDtype::kKivi4:  // keys per channel; values per token, stored as int4 stores them
      return key ? device::KvCode::kKiviKey4 : device::KvCode::kInt4;
    case KvDtype::kKivi2:
      return key ? device::KvCode::kKiviKey2 : device::KvCode::kInt2;
  }
  throw InternalError("cuda backend", "a K/V format without a kernel code");
}

std::optional<device::Traffic> cuda_traffic(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr) return std::nullopt;
  return cuda->traffic();
}

std::unique_ptr<Backend> make_cuda_sim_backend(GemmType weights) {
  return std::make_unique<CudaBackend>(device::make_emulated_device_ops(), weights,
                                       "--backend cuda-sim");
}

std::unique_ptr<Backend> make_cuda_backend(GemmType weights, std::string* why) {
  auto ops = device::make_cuda_device_ops(why);
  if (ops == nullptr) return nullptr;
  return std::make_unique<CudaBackend>(std::move(ops), weights, "--backend cuda");
}

}  // namespace kvscope
