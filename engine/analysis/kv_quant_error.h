// Quantization error of a KV cache per position, measured on the real model: the tokens run with
// an exact fp32 cache and, in lockstep, with a cache in the formats under study. The exact K/V are
// also copied into a third cache in those formats (the same write path the forward pass uses) and
// read back through the attention's read path, so the K/V error is the storage round trip alone;
// the attention error compares what the two runs actually attended to (propagation included).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/infer/transformer.h"
#include "engine/kv/kv_format.h"
#include "engine/kv/kv_view.h"

namespace kvscope {

// ---- primitives ----

// Writes slot `slot` of every layer's K and V, as `src` reads them back, into the write slot of
// `dst`, encoded in dst's formats exactly as the forward pass's kv_write would.
void copy_token_kv(const KvSeqView& src, int slot, const KvSeqView& dst);

// Relative L2 error ||read(quantized) - read(exact)|| / ||read(exact)|| per KV head of slots
// [0, n) of `layer`'s K or V, both read through TileReader (attention's read path):
// out[kvh * n + slot]. A zero exact vector counts as error 0 when read back as zero, else 1.
void relative_kv_error(const KvSeqView& exact, const KvSeqView& quantized, int layer, KvKind kind,
                       int n, std::span<float> out);

// Total variation distance 0.5 * sum_i |p_i - q_i| of two rows of equal length (0 .. 1 for
// probability rows).
double total_variation(std::span<const float> p, std::span<const float> q);

// ---- the measurement ----

struct KvErrorProfile {
  int n_layers = 0;
  int n_heads = 0;
  int kv_heads = 0;
  int positions = 0;
  KvFormat k_format;  // the formats measured against fp32
  KvFormat v_format;
  // Storage round trip of the exact K/V, relative L2 per vector.
  std::vector<float> k_error;  // [n_layers][kv_heads][positions]
  std::vector<float> v_error;  // [n_layers][kv_heads][positions]
  // Total variation between the fp32-cache run's and the quantized-cache run's attention row of
  // query `position` (each run's own forward pass, so deeper layers include propagated error).
  std::vector<float> attention_tv;  // [n_layers][n_heads][positions]

  float k(int layer, int kvh, int pos) const { return k_error[index(layer, kvh, kv_heads, pos)]; }
  float v(int layer, int kvh, int pos) const { return v_error[index(layer, kvh, kv_heads, pos)]; }
  float tv(int layer, int head, int pos) const { return attention_tv[tv_index(layer, head, pos)]; }
  std::size_t tv_index(int layer, int head, int pos) const {
    return index(layer, head, n_heads, pos);
  }

 private:
  std::size_t index(int layer, int h, int hs, int pos) const {
    return (static_cast<std::size_t>(layer) * static_cast<std::size_t>(hs) +
            static_cast<std::size_t>(h)) *
               static_cast<std::size_t>(positions) +
           static_cast<std::size_t>(pos);
  }
};

struct KvErrorHooks {
  AttentionObserver* exact_observer = nullptr;      // also sees the fp32-cache run's attention
  AttentionObserver* quantized_observer = nullptr;  // also sees the quantized-cache run's
  std::function<bool()> cancelled;                  // polled between positions
};

// Runs `tokens` from position 0 with a fresh fp32 paged cache and a fresh cache in (k, v) of
// `block_size`, in lockstep on one transformer, and measures the profile above. Returns nullopt
// when cancelled. Throws kvscope::Error when the formats cannot store this model's K/V at this
// block size (KvFormat::validate).
std::optional<KvErrorProfile> measure_kv_error(Transformer& transformer,
                                               std::span<const int> tokens, const KvFormat& k,
                                               const KvFormat& v, int block_size,
                                               const KvErrorHooks& hooks = {});

}  // namespace kvscope
