// CudaBackend: the class behind make_cuda_backend and make_cuda_sim_backend (cuda_backend.h says
// what it does; this header is internal to kvscope_cuda). Its methods live by concern:
//   cuda_backend.cpp        the public functions, GEMMs, the device KV pools, block tables
//   cuda_backend_ops.cpp    the op-level Backend methods (host pointers in, host pointers out)
//   cuda_backend_kv.cpp     K/V writes and attention on device memory (shared by both paths)
//   cuda_backend_step.cpp   run_step: the whole step on the device
// What it owns besides scratch buffers has a type of its own: DeviceWeightCache (the weights),
// DeviceKvMirror (a KV pool's bytes, with its KiviOpenGroups), MlaOnDevice (MLA latent caches).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/checkpoint.h"
#include "kernels/backend/attention_timing.h"
#include "kernels/backend/cuda_backend.h"
#include "kernels/backend/cuda_mla.h"
#include "kernels/backend/device_buffer.h"
#include "kernels/backend/device_guard.h"
#include "kernels/backend/device_kv_mirror.h"
#include "kernels/backend/device_ops.h"
#include "kernels/backend/device_weight_cache.h"

namespace kvscope {

class CudaBackend final : public Backend {
 public:
  // `flag` names the backend (--backend cuda or cuda-sim) in every error it throws.
  CudaBackend(std::unique_ptr<device::DeviceOps> ops, GemmType weights, std::string flag)
      : ops_(std::move(ops)), weights_type_(weights), flag_(std::move(flag)) {}

  std::string name() const override { return ops_->name(); }

  // Op-level methods (cuda_backend_ops.cpp): inputs copied up, outputs back, per call.
  void matmul(float* out, const float* x, const float* w, int n, int d) override;
  void matmul_shared_input(const float* x, int n, std::span<const MatmulOut> outs) override;
  void matmul_batch(const float* x, int m, int n, std::span<const MatmulOut> outs) override;
  void rmsnorm(float* out, const float* x, const float* w, int n, float eps) override;
  void rope(float* q, float* k, int pos, int q_dim, int kv_dim, int head_dim, float theta) override;
  void swiglu(float* hb, const float* hb2, int n) override;
  // The position shift on the device's copy of the pool (kv_rotate_keys_kernel, through the
  // KvDeviceBytes the pool attached when it was made).
  void rotate_keys(KvStorage& storage, std::span<const KvKeyRotation> rotations,
                   float theta) override;
  void kv_write(const KvSeqView& view, int layer, const float* k, const float* v) override;
  void paged_attention(const KvSeqView& view, int layer, const AttentionShape& shape,
                       const float* q, float* out, int query_pos,
                       AttentionObserver* observer) override;
  void attention_batch(int layer, const AttentionShape& shape,
                       std::span<const AttentionQuery> queries) override;

  // The whole step on the device (cuda_backend_step.cpp): embeddings go up, the logits of the
  // wanted tokens come back, and nothing else crosses the bus but the step's metadata
  // (positions, block tables, live maps) and captured attention rows. Each op is the kernel or
  // GEMM the op-by-op path runs, in the same order, so the two give the same logits
  // (CudaSimBackend.TheWholeStepOnTheDeviceEqualsItsOpsOneByOne).
  void run_step(const Model& model, std::span<const StepToken> tokens, std::span<float> logits,
                std::span<int> greedy) override;

  device::Traffic traffic() const { return ops_->traffic(); }

 private:
  struct Step;  // one run_step's device rows and metadata (cuda_backend_step.cpp)
  // KIVI: where a sequence's open group of a kind starts and its rows' offset in the pool's
  // open-group arena; {num_slots, -1} when there is none (not KIVI, or no partial group).
  struct OpenGroup {
    int start = 0;
    long at = -1;
  };
  // What the attention batch's metadata asks of the launch: the longest sequence and the floats
  // of the captured softmax rows (0: no query is observed).
  struct BatchExtent {
    int max_slots = 0;
    long weight_floats = 0;
  };

  template <class F>
  void guard(F&& body) {
    guarded(flag_, body);
  }
  [[noreturn]] void refuse_quantized() const;

  // --- GEMMs and weights (cuda_backend.cpp)
  // The GEMMs' input: dx itself for fp32 weights, else dx rounded once to the weights' 16-bit
  // type (into x16_, which holds it until the next call).
  const void* gemm_input(const float* dx, std::size_t count);
  // dy[m][d] (= or +=) W x for the host weights w [d][n], uploaded in the GEMM type on first use.
  void gemm(float* dy, const void* dx, const float* w, int m, int n, int d, bool accumulate);
  // The device copy of host weights w[count] in `type` (DeviceWeightCache).
  const void* weight(const float* w, std::size_t count, GemmType type) {
    return weights_.get(w, count, type);
  }

