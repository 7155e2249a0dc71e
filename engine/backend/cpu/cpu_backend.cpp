// CpuBackend: the Backend interface over the free functions in cpu_ops.
#include <omp.h>

#include <algorithm>

#include "engine/backend/cpu/cpu_ops.h"

namespace kvscope {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  std::string name() const override { return "cpu"; }
  void matmul(float* out, const float* x, const float* w, int n, int d) override {
    cpu::matmul(out, x, w, n, d);
  }
  void matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs) override {
    cpu::matmul_shared_input(x, n, outs);
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
    cpu::kv_write(view, layer, k, v);
  }
  void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape,
                       const float* q, float* out, int query_pos,
                       AttentionObserver* observer) override {
    cpu::paged_attention(view, layer, shape, q, out, query_pos, observer, scratch_);
  }

 private:
  std::vector<float> scratch_;  // [n_heads][num_slots] attention weights
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace kvscope
