// Token eviction's key re-rotation on host tiles (the CPU backend's rotate_keys): the twin of the
// CUDA backend's kv_rotate_keys_kernel.
#pragma once

#include <span>

#include "engine/kv/kv_storage.h"

namespace kvscope::cpu {

// Rotates each listed key by its delta more RoPE positions (base `theta`) in every layer and stores
// it again in the pool's K format (fp32 in place; other formats decoded, rotated and re-encoded as
// a K/V write encodes them). RoPE(p) then RoPE(delta) is RoPE(p + delta). Per-token K formats only
// (KvStorage::check_rotations).
void rotate_keys(KvStorage& storage, std::span<const KvKeyRotation> rotations, float theta);

}  // namespace kvscope::cpu
