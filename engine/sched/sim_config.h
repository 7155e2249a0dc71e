// Simulator inputs: the cache/scheduler configuration, the requests, and the policy names used by
// scenario files and the CLI.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/evict/token_evictor.h"
#include "engine/kv/cache_manager.h"
#include "engine/mla/mla_codec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/sampler.h"
#include "engine/model/tokenizer.h"
#include "engine/prefix/eviction_policy.h"
#include "engine/prefix/prefix_index.h"
#include "engine/sparse/key_selector.h"
#include "engine/tiers/kv_tier_store.h"

namespace kvscope {

enum class PreemptionMode {
  kRecompute,  // free the victim's blocks, requeue it at the front, recompute its tokens later
  kSwap,       // copy the victim's K/V into the host tier, bring it back later (falls back to
               // recompute when the host tier is full)
};

enum class VictimPolicy {
  kLastAdmitted,    // the most recently admitted running request (vLLM's default)
  kLongest,         // the running request holding the most tokens
  kLowestPriority,  // the smallest SimRequest::priority (ties: the last admitted)
};

struct SimConfig {
  std::string title;
  int block_size = 16;  // tokens per block
  int num_blocks = 64;  // device pool size in blocks
  AllocatorKind allocator = AllocatorKind::kPaged;
  int max_seq_len = 0;  // contiguous reservation per request in tokens; 0 = model context
  PreemptionMode preemption = PreemptionMode::kRecompute;
  VictimPolicy victim = VictimPolicy::kLastAdmitted;
  int host_blocks = 0;          // swap tier capacity in blocks
  int max_tokens_per_step = 0;  // per-step token budget (chunked prefill); 0 = unlimited
  int max_running = 0;          // cap on running requests; 0 = unlimited
  SamplerConfig sampler;        // temperature 0 = greedy; request i samples with seed + i
  KvFormat k_format;
  KvFormat v_format;
  int threads = 1;  // CPU threads for the forward pass
  // What runs the forward pass; empty = the CPU backend with `threads` threads. A backend that
  // keeps the KV pool in its own memory (the CUDA backends) refuses a run whose pool bytes
  // change outside it: swap-in, copy-on-write of shared prefix blocks, token-eviction compaction.
  std::function<std::unique_ptr<Backend>()> make_backend;
  // Prefix caching (paged only): full prompt blocks are indexed and mapped into later requests'
  // tables, skipping their prefill; freed cached blocks stay reusable until evicted.
  bool prefix_caching = false;
  IndexKind prefix_index = IndexKind::kHashChain;
  // Hybrid layer groups (engine/kv/layer_groups.h): the model's layers by kind (full attention,
  // sliding window, state), laid out in one pool as vLLM's hybrid manager does. Empty: every layer
  // full attention, one group. Bookkeeping runs only (the engine's models are full attention).
  std::vector<LayerGroupSpec> layer_groups;
  EvictionPolicyKind cached_block_eviction = EvictionPolicyKind::kLru;
  // KV tiers behind the prefix cache (needs prefix_caching): a cached block the pool evicts is
  // written to the first tier (host RAM, then disk, ...: engine/tiers/kv_tier_store.h), and a
  // prompt whose next blocks are in a tier reloads them instead of recomputing them. Empty = none.
  std::vector<KvTierOptions> tiers;
  // Tiers: read a request's tier blocks on an IO thread from the step it arrives, so the load
  // hides behind earlier requests' steps while it waits (engine/tiers/tier_prefetch.h); false:
  // every reload is read at admission, in the step's critical path.
  bool tier_prefetch = true;
  // Tiers: when a cached block is written to the first tier. false (write-back): when the pool
  // evicts it. true (write-through): as soon as it is cached, so its eviction writes nothing
  // (the first tier then also holds blocks the pool still has).
  bool tier_write_through = false;
  // MLA: the pool holds one latent row per token and layer (in k_format) instead of K and V;
  // null = ordinary K/V. Built from the weights (make_mla_codec), shared by every sequence.
  std::shared_ptr<const MlaCodec> mla;
  // Token eviction (policy kind kNone = off): every running sequence has its own TokenEvictor
  // (paged allocator, no prefix caching, no KIVI, recompute preemption, real weights) that trims
  // it to the budget after each token, prefill included. See docs/concepts/eviction.md.
  EvictorOptions token_eviction;
  // Sparse attention by token selection (engine/sparse): every sequence keeps its whole cache and
  // each query head attends only to the keys this selector picks (real weights, CPU backend; not
  // with token eviction or MLA). Absent: dense. docs/concepts/sparse-attention.md.
  std::optional<SparseOptions> sparse_attention;
  // CacheBlend (engine/analysis/cache_blend.h; docs/concepts/cache-blend.md): a request with
  // blend_chunks has its leading chunks' K/V computed alone, as a chunk store would hold them,
  // reused with their keys re-rotated into place, and `recompute_percent` of those tokens
  // recomputed (picked by K/V deviation at `check_layer`), all at admission, outside the step's
  // token budget (as a prefix hit is); the rest of its prompt is prefilled as usual. Real
  // weights, CPU backend, one sample, no prefix caching, token eviction, MLA, sparse attention,
  // KIVI or swap preemption beside it. Absent: requests' chunks are prefilled as plain prompt.
  struct Blend {
    int recompute_percent = 15;
    int check_layer = 1;
  };
  std::optional<Blend> blend;
  // A request finishes early when it samples one of these (real weights only): llama2.c's BOS and
  // EOS by default; resolve_scenario sets the tokenizer's stop tokens.
  std::vector<int> stop_tokens = {1, 2};
  // The tokenizer whose text the Timeline's header carries (what the text panel shows and a saved
  // recording keeps, with every sequence's prompt); null: none (token ids shown). Bookkeeping
  // runs (no weights) carry none: they sample no real tokens.
  std::shared_ptr<const Tokenizer> tokenizer;

