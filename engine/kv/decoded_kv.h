// Keys and values as floats, outside the pool: what attention over a quantized cache reads once it
// has dequantized them.
//
// DecodedKv is one layer's heads of a run of slots: a step's shared dequantization (the queries of
// a prefill chunk), or one layer of a DecodedKvCache.
//
// DecodedKvCache is a float copy of one growing sequence's K and V, all layers, which the CPU
// backend keeps up to date as the sequence grows: each slot is dequantized once, when its bytes are
// final, instead of once per query that reads it. A KIVI sequence attends one token per step, and
// without the copy every step dequantized every cached key and value again (the Quality sweep's
// KIVI runs spent 36% of the whole sweep there). It costs the fp32 cache's bytes beside the
// quantized cache, so only evaluation runs use it (SoloSequence::keep_decoded); the Simulator and
// every memory figure never see it.
#pragma once

#include <array>
#include <vector>

#include "engine/kv/kv_storage.h"

namespace kvscope {

// [kv_heads][n][head_dim] keys and values: a head's slots in a row, as attention walks them.
struct DecodedKv {
  int n = 0;  // slots the arrays have room for (the stride between heads)
  int kv_heads = 0;
  int head_dim = 0;
  std::vector<float> k, v;
};

class DecodedKvCache {
 public:
  // Room for `capacity` slots of `storage`'s layout (K/V heads, not a latent cache).
  DecodedKvCache(const KvStorage& storage, int capacity);

  const KvStorage& storage() const { return *storage_; }
  int capacity() const { return capacity_; }
  DecodedKv& layer(int l) { return layers_[static_cast<std::size_t>(l)]; }
  const DecodedKv& layer(int l) const { return layers_[static_cast<std::size_t>(l)]; }
  // Slots [0, final) of layer l's keys (values) hold their final floats: the pool's bytes for them
  // never change again. Slots after that are refreshed on every read (a KIVI open group's, which
  // are re-read from the tiles once the group is quantized).
  int& final_keys(int l) { return final_[static_cast<std::size_t>(l)][0]; }
  int& final_values(int l) { return final_[static_cast<std::size_t>(l)][1]; }
  // Forgets every slot (a new sequence in the same cache).
  void clear();

 private:
  const KvStorage* storage_;
  int capacity_;
  std::vector<DecodedKv> layers_;
  std::vector<std::array<int, 2>> final_;
};

}  // namespace kvscope
