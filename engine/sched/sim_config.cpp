// Policy names, and the prompts by sequence id.
#include "engine/sched/sim_config.h"

#include "engine/analysis/cache_blend.h"
#include "engine/common/error.h"
#include "engine/common/setting_source.h"

namespace kvscope {

void check_sparse_attention(const SparseOptions& o, bool mla, bool evicts_tokens,
                            const ModelConfig& m, int block_size, const std::string& where) {
  if (mla || evicts_tokens) {
    fail_expected(where, "no token eviction or MLA beside it (selection keeps the whole K/V cache)",
                  mla ? "cache.mla" : "cache.token_eviction");
  }
  with_setting_sources({{kSparseTopk, where + ".topk"},
                        {kSparseSinks, where + ".sinks"},
                        {kSparseRecent, where + ".recent"},
                        {kSparseDenseLayers, where + ".dense_layers"},
                        {kSparseProxyDims, where + ".proxy_dims"}},
                       [&] { validate(o, m, block_size); });
}

void check_blend(const SimConfig& c, const ModelConfig& m, const std::string& where) {
  check_blend_percent(c.blend->recompute_percent, where + ".recompute_percent");
  check_blend_layer(c.blend->check_layer, m, where + ".check_layer");
  const char* beside = c.prefix_caching                               ? "cache.prefix_caching"
                       : c.evicts_tokens()                            ? "cache.token_eviction"
                       : c.mla                                        ? "cache.mla"
                       : c.sparse_attention                           ? "cache.sparse_attention"
                       : !c.tiers.empty()                             ? "cache.tiers"
                       : c.k_format.is_kivi() || c.v_format.is_kivi() ? "a KIVI format"
                       : c.preemption == PreemptionMode::kSwap        ? "cache.preemption swap"
                                                                      : nullptr;
  if (beside != nullptr) {
    fail_expected(where,
                  "none of prefix caching, token eviction, MLA, sparse attention, tiers, KIVI or "
                  "swap preemption beside it",
                  beside);
  }
}

AllocatorKind parse_allocator(const std::string& name, const std::string& where) {
  if (name == "paged") return AllocatorKind::kPaged;
  if (name == "contiguous") return AllocatorKind::kContiguous;
  fail_expected(where, "\"paged\" or \"contiguous\"", "\"" + name + "\"");
}

PreemptionMode parse_preemption(const std::string& name, const std::string& where) {
  if (name == "recompute") return PreemptionMode::kRecompute;
  if (name == "swap") return PreemptionMode::kSwap;
  fail_expected(where, "\"recompute\" or \"swap\"", "\"" + name + "\"");
}

VictimPolicy parse_victim(const std::string& name, const std::string& where) {
  if (name == "last_admitted") return VictimPolicy::kLastAdmitted;
  if (name == "longest") return VictimPolicy::kLongest;
  if (name == "lowest_priority") return VictimPolicy::kLowestPriority;
  fail_expected(where, "\"last_admitted\", \"longest\" or \"lowest_priority\"", "\"" + name + "\"");
}

std::vector<std::vector<int>> sequence_prompts(const std::vector<SimRequest>& requests) {
  std::vector<std::vector<int>> prompts;
  for (const SimRequest& r : requests)
    for (int k = 0; k < r.n_samples; ++k) prompts.push_back(r.prompt_tokens);
  return prompts;
}

std::string allocator_name(AllocatorKind kind) {
  return kind == AllocatorKind::kPaged ? "paged" : "contiguous";
}

std::string preemption_name(PreemptionMode mode) {
  return mode == PreemptionMode::kRecompute ? "recompute" : "swap";
}

std::string victim_name(VictimPolicy policy) {
  switch (policy) {
    case VictimPolicy::kLastAdmitted:
      return "last_admitted";
    case VictimPolicy::kLongest:
      return "longest";
    case VictimPolicy::kLowestPriority:
      return "lowest_priority";
  }
  return "?";
}

}  // namespace kvscope
