// Backend: the ops the forward pass needs. The CPU backend (engine/backend/cpu) is the reference
// that every other backend is tested against.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_view.h"
#include "engine/model/ggml_types.h"

namespace kvscope {

class Model;

// Receives attention weights when capture is on (the heatmaps, sink detection, H2O/TOVA scores).
// `weights` holds one value per slot of the view ([num_slots]); evicted slots hold 0.
class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  virtual void on_attention(int layer, int head, int query_pos, std::span<const float> weights) = 0;
};

// One product of a batched matmul over a shared input: out[d] = W[d][n] * x[n]. W is the fp32
// rows `w`, or, when q.data is set, the quantized rows `q` (w unused): the backend then
// quantizes x to 8 bits per block and multiplies in integers (engine/backend/cpu/quant_matmul.h).
struct MatmulOut {
  float* out = nullptr;
  const float* w = nullptr;
  int d = 0;
  QuantMatrix q{};
};

struct AttentionShape {
  int n_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

// One query of an engine step's attention: the token's view (its write slot already written; a
// prefill chunk's i-th token sees the slots up to its own), q [n_heads][head_dim] in, out the same.
struct AttentionQuery {
  KvSeqView view;
  const float* q = nullptr;
  float* out = nullptr;
  int query_pos = 0;
  AttentionObserver* observer = nullptr;
};

// One token of an engine step.
struct StepToken {
  int token = 0;
  int pos = 0;  // RoPE position
  // Where its K/V go (the view's write slot, num_slots - 1) and what it attends to: the view's
  // slots up to and including its own, so a prefill chunk is causal without anyone patching a
  // view between tokens.
  KvSeqView view;
  bool want_logits = false;  // the classifier runs only for these tokens
  AttentionObserver* observer = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // out[d] = W[d][n] * x[n]
  virtual void matmul(float* out, const float* x, const float* w, int n, int d) = 0;
  // Several products of the same x (Q/K/V; the FFN's gate and up projections), each output
  // element exactly what matmul() gives. A backend may run them as one launch; this default
  // runs them one after the other.
  virtual void matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs) {
    for (const MatmulOut& o : outs) matmul(o.out, x, o.w, n, o.d);
  }
  // The same products for m inputs at once (the tokens of one engine step): for every t < m,
  // o.out[t * o.d + r] = W[r][:] . x[t * n : (t + 1) * n], each element exactly what matmul() gives
  // for that row of x, so a batched step is bit-identical to running its tokens one by one. Weights
  // are read once for all m rows of x. This default runs the rows of x one after the other.
  virtual void matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs) {
    std::vector<MatmulOut> shifted(outs.begin(), outs.end());
    for (int t = 0; t < m; ++t) {
      for (std::size_t i = 0; i < outs.size(); ++i)
        shifted[i].out = outs[i].out + static_cast<std::size_t>(t) * outs[i].d;
      matmul_shared_input(x + static_cast<std::size_t>(t) * n, n, shifted);
    }
  }
  // out[n] = w * x / sqrt(mean(x^2) + eps)
  virtual void rmsnorm(float* out, const float* x, const float* w, int n, float eps) = 0;
  // Rotates adjacent pairs of q[q_dim] and k[kv_dim] by pos * theta^(-i/head_dim) (llama2.c).
  virtual void rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim,
                    float theta) = 0;
  // hb[i] = silu(hb[i]) * hb2[i]
  virtual void swiglu(float* hb, const float* hb2, int n) = 0;
  // Stores k[kv_dim] and v[kv_dim] into the view's write slot for `layer`, in the pool's format.
  virtual void kv_write(const KvSeqView& view, int layer, const float* k, const float* v) = 0;
  // out[n_heads][head_dim] = softmax(q K^T / sqrt(head_dim)) V over the view's live slots.
  virtual void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape,
                               const float* q, float* out, int query_pos,
                               AttentionObserver* observer) = 0;
  // Every query of a step (decode tokens of several sequences, the causal queries of a prefill
  // chunk), each exactly what paged_attention() gives for it, observers called in query order. A
  // backend may run them as one launch; this default runs them one after the other.
  virtual void attention_batch(int layer, const AttentionShape& shape,
                               std::span<const AttentionQuery> queries) {
    for (const AttentionQuery& a : queries)
      paged_attention(a.view, layer, shape, a.q, a.out, a.query_pos, a.observer);
  }

  // Whether kv_write and attention honour a view's decoded copy (KvSeqView::decoded): a KIVI
  // sequence with one may then write a whole chunk before its queries attend, each reading its own
  // moment's cache from the copy. A backend that ignores the copy runs KIVI a token per wave.
  virtual bool keeps_decoded_copies() const { return false; }

  // Token eviction's position shift: re-rotates each listed key (block, row, delta) by delta more
  // RoPE positions (base `theta`) in every layer of `storage`'s pool and stores it again in the
  // pool's K format, in the backend's memory (the CPU's tiles, or a device's copy).
  virtual void rotate_keys(KvStorage& storage, std::span<const KvKeyRotation> rotations,
                           float theta) = 0;

  // A whole engine step, run by the backend in its own memory with its own activation buffers:
  // the forward pass of `tokens` (their ids checked, their views as Transformer::forward_step
  // takes them; none of them needs another token of the step written first, which forward_step's
  // waves see to). For the tokens with want_logits, in step order: their logits into `logits`
  // ([count][vocab]) when it is not empty, and the index of each one's largest logit (the lowest
  // among equals, as the sampler's greedy path) into `greedy` ([count]) when that is not empty; a
  // caller that samples greedily passes only `greedy`, and the logits then need not leave the
  // backend (the CUDA backend reads back one int per token). A backend whose ops work on host
  // memory composes the step from them (HostStep, engine/backend/host_step.h); the CUDA backend
  // keeps everything on its device.
  virtual void run_step(const Model& model, std::span<const StepToken> tokens,
                        std::span<float> logits, std::span<int> greedy) = 0;
};

// The CPU reference backend; `threads` <= 0 means all cores.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace kvscope
