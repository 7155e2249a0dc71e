// A one-layer, one-sequence KV cache filled with random rows, blocks in shuffled order: what the
// attention micro-benchmarks (bench quant, bench mla) time the CPU ops on.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "engine/kv/kv_storage.h"
#include "engine/kv/kv_view.h"

namespace kvscope::cli {

struct OneLayerCache {
  std::unique_ptr<KvStorage> storage;
  std::vector<BlockId> blocks;  // logical -> physical
  int tokens = 0;
  KvSeqView view() const {
    KvSeqView v;
    v.storage = storage.get();
    v.blocks = blocks;
    v.num_slots = tokens;
    return v;
  }
};

// `tokens` tokens of layout `L` (its n_layers and num_blocks are replaced: one layer, just enough
// blocks), every K and V row (latent rows for MLA layouts) drawn from N(0, 1) with `rng` and
// written in the layout's formats.
OneLayerCache random_one_layer_cache(KvLayout L, int tokens, std::mt19937& rng);

}  // namespace kvscope::cli
