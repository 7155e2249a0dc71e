// OpByOp: another backend's ops, one call at a time, on host activations of its own (HostStep). It
// forwards every op and never hands the inner backend a whole step, so a backend that runs one
// (the CUDA backend keeps a step's activations on the device) can be held to its own ops: the same
// logits, and the host<->device traffic of the op-by-op path as the baseline `kvscope bench batch`
// measures the whole step against. A subclass that watches one op (eval key-channels' K/V
// statistics) overrides it and calls OpByOp's.
#pragma once

#include <span>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/host_step.h"

namespace kvscope {

class OpByOp : public Backend {
 public:
  explicit OpByOp(Backend& inner) : inner_(inner) {}

  std::string name() const override { return inner_.name() + " (op by op)"; }
  void matmul(float* out, const float* x, const float* w, int n, int d) override {
    inner_.matmul(out, x, w, n, d);
  }
  void matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs) override {
    inner_.matmul_shared_input(x, n, outs);
  }
  void matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs) override {
    inner_.matmul_batch(x, m, n, outs);
  }
  void rmsnorm(float* out, const float* x, const float* w, int n, float eps) override {
    inner_.rmsnorm(out, x, w, n, eps);
  }
  void rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim,
            float theta) override {
    inner_.rope(q, k, pos, q_dim, kv_dim, head_dim, theta);
  }
  void swiglu(float* hb, const float* hb2, int n) override { inner_.swiglu(hb, hb2, n); }
  void kv_write(const KvSeqView& view, int layer, const float* k, const float* v) override {
    inner_.kv_write(view, layer, k, v);
  }
  void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape,
                       const float* q, float* out, int query_pos,
                       AttentionObserver* observer) override {
    inner_.paged_attention(view, layer, shape, q, out, query_pos, observer);
  }
  void attention_batch(int layer, const AttentionShape& shape,
                       std::span<const AttentionQuery> queries) override {
    inner_.attention_batch(layer, shape, queries);
  }
  bool keeps_decoded_copies() const override { return inner_.keeps_decoded_copies(); }
  void rotate_keys(KvStorage& storage, std::span<const KvKeyRotation> rotations,
                   float theta) override {
    inner_.rotate_keys(storage, rotations, theta);
  }
  // The step composed from this object's ops (so a subclass's overrides see it).
  void run_step(const Model& model, std::span<const StepToken> tokens, std::span<float> logits,
                std::span<int> greedy) override {
    step_.run(*this, model, tokens, logits, greedy);
  }

 protected:
  Backend& inner() const { return inner_; }

 private:
  Backend& inner_;
  HostStep step_;
};

}  // namespace kvscope
