// Decodes one payload of a vLLM / SGLang KV-cache event stream (the msgpack frame of a ZeroMQ
// message, see docs/attach.md) into plain structs. No msgpack type appears here: the decoder is
// the only code that sees the wire bytes, and it never throws and never aborts on bad input.
//
// Accepted layouts (both engines, every version we know of):
//   EventBatch  = [ts, events] | [ts, events, data_parallel_rank|nil]
//               | {"ts": ..., "events": [...], "data_parallel_rank": ...}      (newer vLLM)
//   BlockStored = ["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size,
//                  lora_id|nil, medium|nil, lora_name|nil, extra_keys|nil, group_idx|nil,
//                  kv_cache_spec_kind|nil, kv_cache_spec_sliding_window|nil]
//                 (fields after block_size may be absent)
//               | {"type": "BlockStored", ...}: the same names, plus vLLM 0.33's locality,
//                 ownership, session_id, lookahead_token_ids and SGLang 0.5.23's cache_salt,
//                 session_id (the engines' msgspec structs: tagged maps, nil fields omitted)
//   BlockRemoved = ["BlockRemoved", block_hashes, medium|nil, group_idx|nil]
//               | {"type": ..., block_hashes, medium, group_idx, locality, ownership}
//   AllBlocksCleared = ["AllBlocksCleared"] | {"type": "AllBlocksCleared"}
// Block hashes are uint64, int64 (SGLang, older vLLM) or raw bytes (vLLM's sha256 digests).
// An offload store may be a placeholder: token_ids = [] and block_size = 0 (vLLM's CPU and
// STORAGE tiers report which hashes they hold, not their tokens).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

enum class KvEventKind : std::uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
inline constexpr std::size_t kNumKvEventKinds = 3;
// "BlockStored", "BlockRemoved", "AllBlocksCleared": the engines' own tags.
std::string_view kv_event_kind_name(KvEventKind kind);

// One step of the fingerprints below: `v` folded into `h` through splitmix64's finalizer.
inline std::uint64_t kv_fingerprint_mix(std::uint64_t h, std::uint64_t v) {
  std::uint64_t x = h ^ v;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A 64-bit fingerprint of `n` token ids: what a lookup compares a prompt's block with a stored
// block by (the tokens the stream carries, never the engine's own hash function).
inline std::uint64_t kv_token_fingerprint(const std::int64_t* ids, std::size_t n) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (std::size_t i = 0; i < n; ++i) h = kv_fingerprint_mix(h, static_cast<std::uint64_t>(ids[i]));
  return h | 1;  // never 0, which means "no tokens"
}

// One event. Hashes are 64-bit keys: an integer hash as its two's-complement bits (so SGLang's
// negative int64 and vLLM's uint64 of the same value agree), a bytes hash as its last 8 bytes read
// big-endian (what vLLM itself publishes when VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES is set).
struct KvStreamEvent {
  KvEventKind kind = KvEventKind::kAllBlocksCleared;
  std::vector<std::uint64_t> block_hashes;   // stored/removed; empty for a clear
  std::optional<std::uint64_t> parent_hash;  // BlockStored: nil = the first block of a prefix
  std::int64_t num_token_ids = 0;            // BlockStored: the length of token_ids
  std::int64_t block_size = 0;               // BlockStored: tokens per block; 0 = a placeholder
  // BlockStored: per block hash, kv_token_fingerprint of its block_size token ids. Empty when
  // token_ids do not split into one full block per hash (a placeholder store with no tokens).
  std::vector<std::uint64_t> block_tokens;
  // BlockStored: per block hash, a fingerprint of what its extra_keys entry adds to the hash
  // besides the LoRA name (multimodal inputs, a cache salt); 0 for none. Empty = all 0.
  std::vector<std::uint64_t> block_extra;
  std::optional<std::int64_t> lora_id;
  std::string lora_name;       // "" when nil or absent
  std::string medium;          // "" when nil or absent (the engine's default tier, GPU)
  std::int64_t group_idx = 0;  // KV cache group (hybrid models); nil or absent = 0
  std::string spec_kind;       // kv_cache_spec_kind, "" when nil or absent
  std::optional<std::int64_t> sliding_window;
  std::string locality;    // vLLM: "LOCAL" or "REMOTE" relative to the publisher; "" = unspecified
  std::string ownership;   // vLLM: the secondary offloading tier that made the event; "" = none
  std::string session_id;  // the session whose request stored the blocks (attribution only)
  std::string cache_salt;  // SGLang: the salt the stored blocks' hashes are namespaced by
};

struct KvEventBatch {
  double ts = 0.0;                      // the engine's wall clock, seconds since the epoch
  std::optional<std::int64_t> dp_rank;  // data_parallel_rank when the payload carries it
  std::vector<KvStreamEvent> events;    // known events, in order
  std::int64_t skipped_events = 0;      // events with a tag we do not know (skipped, not fatal)
  std::int64_t skipped_fields = 0;      // map keys / positional fields we do not know (skipped)
};

// Bounds on what one payload may make the decoder hold. msgpack declares container sizes up
// front; before any allocation the declared element counts of the whole payload are summed and
// checked against its byte length (a valid payload spends at least one byte per element), so a
// hostile 10-byte payload claiming 4 billion elements is refused, not allocated.
struct KvDecodeLimits {
  std::size_t max_payload_bytes = std::size_t{64} << 20;  // vLLM batches are KBs to a few MBs
  std::size_t max_depth = 16;                             // real payloads nest 5 deep
  std::size_t max_string_bytes = 4096;                    // tags, media, LoRA names (not hashes)
};

// Decodes `payload` into `out` (emptied first, its storage reused). Returns true on success; on
// malformed input returns false, leaves `out` empty and sets `error` to a one-line reason naming
// the field, what was expected and what came ("events[2]: block_hashes[0]: expected an integer
// or bytes hash, got a float"). Never throws for any input.
bool decode_kv_event_batch(std::string_view payload, KvEventBatch& out, std::string& error,
                           const KvDecodeLimits& limits = {});

}  // namespace kvscope
