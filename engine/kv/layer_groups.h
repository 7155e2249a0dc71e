// Hybrid layer groups (issue #44), as vLLM's hybrid KV cache manager lays them out: a model whose
// layers are of several kinds (full attention, sliding-window attention of W tokens, state-space
// layers with one fixed-size state per sequence) keeps them all in one pool of pages.
//
// vLLM's rules, which plan_layer_groups follows (docs/concepts/hybrid-models.md gives the numbers):
// - Every layer's page must have the same size. An attention layer's page is block_size tokens of
//   its K and V; a state layer's is its state. When the state is larger, the attention block size
//   grows to the smallest multiple of the kernel alignment (16 tokens) whose page holds it, and
//   the state's page is padded to the attention page.
// - Layers of one kind form groups of group_size layers: the smallest kind's layer count, or the
//   largest's when it is under 1.5 x the smallest. A kind of n layers makes ceil(n / group_size)
//   groups; a short last group is padded (its pages are as large as a full group's).
// - The pool is group_size tensors, tensor i shared by layer i of every group; a block id names
//   page id in each of them, so a block is group_size pages, and each group holds its own blocks:
//   a full-attention group one per block_size tokens, a sliding-window group only those that hold
//   one of the last W - 1 tokens computed (the older ones go back to the pool), a state group one
//   block per sequence.
#pragma once

#include <string>
#include <vector>

namespace kvscope {

enum class LayerKind { kFull, kSliding, kState };
const char* layer_kind_name(LayerKind k);

// One kind of layer as a scenario gives it: `layers` layers of `kind`, with the sliding window's
// tokens or the state's bytes per layer and sequence.
struct LayerGroupSpec {
  LayerKind kind = LayerKind::kFull;
  int layers = 0;
  int window = 0;        // kSliding: tokens attended, the current one included
  long state_bytes = 0;  // kState: bytes of one sequence's state in one layer
  bool operator==(const LayerGroupSpec&) const = default;
};

// A KV cache group: group_size layers of one kind (the last of a kind may be padded).
struct KvGroup {
  LayerKind kind = LayerKind::kFull;
  int window = 0;
  int layers = 0;  // real layers in it (<= group_size; the rest is padding)
};

struct LayerGroupPlan {
  std::vector<KvGroup> groups;  // full-attention groups first
  int group_size = 0;           // layers a block spans (one page in each of group_size tensors)
  int block_size = 0;           // tokens per attention page
  long page_bytes = 0;          // one layer's page: attention's block, or the padded state
  long attention_page_bytes = 0;
  long state_bytes = 0;  // the largest state per layer (0: none)
  bool block_size_raised = false;
  int padded_layers = 0;  // layers of padding over all groups
  // What the plan chose and why, with its numbers, a sentence each.
  std::vector<std::string> notes;
  long block_bytes() const { return static_cast<long>(group_size) * page_bytes; }
};

// The plan for `specs` (in the scenario's order) on layers whose K and V take
// `attention_bytes_per_token` bytes per token per layer, asking for `block_size` tokens a block.
// Throws kvscope::Error naming `where` when the specs are not a model vLLM's rules can lay out
// (no full-attention layer, a window < 1, a state of 0 bytes, ...).
LayerGroupPlan plan_layer_groups(const std::vector<LayerGroupSpec>& specs,
                                 long attention_bytes_per_token, int block_size,
                                 const std::string& where);

struct ModelConfig;
struct KvFormat;
// plan_layer_groups for `model`'s attention layers, whose K and V are in `k_format` and
// `v_format`: the resolver and the Simulator both lay a scenario out with it.
LayerGroupPlan plan_layer_groups_for(const std::vector<LayerGroupSpec>& specs,
                                     const ModelConfig& model, const KvFormat& k_format,
                                     const KvFormat& v_format, int block_size,
                                     const std::string& where);

// vLLM's kernel block alignment for attention pages (FlashAttention: multiples of 16 tokens).
inline constexpr int kAttentionBlockAlignment = 16;

}  // namespace kvscope