  bool evicts_tokens() const { return token_eviction.policy.kind != EvictionKind::kNone; }
  // Tokens the contiguous allocator reserves per request: max_seq_len, or the model's context
  // `seq_len` when that is 0.
  int reservation(int seq_len) const { return max_seq_len > 0 ? max_seq_len : seq_len; }
};

struct SimRequest {
  int arrival_step = 0;
  std::vector<int> prompt_tokens;  // fed as given (llama2.c prompts start with BOS = 1)
  int max_new_tokens = 1;
  int priority = 0;  // higher = more important (VictimPolicy::kLowestPriority)
  // Parallel sampling: the request becomes n_samples sequences with consecutive ids. With prefix
  // caching the extra ones fork from the first after its prompt prefill (sharing every prompt
  // block, copy-on-write); without it they are independent copies that prefill the prompt too.
  int n_samples = 1;
  // CacheBlend: the token counts of the prompt's leading chunks (retrieved documents, each cached
  // alone); their sum is less than the prompt (a question follows). Empty: none.
  std::vector<int> blend_chunks;
  // Disaggregated serving (engine/sched/disagg.h) sets these; scenarios do not.
  // The request arrives when Simulator::deliver(id) says so, not at arrival_step.
  bool external_arrival = false;
  // The K/V of the prompt's first kv_in_tokens tokens comes from elsewhere (a prefill instance):
  // at the first admission they are appended whole, outside the token budget, and filled by the
  // Simulator's KV source (Simulator::set_kv_source); only the rest of the prompt is computed.
  int kv_in_tokens = 0;
  // When it finishes its blocks stay allocated (their K/V still to be sent) until
  // Simulator::release(id).
  bool hold_blocks = false;
};

// [sequence id] prompt token ids: each request's prompt once per sample, in the order the
// Simulator numbers sequences.
std::vector<std::vector<int>> sequence_prompts(const std::vector<SimRequest>& requests);

// Sparse attention's rules, one check for the Simulator and for the scenario loader (which runs it
// on the model's shape before any weights load): no token eviction or MLA beside it (refused at
// `where`), and the selector's own rules (validate in engine/sparse) located at `where`'s keys
// (".topk", ".sinks", ...). `where` is the setting's location: "cache.sparse_attention", or a
// scenario file and JSON path.
void check_sparse_attention(const SparseOptions& o, bool mla, bool evicts_tokens,
                            const ModelConfig& m, int block_size, const std::string& where);

// CacheBlend's rules, one check for the Simulator and the scenario loader: the settings in range
// for the model (located at `where` + ".recompute_percent" / ".check_layer"), nothing beside it
// that it does not run with (refused at `where`, naming the other setting).
void check_blend(const SimConfig& c, const ModelConfig& m, const std::string& where);

// The model the simulator runs: its shape, and its weights unless bookkeeping only (weights null:
// no K/V bytes, no forward pass, every generated token is 0 and only max_new_tokens stops).
struct SimModel {
  ModelConfig config;
  std::shared_ptr<const Model> weights;
};

// Names as written in scenarios and on the command line; parse_* throw kvscope::Error naming
// `where`, the value and the accepted names.
AllocatorKind parse_allocator(const std::string& name, const std::string& where);
PreemptionMode parse_preemption(const std::string& name, const std::string& where);
VictimPolicy parse_victim(const std::string& name, const std::string& where);
std::string allocator_name(AllocatorKind kind);
std::string preemption_name(PreemptionMode mode);
std::string victim_name(VictimPolicy policy);

}  // namespace kvscope
