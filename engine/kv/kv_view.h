// KvSeqView: the one seam between the forward pass and the KV cache. The forward pass reads and
// writes K/V only through this view (storage + block table + format); paging, sharing,
// quantization and eviction all live behind it.
#pragma once

#include <cstdint>
#include <span>

#include "engine/kv/ids.h"
#include "engine/kv/kv_storage.h"

namespace kvscope {

struct MlaCodec;       // engine/mla/mla_codec.h
class KeySelector;     // engine/sparse/key_selector.h
class DecodedKvCache;  // engine/kv/decoded_kv.h

struct KvSeqView {
  KvStorage* storage = nullptr;
  std::span<const BlockId> blocks;  // logical block -> physical block
  int num_slots = 0;                // slots in use, including the one being written this step
  // Optional [num_slots]: 0 where the slot's token was evicted (attention skips it).
  const std::uint8_t* slot_live = nullptr;
  const std::int32_t* slot_pos = nullptr;  // Optional [num_slots]: the RoPE position of each slot's
                                           // token (default: the slot index)
  // True when blocks are consecutive ids (the contiguous baseline): attention may then address
  // the whole sequence from one base pointer per layer.
  bool contiguous = false;
  // Optional: the storage is an MLA latent cache (KvLayout::is_latent) and this codec turns K/V
  // into latents on write and attends over latents (engine/backend/cpu/mla_ops).
  const MlaCodec* mla = nullptr;
  // Optional: sparse attention. Each query head attends only to the live slots this selector
  // keeps (the cache itself is whole); the CPU backend runs it, the others refuse a view with one.
  KeySelector* selector = nullptr;
  // Optional: a float copy of this sequence's K and V that the CPU backend brings up to date and
  // attends over instead of dequantizing every slot for every query (evaluation runs of a
  // quantized cache; the same results, bit for bit). Only for a sequence that grows by appending:
  // no eviction, no rotation, no latent cache.
  DecodedKvCache* decoded = nullptr;

  int block_size() const { return storage->layout().block_size; }
  int write_slot() const { return num_slots - 1; }
};

}  // namespace kvscope
