// See cuda_sim_backend.h.
#include "kernels/backend/cuda_sim_backend.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/kv/kv_storage.h"
#include "kernels/ops/kv_write.cuh"
#include "kernels/ops/matmul.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "kernels/ops/rmsnorm.cuh"
#include "kernels/ops/rope.cuh"
#include "kernels/ops/swiglu.cuh"

namespace kvscope {
namespace {

constexpr const char* kFlag = "--backend cuda-sim";

// The fp32 paged pool of `view` for `layer`, as the kernels address it.
struct Pool {
  float* k = nullptr;
  float* v = nullptr;
  long tile_floats = 0;
  std::vector<int> table;
};

Pool pool_of(const KvSeqView& view, int layer) {
  const KvLayout& L = view.storage->layout();
  if (view.mla != nullptr || L.is_latent())
    throw Error(kFlag, "expected a K/V cache, got an MLA latent cache (not supported yet)");
  if (L.k_format.dtype != KvDtype::kF32 || L.v_format.dtype != KvDtype::kF32) {
    throw Error(kFlag, "expected fp32 K/V (--kv-dtype fp32), got " + L.k_format.name() + "/" +
                           L.v_format.name() + " (quantize-on-write kernels are not written yet)");
  }
  Pool p;
  p.k = reinterpret_cast<float*>(view.storage->tile(layer, KvKind::kKey, BlockId(0)));
  p.v = reinterpret_cast<float*>(view.storage->tile(layer, KvKind::kValue, BlockId(0)));
  p.tile_floats = static_cast<long>(L.tile_bytes(KvKind::kKey) / sizeof(float));
  p.table.reserve(view.blocks.size());
  for (BlockId b : view.blocks) p.table.push_back(static_cast<int>(b.value));
  return p;
}

class CudaSimBackend final : public Backend {
 public:
  std::string name() const override { return "cuda-sim"; }
  void matmul(float* out, const float* x, const float* w, int n, int d) override {
    kernels::launch_matmul(out, x, w, 1, n, d);
  }
  void matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs) override {
    for (const MatmulOut& o : outs) {
      if (o.q.data != nullptr) {
        throw Error(kFlag,
                    "expected fp32 weights (--weight-format f32), got a quantized matrix "
                    "(quantized matmul kernels are not written yet)");
      }
      kernels::launch_matmul(o.out, x, o.w, m, n, o.d);
    }
  }
  void rmsnorm(float* out, const float* x, const float* w, int n, float eps) override {
    kernels::launch_rmsnorm(out, x, w, 1, n, eps, 128);
  }
  void rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim,
            float theta) override {
    kernels::launch_rope(q, k, &pos, 1, q_dim, kv_dim, head_dim, theta);
  }
  void swiglu(float* hb, const float* hb2, int n) override {
    const unsigned blocks = std::clamp((static_cast<unsigned>(n) + 255u) / 256u, 1u, 64u);
    kernels::launch_swiglu(hb, hb2, n, blocks, 256);
  }
  void kv_write(const KvSeqView& view, int layer, const float* k, const float* v) override {
    const Pool p = pool_of(view, layer);
    const KvLayout& L = view.storage->layout();
    kernels::launch_kv_write(p.k, p.v, p.tile_floats, p.table.data(), view.write_slot(),
                             L.block_size, k, v, L.kv_heads * L.head_dim);
  }
  void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape,
                       const float* q, float* out, int /*query_pos*/,
                       AttentionObserver* observer) override {
    if (observer != nullptr)
      throw Error(kFlag, "attention capture (heatmaps, H2O/TOVA scores) is not supported yet");
    if (view.slot_live != nullptr || view.slot_pos != nullptr)
      throw Error(kFlag, "token eviction is not supported yet");
    constexpr int kMaxSlots = static_cast<int>(sim::kMaxSharedBytes / sizeof(float)) - 64;
    if (view.num_slots > kMaxSlots) {
      throw Error(kFlag, "expected a context of at most " + std::to_string(kMaxSlots) +
                             " tokens (one-pass attention; split-K is not written yet), got " +
                             std::to_string(view.num_slots));
    }
    Pool p = pool_of(view, layer);
    kernels::PagedKv kv;
    kv.k = p.k;
    kv.v = p.v;
    kv.tile_floats = p.tile_floats;
    kv.block_table = p.table.data();
    kv.num_slots = view.num_slots;
    kv.block_size = view.block_size();
    kv.kv_heads = shape.kv_heads;
    kv.head_dim = shape.head_dim;
    kernels::launch_paged_attention(out, q, kv, shape.n_heads, 128);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_sim_backend() {
  return std::make_unique<CudaSimBackend>();
}

}  // namespace kvscope
