// Transformer: the Llama forward pass for one token, reading and writing K/V only through a
// KvSeqView. It never knows which allocator, eviction policy or KV format is behind the view.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/checkpoint.h"

namespace kvscope {

class Transformer {
 public:
  Transformer(std::shared_ptr<const Model> model, Backend& backend);

  const ModelConfig& config() const { return model_->config(); }
  const Model& model() const { return *model_; }
  Backend& backend() { return backend_; }

  // Runs `token` at position `pos`. The view must have a slot reserved for it (its write slot).
  // Returns the logits [vocab], valid until the next call.
  std::span<float> forward(int token, int pos, const KvSeqView& kv,
                           AttentionObserver* observer = nullptr);

 private:
  std::shared_ptr<const Model> model_;
  Backend& backend_;
  // Activations for one token (run state, reused every call).
  std::vector<float> x_;       // [dim] residual stream
  std::vector<float> xb_;      // [max(dim, q_dim)] normed input / attention output
  std::vector<float> xb2_;     // [dim] projection output
  std::vector<float> q_;       // [q_dim]
  std::vector<float> k_;       // [kv_dim]
  std::vector<float> v_;       // [kv_dim]
  std::vector<float> hb_;      // [hidden]
  std::vector<float> hb2_;     // [hidden]
  std::vector<float> logits_;  // [vocab]
};

}  // namespace kvscope
