// A one-layer, one-sequence paged KV cache for codec and attention tests: blocks are handed out
// in shuffled order so every read really goes through the block table.
#pragma once

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/kv/decoded_kv.h"
#include "engine/kv/kv_storage.h"
#include "engine/kv/kv_view.h"

namespace kvscope::test {

class QuantCache {
 public:
  QuantCache(const KvFormat& k, const KvFormat& v, int block_size, int max_tokens, int kv_heads,
             int head_dim) {
    KvLayout L;
    L.n_layers = 1;
    L.kv_heads = kv_heads;
    L.head_dim = head_dim;
    L.block_size = block_size;
    L.num_blocks = (max_tokens + block_size - 1) / block_size + 3;  // spare blocks to shuffle over
    L.k_format = k;
    L.v_format = v;
    storage_ = std::make_unique<KvStorage>(L);
    for (int b = 0; b < L.num_blocks; ++b) blocks_.emplace_back(b);
    std::shuffle(blocks_.begin(), blocks_.end(), std::mt19937(3));
  }
  // Writes one token's K and V rows [kv_heads * head_dim] at the next slot (through a view with
  // `decoded` set, when given: the copy keeps the rows as written).
  void append(const float* k, const float* v, DecodedKvCache* decoded = nullptr) {
    ++num_slots_;
    KvSeqView w = view();
    w.decoded = decoded;
    cpu::kv_write(w, 0, k, v);
  }
  KvSeqView view() {
    KvSeqView v;
    v.storage = storage_.get();
    v.blocks = blocks_;
    v.num_slots = num_slots_;
    return v;
  }
  KvStorage& storage() { return *storage_; }

 private:
  std::unique_ptr<KvStorage> storage_;
  std::vector<BlockId> blocks_;  // logical -> physical, shuffled
  int num_slots_ = 0;
};

}  // namespace kvscope::test
