// KvStorage: the bytes of every physical block of the pool, laid out layer-major as vLLM does, so
// that a run of consecutive blocks is one contiguous region per layer (the contiguous baseline):
//   K: [n_layers][num_blocks][tile]   V: [n_layers][num_blocks][tile]
//   tile = [block_size][kv_heads][head_dim] values in the layer's KvFormat (+ its metadata)
// An MLA latent cache (engine/mla) uses the same regions for other rows: K tiles hold
// [block_size][latent_dim] latents, V tiles [block_size][rope_heads][rope_dim] decoupled RoPE keys.
// KIVI formats also keep each sequence's open group in full precision: fp32 staging buffers
// [residual][kv_heads * head_dim] keyed by where the group starts (block, offset, layer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/common/zeroed_buffer.h"
#include "engine/kv/ids.h"
#include "engine/kv/kv_format.h"

namespace kvscope {

struct KvLayout {
  int n_layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int num_blocks = 0;
  KvFormat k_format;
  KvFormat v_format;
  // MLA latent cache when latent_dim > 0: one latent row of latent_dim values per token per layer
  // in the K region, and rope_heads x rope_dim post-RoPE key values (mode B; 0 in mode A) in the
  // V region, instead of per-head K and V.
  int latent_dim = 0;
  int rope_heads = 0;
  int rope_dim = 0;

  bool is_latent() const { return latent_dim > 0; }
  const KvFormat& format(KvKind kind) const { return kind == KvKind::kKey ? k_format : v_format; }
  // One token's row of `kind` as heads x values per head: K/V heads, or the latent as one head
  // (K region) and the RoPE keys (V region) of a latent cache.
  int row_heads(KvKind kind) const {
    if (!is_latent()) return kv_heads;
    return kind == KvKind::kKey ? 1 : rope_heads;
  }
  int row_head_dim(KvKind kind) const {
    if (!is_latent()) return head_dim;
    return kind == KvKind::kKey ? latent_dim : rope_dim;
  }
  std::size_t tile_bytes(KvKind kind) const {
    return format(kind).tile_bytes(block_size, row_heads(kind), row_head_dim(kind), kind);
  }
  // Bytes one block occupies across all layers, K and V.
  std::size_t block_bytes() const {
    return static_cast<std::size_t>(n_layers) *
           (tile_bytes(KvKind::kKey) + tile_bytes(KvKind::kValue));
  }
  // Exact KV bytes per token for all layers (tile bytes / block_size).
  double bytes_per_token() const { return static_cast<double>(block_bytes()) / block_size; }
  // Full-precision bytes one sequence holds outside the blocks (KIVI's open group), all layers.
  std::size_t staging_bytes_per_sequence() const {
    return static_cast<std::size_t>(n_layers) *
           (k_format.staging_bytes_per_sequence(row_heads(KvKind::kKey),
                                                row_head_dim(KvKind::kKey)) +
            v_format.staging_bytes_per_sequence(row_heads(KvKind::kValue),
                                                row_head_dim(KvKind::kValue)));
  }
};

struct ModelConfig;
// The layout of a pool for `model`'s K/V heads: num_blocks blocks of block_size tokens.
KvLayout kv_layout_for(const ModelConfig& model, int block_size, int num_blocks,
                       const KvFormat& k_format, const KvFormat& v_format);

// One run of pool bytes: `bytes` at `offset` into the K or the V region (KvStorage::tile's
// addressing: tile (layer, block) of a kind starts at (layer * num_blocks + block) * tile_bytes).
struct KvSpan {
  KvKind kind = KvKind::kKey;
  std::size_t offset = 0;
  std::size_t bytes = 0;
};
// A copy of `bytes` pool bytes from offset `src` to offset `dst` of one region (the runs may be
// in one tile; they never overlap).
struct KvMove {
  KvKind kind = KvKind::kKey;
  std::size_t src = 0;
  std::size_t dst = 0;
  std::size_t bytes = 0;
};

// One cached token whose key is rotated by `delta` more RoPE positions in every layer (token
// eviction's position shift): the token in row `offset` of physical block `block`.
struct KvKeyRotation {
  BlockId block;
  int offset = 0;
  int delta = 0;
};

// Where a pool's bytes live when a backend keeps them in its own memory (the CUDA backends). Once
// one is attached, KvStorage hands it every byte move (copy-on-write, slot compaction, swap out
// and in) and the backend its key re-rotations, instead of applying them to its own tiles, which
// then no longer hold the pool's bytes.
class KvDeviceBytes {
 public:
  virtual ~KvDeviceBytes() = default;
  virtual void move(std::span<const KvMove> moves) = 0;
  // Copies the spans, in order, into out (their total size) / from in.
  virtual void read(std::span<const KvSpan> spans, std::byte* out) = 0;
  virtual void write(std::span<const KvSpan> spans, const std::byte* in) = 0;
  // Re-rotates the keys (RoPE with base `theta`) and stores them again in the pool's K format.
  virtual void rotate_keys(std::span<const KvKeyRotation> rotations, float theta) = 0;
  // KIVI: forgets the open groups' full-precision rows of groups that start in `block` (its
  // owner went away), as drop_block_staging does on the host. A holder that keeps none ignores it.
  virtual void drop_staging(BlockId /*block*/) {}
};

class KvStorage {
 public:
  // Throws kvscope::Error when a format cannot store this shape (KvFormat::validate).
  explicit KvStorage(const KvLayout& layout);
  const KvLayout& layout() const { return layout_; }
  // Bytes of the block tiles (staging excluded).
  std::size_t total_bytes() const { return total_bytes_; }
  // Bytes of the pool's memory the operating system backs now (ZeroedBuffer::resident_bytes: whole
  // pages, the mapping's tail past the tiles included; -1 when it cannot be asked).
  long resident_bytes() const { return data_.resident_bytes(); }
  // Unique within the process (never reused, unlike an address): a backend that keeps the pool in
  // its own memory (the CUDA backends) keys its copy by it.
  std::uint64_t id() const { return id_; }
  // Expires when this storage is destroyed: a backend holding a copy of the pool frees it then.
  std::weak_ptr<const void> liveness() const { return alive_; }

