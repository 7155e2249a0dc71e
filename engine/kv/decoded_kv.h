// Keys and values as floats, outside the pool: what attention over a quantized cache reads once it
// has dequantized them.
//
// DecodedKv is one layer's heads of a run of slots: a step's shared dequantization (the queries of
// a prefill chunk), or one layer of a DecodedKvCache.
//
// DecodedKvCache is a float copy of one growing sequence's K and V, all layers, which the CPU
// backend keeps up to date as the sequence grows: each slot is dequantized once, when its bytes are
// final, instead of once per query that reads it. Where a format stages a group in full precision
// (KIVI), the copy also keeps every row as it was written, so that each query can read its own
// moment's cache: the rows of the group still open when it was written, the quantized ones before.
// A KIVI sequence then runs a prefill chunk per step like any other format, instead of a token per
// step that dequantized every cached key and value again (the Quality sweep's KIVI runs spent 36%
// of the whole sweep there). It costs the fp32 cache's bytes beside the quantized cache (twice
// for KIVI), so only evaluation runs use it (SoloSequence::keep_decoded); the Simulator and every
// memory figure never see it.
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
  // Layer l's dequantized keys and values.
  DecodedKv& layer(int l) { return layers_[static_cast<std::size_t>(l)]; }
  const DecodedKv& layer(int l) const { return layers_[static_cast<std::size_t>(l)]; }
  // Layer l's rows as written, for the kinds whose format stages a group (k or v empty else).
  DecodedKv& raw(int l) { return raw_[static_cast<std::size_t>(l)]; }
  const DecodedKv& raw(int l) const { return raw_[static_cast<std::size_t>(l)]; }
  // The group length of K's (V's) staging format (KIVI's residual), 0 when it stages none.
  int key_group() const { return group_[0]; }
  int value_group() const { return group_[1]; }
  // Slots [0, final) of layer l's keys (values) hold their final floats: the pool's bytes for them
  // never change again. A KIVI open group's slots are read from the rows as written.
  int& final_keys(int l) { return final_[static_cast<std::size_t>(l)][0]; }
  int& final_values(int l) { return final_[static_cast<std::size_t>(l)][1]; }
  // Rows written so far to layer l (the rows as written are kept for slots below it).
  int& written(int l) { return written_[static_cast<std::size_t>(l)]; }
  // Forgets every slot (a new sequence in the same cache).
  void clear();

 private:
  const KvStorage* storage_;
  int capacity_;
  std::vector<DecodedKv> layers_;
  std::vector<DecodedKv> raw_;
  std::array<int, 2> group_{};
  std::vector<std::array<int, 2>> final_;
  std::vector<int> written_;
};

}  // namespace kvscope
