// The MLA latent cache on the CUDA backend (engine/mla/mla_codec.h; kernels/ops/mla.cuh): a
// token's latent (and mode B's RoPE keys) written into the pool's tiles, and one query's
// attention over a sequence's latents, mode A (every slot's K and V rebuilt, RoPE re-applied at
// its position, then paged attention over the rebuilt rows) or mode B (absorbed: attention on the
// latents, never a token's K or V). It keeps the codec's matrices on the device (fp32, uploaded on
// first use, replaced when another codec comes) and its own scratch buffers. Everything it is
// handed and returns is device memory, except the slot positions (host).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend/device_buffer.h"
#include "kernels/backend/device_ops.h"

namespace kvscope {

struct MlaCodec;

// One sequence's latent cache in one layer, on the device.
struct LatentSequence {
  device::DeviceTiles latents, rope;  // the layer's K-region and V-region tiles
  const int* block_table = nullptr;
  int num_slots = 0;
  int block_size = 0;
  const unsigned char* live = nullptr;  // [num_slots] or nullptr
};

class MlaOnDevice {
 public:
  explicit MlaOnDevice(device::DeviceOps& ops) : ops_(ops) {}

  // k and v [kv_heads * head_dim] (k post-RoPE at pos) of the token at `slot` of `seq`.
  void write(const MlaCodec& m, int layer, const float* k, const float* v, int pos,
             const LatentSequence& seq, int slot);
  // out [n_heads][head_dim] for q (post-RoPE at query_pos) over seq's num_slots slots, whose
  // positions are positions[t] (host); softmax rows into weights [n_heads][num_slots] when set.
  void attend(const MlaCodec& m, int layer, const float* q, float* out, int query_pos,
              const LatentSequence& seq, const std::vector<int>& positions, float* weights);

 private:
  struct Layer {
    DeviceBuffer u_t, w_uk, w_uv;  // the codec layer's matrices, fp32
  };
  const Layer& matrices(const MlaCodec& m, int layer);
  template <class T>
  const T* upload(DeviceBuffer& b, const std::vector<T>& host);

  device::DeviceOps& ops_;
  std::uint64_t codec_id_ = 0;  // whose matrices `layers_` holds (0: none)
  std::vector<Layer> layers_;
  DeviceBuffer nope_index_, rope_index_;
  DeviceBuffer row_, rope_, c_, keys_, values_, q_lat_, q_rope_, ctx_, ints_;
  DeviceBuffer zero_table_;  // {0}: mode A's rebuilt rows as one block
};

}  // namespace kvscope
