// See cuda_backend.h (what the CUDA backend does) and cuda_backend_impl.h (how its code is split).
// Here: the public functions, the GEMMs, and the device copies of the KV pools.
#include "kernels/backend/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/kv/kv_storage.h"
#include "kernels/backend/cuda_backend_impl.h"

namespace kvscope {

GemmType parse_gemm_type(const std::string& value, const std::string& flag) {
  if (value == "f32") return GemmType::kF32;
  if (value == "f16") return GemmType::kF16;
  if (value == "bf16") return GemmType::kBF16;
  throw Error(flag, "expected f32, f16 or bf16, got \"" + value + "\"");
}

const char* gemm_type_name(GemmType type) {
  switch (type) {
    case GemmType::kF32:
      return "f32";
    case GemmType::kF16:
      return "f16";
    case GemmType::kBF16:
      return "bf16";
  }
  return "?";
}

device::KvCode cuda_kv_code(const KvFormat& f, KvKind kind) {
  const bool key = kind == KvKind::kKey;
  switch (f.dtype) {
    case KvDtype::kF32:
      return device::KvCode::kF32;
    case KvDtype::kF16:
      return device::KvCode::kF16;
    case KvDtype::kBF16:
      return device::KvCode::kBF16;
    case KvDtype::kInt8:
      return device::KvCode::kInt8;
    case KvDtype::kFp8E4M3:
      return device::KvCode::kE4M3;
    case KvDtype::kFp8E5M2:
      return device::KvCode::kE5M2;
    case KvDtype::kInt4:
      return device::KvCode::kInt4;
    case KvDtype::kInt2:
      return device::KvCode::kInt2;
    case KvDtype::kKivi4:  // keys per channel; values per token, stored as int4 stores them
      return key ? device::KvCode::kKiviKey4 : device::KvCode::kInt4;
    case KvDtype::kKivi2:
      return key ? device::KvCode::kKiviKey2 : device::KvCode::kInt2;
  }
  throw InternalError("cuda backend", "a K/V format without a kernel code");
}

std::optional<device::Traffic> cuda_traffic(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr) return std::nullopt;
  return cuda->traffic();
}

std::unique_ptr<Backend> make_cuda_sim_backend(GemmType weights) {
  return std::make_unique<CudaBackend>(device::make_emulated_device_ops(), weights,
                                       "--backend cuda-sim");
}

std::unique_ptr<Backend> make_cuda_backend(GemmType weights, std::string* why) {
  auto ops = device::make_cuda_device_ops(why);
  if (ops == nullptr) return nullptr;
  return std::make_unique<CudaBackend>(std::move(ops), weights, "--backend cuda");
}

void CudaBackend::refuse_quantized() const {
  throw Error(flag_,
              "expected fp32 weights (--weight-format f32), got a quantized matrix "
              "(quantized-weight GEMMs are not written yet)");
}

const void* CudaBackend::gemm_input(const float* dx, std::size_t count) {
  if (weights_type_ == GemmType::kF32) return dx;
  auto* x16 = scratch(x16_, count * 2).as<std::uint16_t>();
  ops_->to_16bit(x16, dx, static_cast<long>(count), weights_type_ == GemmType::kBF16);
  return x16;
}

void CudaBackend::gemm(float* dy, const void* dx, const float* w, int m, int n, int d,
                       bool accumulate) {
  ops_->gemm(dy, dx, weight(w, static_cast<std::size_t>(d) * n, weights_type_), weights_type_, m, n,
             d, accumulate);
}

void CudaBackend::check_pool_kind(const KvSeqView& view) const {
  const KvLayout& L = view.storage->layout();
  if ((view.mla != nullptr) != L.is_latent())
    throw InternalError(flag_, "an MLA view over a K/V pool, or a latent pool without its codec");
  if (view.selector != nullptr) {
    throw Error(flag_, "sparse key selection runs on the CPU backend only (use --backend cpu)");
  }
  if (L.is_latent() && (L.k_format.is_kivi() || L.v_format.is_kivi())) {
    throw Error(flag_, "expected a per-token format for MLA latents, got " + L.k_format.name() +
                           " (KIVI latents are not written for the device)");
  }
}

DeviceKvMirror& CudaBackend::pool(const KvSeqView& view, bool may_create) {
  KvStorage& s = *view.storage;
  check_pool_kind(view);
  std::erase_if(pools_, [](const auto& p) { return p.second->expired(); });
  for (auto it = pools_.begin(); it != pools_.end(); ++it) {
    if (it->first != s.id()) continue;
    pools_.splice(pools_.begin(), pools_, it);
    return *pools_.front().second;
  }
  if (!may_create) {
    throw InternalError(flag_,
                        "the KV pool has slots the device never saw (a sequence that began "
                        "on another backend)");
  }
  auto made = std::make_shared<DeviceKvMirror>(*ops_, flag_, s);
  DeviceKvMirror& p = *made;
  s.attach_device(made);
  pools_.emplace_front(s.id(), std::move(made));
  return p;
}

const int* CudaBackend::block_table(const KvSeqView& view) {
  table_host_.resize(view.blocks.size());
  for (std::size_t i = 0; i < view.blocks.size(); ++i)
    table_host_[i] = static_cast<int>(view.blocks[i].value);
  return stage(table_, table_host_.data(), table_host_.size());
}

// Each sequence's table is staged once: its views share one table (a prefill chunk's earlier
// queries may see a prefix of it), staged as long as the longest. Uploaded only when it changed,
// so the step's K/V writes and every layer's attention batch share one upload.
const int* CudaBackend::stage_tables(std::span<const AttentionQuery> queries,
                                     std::vector<int>& offsets) {
  std::unordered_map<const BlockId*, std::size_t> longest;
  for (const AttentionQuery& a : queries) {
    std::size_t& n = longest[a.view.blocks.data()];
    n = std::max(n, a.view.blocks.size());
  }
  std::unordered_map<const BlockId*, int> staged;
  tables_host_.clear();
  offsets.resize(queries.size());
  for (std::size_t i = 0; i < queries.size(); ++i) {
    const BlockId* blocks = queries[i].view.blocks.data();
    const auto [it, fresh] = staged.try_emplace(blocks, static_cast<int>(tables_host_.size()));
    if (fresh) {
      for (std::size_t b = 0; b < longest[blocks]; ++b)
        tables_host_.push_back(static_cast<int>(blocks[b].value));
    }
    offsets[i] = it->second;
  }
  return batch_tables_.stage(*ops_, tables_host_);
}

}  // namespace kvscope