  // --- The device KV pools and block tables (cuda_backend.cpp)
  // The device copy of the view's pool, keyed by the storage's id and kept while the storage
  // lives (copies of destroyed storages are freed on the next call). It is made when a sequence
  // writes its first slot (may_create), and from then on holds the pool's bytes; needing one for
  // a sequence that already has slots means the device never saw them: a bug, refused rather
  // than computed on uninitialized memory.
  DeviceKvMirror& pool(const KvSeqView& view, bool may_create);
  // Throws when the view and its pool disagree on MLA, or the pool is a KIVI latent cache.
  void check_pool_kind(const KvSeqView& view) const;
  // The view's block table on the device.
  const int* block_table(const KvSeqView& view);
  // The queries' block tables in one device buffer, each sequence's once (see the .cpp);
  // offsets[i]: where query i's table starts.
  const int* stage_tables(std::span<const AttentionQuery> queries, std::vector<int>& offsets);

  // --- K/V writes and attention on device memory (cuda_backend_kv.cpp)
  void kv_write_on_device(const KvSeqView& view, int layer, const int* table, const float* dk,
                          const float* dv);
  void stage_kivi(DeviceKvMirror& p, const KvSeqView& view, const int* table, int layer,
                  KvKind kind, const float* row, const device::DeviceTiles& tiles);
  OpenGroup open_group(const DeviceKvMirror& p, const KvSeqView& view, int layer,
                       KvKind kind) const;
  // An arena offset as the batch kernel's int metadata.
  int int_offset(long at) const;
  void attention_on_device(int layer, const AttentionShape& shape,
                           std::span<const AttentionQuery> queries, const float* dq, float* dout);
  BatchExtent fill_batch_metadata(const DeviceKvMirror& p, int layer, const AttentionShape& shape,
                                  std::span<const AttentionQuery> queries);
  void report_batch_capture(int layer, const AttentionShape& shape,
                            std::span<const AttentionQuery> queries, const float* dw,
                            long weight_floats);
  void attend_on_device(const AttentionQuery& a, int layer, const AttentionShape& shape,
                        const float* dq, float* dout);
  void time_batch_attention(AttentionTiming& t, const AttentionShape& shape,
                            std::span<const AttentionQuery> queries,
                            const std::function<void()>& launch);
  void paged_attention_on_device(DeviceKvMirror& p, const KvSeqView& view, int layer,
                                 const AttentionShape& shape, const float* dq, float* dout,
                                 float* dw);
  static int slot_position(const KvSeqView& view, int slot) {
    return view.slot_pos != nullptr ? view.slot_pos[slot] : slot;
  }
  // A sequence's latent cache in `layer`, as the MLA kernels read it (block table and live map
  // staged on the device). Throws kvscope::Error when the pool is not the codec's shape.
  LatentSequence latent_sequence(const DeviceKvMirror& p, const KvSeqView& view, int layer);

  // --- The whole step (cuda_backend_step.cpp)
  void step_on_device(const Model& model, std::span<const StepToken> tokens,
                      std::span<float> logits, std::span<int> greedy);
  void upload_step_inputs(Step& s, std::span<const StepToken> tokens);
  void attention_block(const Step& s, int l, std::span<const StepToken> tokens);
  void ffn_block(const Step& s, int l);
  void step_logits(const Step& s, std::span<const StepToken> tokens, std::span<float> logits,
                   std::span<int> greedy);
  // Layer l's fp32 rows of a projection; a model that keeps the matrix quantized is refused.
  const float* dense(const Step& s, const float* rows,
                     std::vector<QuantMatrix> NativeWeights::*which, int l) const;
  // A norm's weights [dim] on the device, fp32.
  const float* norm_weights(const Step& s, const float* host);

  // --- Scratch buffers
  // A scratch buffer of at least `bytes`, grown (never shrunk) as needed.
  DeviceBuffer& scratch(DeviceBuffer& b, std::size_t bytes) { return grown(*ops_, b, bytes); }
  // `count` values of host data copied into scratch buffer b; returns its device pointer.
  template <class T>
  T* stage(DeviceBuffer& b, const T* host, std::size_t count) {
    T* d = scratch(b, count * sizeof(T)).template as<T>();
    ops_->to_device(d, host, count * sizeof(T));
    return d;
  }

  // Activations of one step on the device, one row per token (grown to the largest step, then
  // reused): the residual stream, a norm's output, Q/K/V, attention's output, the FFN's hidden
  // pair, the wanted tokens' logits and greedy tokens, positions.
  struct StepBuffers {
    DeviceBuffer x, xn, q, k, v, att, hb, hb2, logits, greedy, pos;
  };

  std::unique_ptr<device::DeviceOps> ops_;
  MlaOnDevice mla_{*ops_};  // after ops_: they keep a reference to it
  DeviceWeightCache weights_{*ops_};
  GemmType weights_type_;
  std::string flag_;
  // The device copies of the KV pools this backend wrote, most recently used first.
  std::list<std::pair<std::uint64_t, std::shared_ptr<DeviceKvMirror>>> pools_;
  DeviceBuffer x_, y_, x16_, ints_, table_, live_, attention_;
  CachedUpload<int> batch_tables_, batch_meta_;
  CachedUpload<std::uint8_t> batch_live_;
  std::vector<int> table_host_, tables_host_, meta_host_;
  std::vector<std::uint8_t> live_host_;
  std::vector<float> batch_q_;
  std::vector<float> attention_host_;
  StepBuffers step_;
  std::vector<int> table_at_;  // stage_tables' offsets for the current step's queries
  std::vector<float> embed_host_;
  std::vector<int> pos_host_;
};

}  // namespace kvscope
