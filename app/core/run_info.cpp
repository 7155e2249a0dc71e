// RunInfo helpers: the override's one-line description and block byte accounting.
#include "app/core/run_info.h"

#include <cctype>
#include <filesystem>

#include "app/widgets/widgets.h"
#include "engine/common/config.h"
#include "engine/kv/kv_storage.h"
#include "engine/model/locate.h"
#include "engine/model/synthetic.h"

namespace kvscope::ui {

std::string PolicyOverride::describe() const {
  std::string s;
  const auto add = [&s](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (!variant.empty()) add("variant " + variant);
  if (block_size) add("block " + std::to_string(*block_size));
  if (k_format && v_format && *k_format == *v_format) {
    add("KV " + k_format->name());
  } else {
    if (k_format) add("K " + k_format->name());
    if (v_format) add("V " + v_format->name());
  }
  if (prefix_caching) add(*prefix_caching ? "prefix on" : "prefix off");
  if (prefix_index) add("index " + std::string(index_kind_name(*prefix_index)));
  if (pool_bytes) add("pool " + format_bytes(static_cast<double>(*pool_bytes)));
  if (allocator) add(allocator_name(*allocator));
  if (preemption) add("preempt " + preemption_name(*preemption));
  if (eviction)
    add(*eviction == EvictionKind::kNone ? "no eviction"
                                         : "evict " + eviction_kind_name(*eviction));
  if (eviction_budget) add("budget " + std::to_string(*eviction_budget));
  if (host_tier_blocks) add("host tier " + std::to_string(*host_tier_blocks));
  if (disk_tier_blocks) add("disk tier " + std::to_string(*disk_tier_blocks));
  if (backend) add("backend " + *backend);
  return s.empty() ? "scenario defaults" : s;
}

int tier_blocks(const SimConfig& c, TierMedium medium) {
  int blocks = 0;
  for (const KvTierOptions& t : c.tiers)
    if (t.medium == medium) blocks += t.capacity_blocks;
  return blocks;
}

SimConfig with_override(SimConfig c, const PolicyOverride& o) {
  if (o.block_size) c.block_size = *o.block_size;
  if (o.k_format) c.k_format = *o.k_format;
  if (o.v_format) c.v_format = *o.v_format;
  if (o.prefix_caching) c.prefix_caching = *o.prefix_caching;
  if (o.prefix_index) c.prefix_index = *o.prefix_index;
  if (o.allocator) c.allocator = *o.allocator;
  if (o.preemption) c.preemption = *o.preemption;
  if (o.eviction) c.token_eviction.policy.kind = *o.eviction;
  if (o.eviction_budget) c.token_eviction.policy.budget = *o.eviction_budget;
  if (o.host_tier_blocks || o.disk_tier_blocks) {
    const int host = o.host_tier_blocks ? *o.host_tier_blocks : tier_blocks(c, TierMedium::kHost);
    const int disk = o.disk_tier_blocks ? *o.disk_tier_blocks : tier_blocks(c, TierMedium::kDisk);
    std::string dir;  // keep the scenario's directory for its disk tier
    for (const KvTierOptions& t : c.tiers)
      if (t.medium == TierMedium::kDisk) dir = t.dir;
    c.tiers.clear();
    if (host > 0) c.tiers.push_back({"host", TierMedium::kHost, host, ""});
    if (disk > 0) c.tiers.push_back({"disk", TierMedium::kDisk, disk, dir});
  }
  return c;
}

std::int64_t pool_blocks(const RunInfo& info, const SimConfig& config,
                         const PolicyOverride& policy) {
  const std::optional<std::int64_t> bytes =
      policy.pool_bytes ? policy.pool_bytes : info.pool_bytes_field;
  if (!bytes) return info.scenario_config.num_blocks;
  const std::int64_t bb = block_bytes(info.shape, config);
  return bb > 0 ? *bytes / bb : 0;
}

namespace {

// GGUF quantization tags as file names carry them: Q4_1, Q8_0, Q4_K_M, IQ2_XS, F16, BF16, F32.
bool is_quant_tag(const std::string& t) {
  std::size_t i = 0;
  if (t.rfind("IQ", 0) == 0 || t.rfind("BF", 0) == 0)
    i = 2;
  else if (!t.empty() && (t[0] == 'Q' || t[0] == 'F'))
    i = 1;
  else
    return false;
  return i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])) != 0;
}

}  // namespace

std::string model_display_name(const std::string& model_arg) {
  if (is_synthetic_model_arg(model_arg)) return model_arg;
  std::string file = model_arg.empty() ? std::string(kDefaultModelFile) : model_arg;
  for (const NamedModel& m : named_models())
    if (file == m.name) file = m.file;
  std::string stem = std::filesystem::path(file).stem().string();
  const std::size_t dot = stem.rfind('.');
  if (dot != std::string::npos && dot > 0 && is_quant_tag(stem.substr(dot + 1))) stem.resize(dot);
  return stem.empty() ? model_arg : stem;
}

std::int64_t block_bytes(const ModelConfig& shape, const SimConfig& config) {
  return static_cast<std::int64_t>(
      kv_layout_for(shape, config.block_size, 1, config.k_format, config.v_format).block_bytes());
}

}  // namespace kvscope::ui