  // Makes `device` the holder of the pool's bytes from now on (see KvDeviceBytes); the storage
  // keeps a weak reference. Throws kvscope::Error when another live holder is attached.
  void attach_device(const std::shared_ptr<KvDeviceBytes>& device);
  bool on_device() const { return device_attached_; }

  std::byte* tile(int layer, KvKind kind, BlockId block) {
    return base(kind) + tile_offset(layer, kind, block);
  }
  const std::byte* tile(int layer, KvKind kind, BlockId block) const {
    return const_cast<KvStorage*>(this)->tile(layer, kind, block);
  }
  // The byte moves below are applied where the pool's bytes live: these tiles, or the attached
  // device's copy.
  // Copies every layer's K and V tile of `src` over `dst` (copy-on-write). KIVI staging is not
  // copied: it belongs to the sequence that opened the group.
  void copy_block(BlockId src, BlockId dst);
  // Copies one token (codes and per-token scales, every layer, K and V) from slot `src_offset`
  // of `src` to slot `dst_offset` of `dst` (token-eviction compaction). Bytes are copied, never
  // re-quantized. Throws kvscope::Error for KIVI, whose key scales span groups of tokens.
  void copy_slot(BlockId src, int src_offset, BlockId dst, int dst_offset);
  // One block's bytes, every layer's K tile then V tile ([n_layers][K tile, V tile]:
  // layout().block_bytes() bytes), read out of the pool (swap-out) or written into it (swap-in).
  void read_block(BlockId block, std::byte* out) const;
  void write_block(BlockId block, const std::byte* in);
  // Token eviction's position shift, which a backend applies (Backend::rotate_keys): the CPU
  // rotates these tiles, a backend holding the bytes hands them to the holder here, which returns
  // false when there is none. Block ids and offsets outside the pool, or a latent or KIVI pool,
  // are an InternalError (check_rotations).
  void check_rotations(std::span<const KvKeyRotation> rotations) const;
  bool rotate_keys_on_device(std::span<const KvKeyRotation> rotations, float theta);

  // KIVI staging of the group starting at (block, offset) of `layer`'s K or V:
  // [residual][kv_heads * head_dim] floats. `create` makes (or re-zeroes) it; otherwise nullptr
  // when there is none.
  float* staging(int layer, KvKind kind, BlockId block, int offset, bool create);
  const float* staging(int layer, KvKind kind, BlockId block, int offset) const;
  void drop_staging(int layer, KvKind kind, BlockId block, int offset);
  // Drops every staging buffer of groups that start in `block` (the block's owner went away),
  // here and in an attached device (KvDeviceBytes::drop_staging).
  void drop_block_staging(BlockId block);
  // Staging bytes held now, and the most ever held at once.
  std::size_t staging_bytes() const { return staging_bytes_; }
  std::size_t peak_staging_bytes() const { return peak_staging_bytes_; }

 private:
  std::byte* base(KvKind kind) { return data_.data() + (kind == KvKind::kKey ? 0 : v_offset_); }
  std::size_t tile_offset(int layer, KvKind kind, BlockId block) const {
    return (static_cast<std::size_t>(layer) * layout_.num_blocks + block.value) *
           layout_.tile_bytes(kind);
  }
  std::vector<KvSpan> block_spans(BlockId block) const;
  void check_block(BlockId b, const char* what) const;  // InternalError outside the pool
  void apply(std::span<const KvMove> moves);
  // The attached device, or nullptr when the bytes are these tiles; throws when it has gone.
  std::shared_ptr<KvDeviceBytes> device() const;
  std::int64_t staging_key(int layer, BlockId block, int offset) const {
    return (static_cast<std::int64_t>(block.value) * layout_.block_size + offset) *
               layout_.n_layers +
           layer;
  }
  KvLayout layout_;
  std::uint64_t id_ = 0;
  std::shared_ptr<const void> alive_ = std::make_shared<int>(0);
  bool device_attached_ = false;
  std::weak_ptr<KvDeviceBytes> device_;
  std::size_t v_offset_ = 0;  // V region start, 64-byte aligned so fp32 V tiles are aligned
  std::size_t total_bytes_ = 0;
  ZeroedBuffer data_;                                                // K region, then V region
  std::unordered_map<std::int64_t, std::vector<float>> staging_[2];  // [kind] -> [residual][kv_dim]
  std::size_t staging_bytes_ = 0;
  std::size_t peak_staging_bytes_ = 0;
};

}  // namespace kvscope
