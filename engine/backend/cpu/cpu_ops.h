// CPU reference ops, free functions so tests and benchmarks can call them directly. kernels/ has
// no CUDA kernel yet; design.md asks that each one get its twin here, same name and arguments.
#pragma once

#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/kv/decoded_kv.h"

namespace kvscope::cpu {

void matmul(float* out, const float* x, const float* w, int n, int d);
// The products of one x, as one parallel region: the rows of all outputs are split evenly across
// the threads (one fork/join instead of one per product).
void matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs);
// Backend::matmul_batch: every weight row is read once and multiplied with all m rows of x,
// each product the same row_dot() as matmul's, so results are bit-identical to m single calls.
void matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs);
void rmsnorm(float* out, const float* x, const float* w, int n, float eps);
void rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim, float theta);
// rope()'s angles at `pos`: cos_sin[2 p], cos_sin[2 p + 1] = cos, sin of pair p's angle, for the
// head_dim / 2 pairs of a head, with rope()'s float arithmetic.
void rope_cos_sin(int pos, int head_dim, float theta, float* cos_sin);
// Rotates the keys k[kv_dim] by those angles exactly as rope() rotates k (token eviction's
// position shift rotates many keys by one delta: the angles once, not once per key and layer).
void rope_keys(float* k, int kv_dim, int head_dim, const float* cos_sin);
void swiglu(float* hb, const float* hb2, int n);
void kv_write(const KvSeqView& view, int layer, const float* k, const float* v);
// scratch grows to [n_heads][num_slots] weights + [kv_heads][head_dim] + [n_heads] work space.
void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape, const float* q,
                     float* out, int query_pos, AttentionObserver* observer,
                     std::vector<float>& scratch);

// Whether queries on `view` may go through paged_attention_fp32_queries: an fp32 pool (keys and
// values), not latent, every slot live, no key selector.
bool tiles_fp32_attention(const KvSeqView& view);
// paged_attention for queries that read the same blocks of an fp32 pool (a prefill chunk's, each
// with its own num_slots; tiles_fp32_attention true for each): the same results and observer
// calls, in the same order, bit for bit; each block of keys and values is read once per tile of
// eight queries instead of once per query. scratch grows to [8][n_heads][num_slots] weights.
void paged_attention_fp32_queries(int layer, const AttentionShape& shape,
                                  std::span<const AttentionQuery> queries,
                                  std::vector<float>& scratch);

// The K and V heads of a view's first n slots as floats (DecodedKv, engine/kv/decoded_kv.h):
// what paged_attention dequantizes for every query, done once for the queries of a step that read
// the same slots (a prefill chunk's causal queries).
// Whether queries on `view` may share a DecodedKv: a pool of another format than fp32 (read in
// place), not latent, without a per-sequence staging group (KIVI's open group is read by slot
// ranges of the view), every slot live.
bool shares_decoded_kv(const KvSeqView& view);
void decode_kv(const KvSeqView& view, int layer, int n, DecodedKv& out);
// Brings layer `layer` of view.decoded (which must be set) up to the view's first n slots: the
// slots whose bytes became final since the last call are dequantized once and kept; a KIVI open
// group's slots, whose bytes change when the group is quantized, are left to the rows as written
// (keep_written_row), which attention reads for them (decoded_raw_from). Throws InternalError for a
// view the cache cannot mirror (another pool, more slots than its capacity, fewer slots than it
// holds final, evicted slots, a latent cache).
void refresh_decoded(const KvSeqView& view, int layer, int n);
// kv_write's part for a view with a decoded copy: the rows as written, kept where the format
// stages a group (KIVI); each layer's rows must come slot after slot.
void keep_written_row(const KvSeqView& view, int layer, const float* k, const float* v);
// The first slot a query over n slots reads from the rows as written: the start of the group of
// `group` tokens still open at its time (n when the format stages none, group 0).
int decoded_raw_from(int n, int group);
// What attention over decoded heads reads: the dequantized slots, and where K (V) stages groups
// (key_group, value_group > 0), the rows as written for each query's open group.
struct DecodedRead {
  const DecodedKv* kv = nullptr;
  const DecodedKv* raw = nullptr;
  int key_group = 0;
  int value_group = 0;
};
DecodedRead decoded_read(const DecodedKvCache& cache, int layer);
// paged_attention on the decoded heads of the same pool and layer, for queries that read the same
// slots of it (a prefill chunk's: each up to its own num_slots <= kv.n), in tiles of eight that
// read each decoded key and value once, the tiles' KV heads shared by the threads: each query's
// result and observer call the same as paged_attention's, bit for bit. scratch grows to
// [64][n_heads][num_slots] weights.
void paged_attention_decoded_queries(int layer, const AttentionShape& shape,
                                     std::span<const AttentionQuery> queries,
                                     std::vector<float>& scratch, const DecodedKv& kv);
// The same over a sequence's decoded copy: each query reads the rows as written from the start of
// its own open group (decoded_raw_from), the dequantized ones before it.
void paged_attention_decoded_queries(int layer, const AttentionShape& shape,
                                     std::span<const AttentionQuery> queries,
                                     std::vector<float>& scratch, const DecodedRead& read);

}  // namespace kvscope::cpu
