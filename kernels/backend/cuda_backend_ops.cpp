// The CUDA backend's op-level methods (cuda_backend_impl.h): each takes host pointers, copies its
// inputs up into scratch buffers, runs one kernel or GEMM (or the K/V write and attention of
// cuda_backend_kv.cpp) and copies its outputs back. The tests hold run_step to these.
#include <algorithm>
#include <cstddef>
#include <span>

#include "engine/common/error.h"
#include "engine/mla/mla_codec.h"
#include "kernels/backend/cuda_backend_impl.h"

namespace kvscope {

void CudaBackend::matmul(float* out, const float* x, const float* w, int n, int d) {
  const MatmulOut o{out, w, d};
  matmul_batch(x, 1, n, std::span(&o, 1));
}

void CudaBackend::matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs) {
  matmul_batch(x, 1, n, outs);
}

void CudaBackend::matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs) {
  guard([&] {
    const std::size_t xs = static_cast<std::size_t>(m) * n;
    const void* dx = gemm_input(stage(x_, x, xs), xs);
    for (const MatmulOut& o : outs) {
      if (o.q.data != nullptr) refuse_quantized();
      const std::size_t ys = static_cast<std::size_t>(m) * o.d;
      auto* dy = scratch(y_, ys * 4).as<float>();
      gemm(dy, dx, o.w, m, n, o.d, /*accumulate=*/false);
      ops_->to_host(o.out, dy, ys * 4);
    }
  });
}

void CudaBackend::rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
  guard([&] {
    float* dx = stage(x_, x, static_cast<std::size_t>(n));
    const auto* dw =
        static_cast<const float*>(weight(w, static_cast<std::size_t>(n), GemmType::kF32));
    auto* dy = scratch(y_, static_cast<std::size_t>(n) * 4).as<float>();
    ops_->rmsnorm(dy, dx, dw, 1, n, eps);
    ops_->to_host(out, dy, static_cast<std::size_t>(n) * 4);
  });
}

void CudaBackend::rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim,
                       float theta) {
  guard([&] {
    float* dq = stage(x_, q, static_cast<std::size_t>(q_dim));
    float* dk = stage(y_, k, static_cast<std::size_t>(kv_dim));
    int* dpos = stage(ints_, &pos, 1);
    ops_->rope(dq, dk, dpos, 1, q_dim, kv_dim, head_dim, theta);
    ops_->to_host(q, dq, static_cast<std::size_t>(q_dim) * 4);
    ops_->to_host(k, dk, static_cast<std::size_t>(kv_dim) * 4);
  });
}

void CudaBackend::swiglu(float* hb, const float* hb2, int n) {
  guard([&] {
    float* da = stage(x_, hb, static_cast<std::size_t>(n));
    float* db = stage(y_, hb2, static_cast<std::size_t>(n));
    ops_->swiglu(da, db, n);
    ops_->to_host(hb, da, static_cast<std::size_t>(n) * 4);
  });
}

void CudaBackend::rotate_keys(KvStorage& storage, std::span<const KvKeyRotation> rotations,
                              float theta) {
  guard([&] {
    if (!storage.rotate_keys_on_device(rotations, theta))
      throw InternalError(flag_, "key re-rotation in a KV pool the device never held");
  });
}

void CudaBackend::kv_write(const KvSeqView& view, int layer, const float* k, const float* v) {
  guard([&] {
    const KvLayout& L = view.storage->layout();
    const auto kv_dim = static_cast<std::size_t>(
        view.mla != nullptr ? view.mla->kv_heads * view.mla->head_dim : L.kv_heads * L.head_dim);
    kv_write_on_device(view, layer, view.mla != nullptr ? nullptr : block_table(view),
                       stage(x_, k, kv_dim), stage(y_, v, kv_dim));
  });
}

void CudaBackend::paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape,
                                  const float* q, float* out, int query_pos,
                                  AttentionObserver* observer) {
  const AttentionQuery a{view, q, out, query_pos, observer};
  attention_batch(layer, shape, std::span(&a, 1));
}

void CudaBackend::attention_batch(int layer, const AttentionShape& shape,
                                  std::span<const AttentionQuery> queries) {
  guard([&] {
    const std::size_t qn = static_cast<std::size_t>(shape.n_heads) * shape.head_dim;
    batch_q_.resize(qn * queries.size());
    for (std::size_t i = 0; i < queries.size(); ++i)
      std::copy_n(queries[i].q, qn, batch_q_.begin() + static_cast<long>(i * qn));
    const float* dq = stage(x_, batch_q_.data(), batch_q_.size());
    auto* dout = scratch(y_, batch_q_.size() * 4).as<float>();
    attention_on_device(layer, shape, queries, dq, dout);
    ops_->to_host(batch_q_.data(), dout, batch_q_.size() * 4);  // reused for the outputs
    for (std::size_t i = 0; i < queries.size(); ++i)
      std::copy_n(batch_q_.begin() + static_cast<long>(i * qn), qn, queries[i].out);
  });
}

}  // namespace kvscope
