// CpuBackend: the Backend interface over the free functions in cpu_ops.
#include "engine/common/openmp.h"

#include <algorithm>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/kv_rotate.h"
#include "engine/backend/host_step.h"
#include "engine/common/error.h"

namespace kvscope {
namespace {

// OpenMP's thread count is per calling thread (libgomp keeps it in the thread's ICVs): a backend
// built on one thread and run on another (the UI builds the Simulator on the UI thread and steps
// it on a worker) sets it on whichever thread calls an op, before the op's parallel regions.
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads > 0 ? threads : omp_get_num_procs()) {}
  std::string name() const override { return "cpu"; }
  void matmul(float* out, const float* x, const float* w, int n, int d) override {
    use_threads();
    cpu::matmul(out, x, w, n, d);
  }
  void matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs) override {
    use_threads();
    cpu::matmul_shared_input(x, n, outs);
  }
  void matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs) override {
    use_threads();
    cpu::matmul_batch(x, m, n, outs);
  }
  void rmsnorm(float* out, const float* x, const float* w, int n, float eps) override {
    cpu::rmsnorm(out, x, w, n, eps);
  }
  void rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim,
            float theta) override {
    cpu::rope(q, k, pos, q_dim, kv_dim, head_dim, theta);
  }
  void swiglu(float* hb, const float* hb2, int n) override { cpu::swiglu(hb, hb2, n); }
  void kv_write(const KvSeqView& view, int layer, const float* k, const float* v) override {
    check_host_pool(view);
    use_threads();
    cpu::kv_write(view, layer, k, v);
  }
  void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape,
                       const float* q, float* out, int query_pos,
                       AttentionObserver* observer) override {
    check_host_pool(view);
    use_threads();
    cpu::paged_attention(view, layer, shape, q, out, query_pos, observer, scratch_);
  }
  // Queries that read the same slots of a non-fp32 pool (a prefill chunk's, one after another in
  // the step) share one dequantization of their keys and values instead of one each: a 128-token
  // chunk at 2,048 tokens of context dequantized every cached head 128 times. On an fp32 pool they
  // go in tiles of eight that read each block once.
  void attention_batch(int layer, const AttentionShape& shape,
                       std::span<const AttentionQuery> queries) override {
    use_threads();
    for (std::size_t i = 0; i < queries.size();) {
      const KvSeqView& first = queries[i].view;
      check_host_pool(first);
      std::size_t end = i + 1;
      int slots = first.num_slots;
      const bool tiles = cpu::tiles_fp32_attention(first);
      if (tiles || cpu::shares_decoded_kv(first) || first.decoded != nullptr) {
        while (end < queries.size() && same_slots(queries[end].view, first) &&
               (!tiles || cpu::tiles_fp32_attention(queries[end].view))) {
          slots = std::max(slots, queries[end].view.num_slots);
          ++end;
        }
      }
      if (tiles && end - i > 1) {
        // An fp32 pool is read in place: a tile of queries reads each block once.
        cpu::paged_attention_fp32_queries(layer, shape, queries.subspan(i, end - i), scratch_);
      } else if (end - i == 1) {
        const AttentionQuery& a = queries[i];
        cpu::paged_attention(a.view, layer, shape, a.q, a.out, a.query_pos, a.observer, scratch_);
      } else if (first.decoded != nullptr) {
        // The sequence keeps its own float copy: only the chunk's new slots are decoded.
        cpu::refresh_decoded(first, layer, slots);
        cpu::paged_attention_decoded_queries(layer, shape, queries.subspan(i, end - i), scratch_,
                                             cpu::decoded_read(*first.decoded, layer));
      } else {
        // Another format: the keys and values decoded once, then read once per tile of queries.
        cpu::decode_kv(first, layer, slots, decoded_);
        cpu::paged_attention_decoded_queries(layer, shape, queries.subspan(i, end - i), scratch_,
                                             decoded_);
      }
      i = end;
    }
  }
  bool keeps_decoded_copies() const override { return true; }
  void rotate_keys(KvStorage& storage, std::span<const KvKeyRotation> rotations,
                   float theta) override {
    check_host_pool(storage);
    storage.check_rotations(rotations);
    cpu::rotate_keys(storage, rotations, theta);
  }
  // The step composed from the ops above on this backend's own host activations.
  void run_step(const Model& model, std::span<const StepToken> tokens, std::span<float> logits,
                std::span<int> greedy) override {
    step_.run(*this, model, tokens, logits, greedy);
  }

 private:
  // The CPU computes on the host tiles: a pool whose bytes a device holds is not its to read.
  static void check_host_pool(const KvSeqView& view) { check_host_pool(*view.storage); }
  static void check_host_pool(const KvStorage& storage) {
    if (storage.on_device()) {
      throw InternalError("cpu backend",
                          "the KV pool's bytes are held by another backend's device; the CPU "
                          "backend would read stale host tiles");
    }
  }
  // Whether two views read the same slots (up to their num_slots) of the same pool.
  static bool same_slots(const KvSeqView& a, const KvSeqView& b) {
    return a.storage == b.storage && a.blocks.data() == b.blocks.data() &&
           a.blocks.size() == b.blocks.size() && a.contiguous == b.contiguous && a.mla == b.mla &&
           a.slot_live == b.slot_live && a.decoded == b.decoded;
  }
  void use_threads() const {
    if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
  }
  int threads_;                 // OpenMP threads for this backend's parallel ops
  std::vector<float> scratch_;  // [n_heads][num_slots] attention weights
  DecodedKv decoded_;           // attention_batch: the shared keys and values of a run of queries
  HostStep step_;               // the activations
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace kvscope
