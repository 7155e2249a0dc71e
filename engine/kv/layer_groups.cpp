// See layer_groups.h.
#include "engine/kv/layer_groups.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "engine/common/concat.h"
#include "engine/common/config.h"
#include "engine/common/error.h"
#include "engine/common/format_count.h"
#include "engine/kv/kv_storage.h"

namespace kvscope {

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::kFull:
      return "full";
    case LayerKind::kSliding:
      return "sliding";
    case LayerKind::kState:
      return "state";
  }
  return "?";
}

namespace {

long ceil_div(long a, long b) {
  return (a + b - 1) / b;
}

}  // namespace

LayerGroupPlan plan_layer_groups(const std::vector<LayerGroupSpec>& specs,
                                 long attention_bytes_per_token, int block_size,
                                 const std::string& where) {
  if (specs.empty()) fail_expected(where, "at least one layer group", "none");
  if (attention_bytes_per_token < 1 || block_size < 1)
    throw InternalError("plan_layer_groups", "a page of no bytes");
  // Layers bucketed by identical spec (vLLM groups layers whose KV cache specs are equal).
  std::map<std::tuple<int, int, long>, int> kinds;  // (kind, window, state) -> layers
  long state_bytes = 0;
  bool full = false;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const LayerGroupSpec& s = specs[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (s.layers < 1) fail_expected(at + ".layers", "at least 1 layer", std::to_string(s.layers));
    if (s.kind == LayerKind::kSliding && s.window < 1)
      fail_expected(at + ".window", "a window of at least 1 token", std::to_string(s.window));
    if (s.kind == LayerKind::kState && s.state_bytes < 1)
      fail_expected(at + ".state_bytes", "a state of at least 1 byte",
                    std::to_string(s.state_bytes));
    full = full || s.kind == LayerKind::kFull;
    if (s.kind == LayerKind::kState) state_bytes = std::max(state_bytes, s.state_bytes);
    kinds[{static_cast<int>(s.kind), s.kind == LayerKind::kSliding ? s.window : 0,
           s.kind == LayerKind::kState ? s.state_bytes : 0}] += s.layers;
  }
  if (!full) {
    fail_expected(
        where, "a group of full-attention layers (every hybrid model vLLM serves has one)", "none");
  }
  LayerGroupPlan p;
  p.state_bytes = state_bytes;
  p.block_size = block_size;
  p.attention_page_bytes = attention_bytes_per_token * block_size;
  if (state_bytes > p.attention_page_bytes) {
    // The smallest multiple of the alignment whose attention page holds the state.
    const long align = kAttentionBlockAlignment;
    p.block_size =
        static_cast<int>(align * ceil_div(state_bytes, align * attention_bytes_per_token));
    p.attention_page_bytes = attention_bytes_per_token * p.block_size;
    p.block_size_raised = true;
    p.notes.push_back(concat(
        {"a state layer's ", format_count(state_bytes), "-byte state is larger than ",
         std::to_string(block_size), " tokens of one attention layer's K and V (",
         format_count(attention_bytes_per_token * block_size), " bytes): the block grows to ",
         std::to_string(p.block_size), " tokens, the smallest multiple of ", std::to_string(align),
         " whose ", format_count(p.attention_page_bytes), "-byte page holds it"}));
  }
  p.page_bytes = p.attention_page_bytes;
  if (state_bytes > 0 && state_bytes < p.page_bytes) {
    const long permille = (p.page_bytes - state_bytes) * 1000 / p.page_bytes;
    p.notes.push_back(
        concat({"each state page is padded from ", format_count(state_bytes), " to ",
                format_count(p.page_bytes), " bytes (", std::to_string(permille / 10), ".",
                std::to_string(permille % 10), "% padding), so that every page has one size"}));
  }
  int smallest = 1 << 30, largest = 0;
  for (const auto& [key, n] : kinds) {
    smallest = std::min(smallest, n);
    largest = std::max(largest, n);
  }
  // vLLM: the smallest kind's count, unless the largest is under 1.5 x it (fewer, fuller groups).
  p.group_size = 2 * largest < 3 * smallest ? largest : smallest;
  // Full-attention groups first (the engine's block tables follow the first group).
  std::vector<std::pair<std::tuple<int, int, long>, int>> ordered(kinds.begin(), kinds.end());
  std::stable_partition(ordered.begin(), ordered.end(), [](const auto& k) {
    return std::get<0>(k.first) == static_cast<int>(LayerKind::kFull);
  });
  for (const auto& [key, n] : ordered) {
    const int groups = static_cast<int>(ceil_div(n, p.group_size));
    for (int g = 0; g < groups; ++g) {
      KvGroup k;
      k.kind = static_cast<LayerKind>(std::get<0>(key));
      k.window = std::get<1>(key);
      // Layers are dealt to the kind's groups by stride: the first n % groups get one more.
      k.layers = n / groups + (g < n % groups ? 1 : 0);
      p.padded_layers += p.group_size - k.layers;
      p.groups.push_back(k);
    }
  }
  std::string counts;
  for (const auto& [key, n] : ordered) {
    if (!counts.empty()) counts.append(" and ");
    counts.append(concat(
        {std::to_string(n), " ", layer_kind_name(static_cast<LayerKind>(std::get<0>(key)))}));
    if (std::get<0>(key) == static_cast<int>(LayerKind::kSliding))
      counts.append(concat({" (window ", std::to_string(std::get<1>(key)), ")"}));
  }
  const std::string padding =
      p.padded_layers > 0 ? concat({" (", std::to_string(p.padded_layers), " layers of padding)"})
                          : std::string();
  p.notes.push_back(concat(
      {counts, " layers make ", std::to_string(p.groups.size()),
       p.groups.size() == 1 ? " group of " : " groups of ", std::to_string(p.group_size), " layers",
       padding, "; a block is one ", format_count(p.page_bytes), "-byte page in each of ",
       std::to_string(p.group_size), " layers: ", format_count(p.block_bytes()), " bytes"}));
  return p;
}

LayerGroupPlan plan_layer_groups_for(const std::vector<LayerGroupSpec>& specs,
                                     const ModelConfig& model, const KvFormat& k_format,
                                     const KvFormat& v_format, int block_size,
                                     const std::string& where) {
  // One token's K and V in one layer: a one-token block over all the layers, per layer.
  const long per_token_layer =
      static_cast<long>(kv_layout_for(model, 1, 1, k_format, v_format).block_bytes()) /
      model.n_layers;
  return plan_layer_groups(specs, per_token_layer, block_size, where);
}

}  // namespace kvscope
