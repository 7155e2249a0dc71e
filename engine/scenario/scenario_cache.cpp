// The scenario's cache section and compare overrides: pool, KV formats, allocator, prefix caching,
// token eviction, MLA, preemption.
#include <string>

#include "engine/common/error.h"
#include "engine/common/setting_source.h"
#include "engine/scenario/scenario_internal.h"

namespace kvscope::scenario_detail {

using json = Json;

namespace {

constexpr int kMaxBlocks = 50'000'000;

const std::vector<std::string>& eviction_keys() {
  static const std::vector<std::string> keys = {
      "policy",      "budget", "sinks",      "recent",   "observation_window",
      "pool_kernel", "seed",   "compaction", "positions"};
  return keys;
}

EvictorOptions parse_token_eviction(const JsonReader& r, const json& j, const std::string& at) {
  r.only_keys(j, at, eviction_keys());
  r.require(j, at, "policy", "an eviction policy name");
  EvictorOptions options;
  EvictionConfig& e = options.policy;
  e.kind = parse_eviction_kind(r.string(j["policy"], json_path(at, "policy")),
                               r.file() + ": " + json_path(at, "policy"));
  if (e.kind == EvictionKind::kNone) {
    for (const auto& k : eviction_keys()) {
      if (k != "policy" && j.contains(k)) {
        r.fail_text(json_path(at, k), "no other key beside \"policy\": \"none\"", "\"" + k + "\"");
      }
    }
    return options;
  }
  r.require(j, at, "budget", "an integer >= 2 (live tokens kept per sequence)");
  e.budget = r.int32(j["budget"], json_path(at, "budget"), 1, 1 << 24);  // >= 2: validate()
  if (j.contains("sinks")) e.sinks = r.int32(j["sinks"], json_path(at, "sinks"), 0, 1 << 20);
  if (j.contains("recent")) e.recent = r.int32(j["recent"], json_path(at, "recent"), 0, 1 << 24);
  if (j.contains("observation_window")) {
    e.observation_window =
        r.int32(j["observation_window"], json_path(at, "observation_window"), 1, 1 << 16);
  }
  if (j.contains("pool_kernel"))
    e.pool_kernel = r.int32(j["pool_kernel"], json_path(at, "pool_kernel"), 1, 1 << 10);
  if (j.contains("seed")) {
    e.seed = static_cast<std::uint64_t>(r.integer(j["seed"], json_path(at, "seed"), 0, INT64_MAX));
  }
  // The evictor's own rules (evict/policy.h validate), located at this file's keys.
  auto key = [&](const char* k) { return r.file() + ": " + json_path(at, k); };
  with_setting_sources({{kEvictionBudget, key("budget")},
                        {kEvictionSinks, key("sinks")},
                        {kEvictionObservationWindow, key("observation_window")},
                        {kEvictionPoolKernel, key("pool_kernel")}},
                       [&] { validate(e); });
  if (e.recent > e.budget) {
    r.fail_text(json_path(at, "recent"), "at most the budget " + std::to_string(e.budget),
                std::to_string(e.recent));
  }
  if (j.contains("compaction")) {
    options.compaction =
        parse_compaction_policy(r.string(j["compaction"], json_path(at, "compaction")),
                                r.file() + ": " + json_path(at, "compaction"));
  }
  if (j.contains("positions")) {
    options.positions = parse_position_mode(r.string(j["positions"], json_path(at, "positions")),
                                            r.file() + ": " + json_path(at, "positions"));
  }
  return options;
}

// Sparse attention (engine/sparse). Its rules that need the model's shape (quest's k against the
// block size, the dense layers, the indexer's channels) are checked by the Simulator.
SparseOptions parse_sparse_attention(const JsonReader& r, const json& j, const std::string& at) {
  r.only_keys(j, at, {"selector", "topk", "sinks", "recent", "dense_layers", "proxy_dims"});
  r.require(j, at, "selector", "\"oracle\", \"quest\", \"proxy\" or \"sparq\"");
  r.require(j, at, "topk", "an integer >= 1 (keys each query head attends to)");
  SparseOptions o;
  o.selector = parse_selector_kind(r.string(j["selector"], json_path(at, "selector")),
                                   r.file() + ": " + json_path(at, "selector"));
  o.topk = r.int32(j["topk"], json_path(at, "topk"), 1, 1 << 24);
  if (j.contains("sinks")) o.sinks = r.int32(j["sinks"], json_path(at, "sinks"), 0, 1 << 24);
  if (j.contains("recent")) o.recent = r.int32(j["recent"], json_path(at, "recent"), 0, 1 << 24);
  if (j.contains("dense_layers")) {
    o.dense_layers = r.int32(j["dense_layers"], json_path(at, "dense_layers"), 0, 1 << 16);
  }
  // 0: head_dim / 4, set when the model is known (resolve_scenario).
  o.proxy_dims = j.contains("proxy_dims")
                     ? r.int32(j["proxy_dims"], json_path(at, "proxy_dims"), 1, 1 << 16)
                     : 0;
  return o;
}

// CacheBlend (engine/analysis/cache_blend.h). The check layer against the model's depth is
// checked with the model (check_blend).
SimConfig::Blend parse_blend(const JsonReader& r, const json& j, const std::string& at) {
  r.only_keys(j, at, {"recompute_percent", "check_layer"});
  SimConfig::Blend b;
  if (j.contains("recompute_percent")) {
    b.recompute_percent =
        r.int32(j["recompute_percent"], json_path(at, "recompute_percent"), 0, 100);
  }
  if (j.contains("check_layer"))
    b.check_layer = r.int32(j["check_layer"], json_path(at, "check_layer"), 0, 1 << 16);
  return b;
}

// `o`: the base's section in a compare variant (its keys override those), else the defaults.
DisaggOptions parse_disaggregation(const JsonReader& r, const json& j, const std::string& at,
                                   DisaggOptions o) {
  r.only_keys(j, at,
              {"link", "latency_us", "transfer", "gpu", "prefill_blocks", "decode_blocks",
               "arrival_interval_ms", "decode_prefix_caching"});
  auto key = [&](const char* k) { return r.file() + ": " + json_path(at, k); };
  if (j.contains("link"))
    o.link = parse_link(r.string(j["link"], json_path(at, "link"), true), key("link"));
  if (j.contains("latency_us"))
    o.latency_seconds = r.number(j["latency_us"], json_path(at, "latency_us"), 0, 1e9) * 1e-6;
  if (j.contains("transfer")) {
    o.transfer =
        parse_transfer_mode(r.string(j["transfer"], json_path(at, "transfer")), key("transfer"));
  }
  if (j.contains("gpu")) o.gpu = parse_gpu(r.string(j["gpu"], json_path(at, "gpu")), key("gpu"));
  if (j.contains("prefill_blocks")) {
    o.prefill_blocks = r.int32(j["prefill_blocks"], json_path(at, "prefill_blocks"), 1, kMaxBlocks);
  }
  if (j.contains("decode_blocks"))
    o.decode_blocks = r.int32(j["decode_blocks"], json_path(at, "decode_blocks"), 1, kMaxBlocks);
  if (j.contains("arrival_interval_ms")) {
    o.arrival_interval_seconds =
        r.number(j["arrival_interval_ms"], json_path(at, "arrival_interval_ms"), 0, 1e9) * 1e-3;
  }
  if (j.contains("decode_prefix_caching")) {
    o.decode_prefix_caching =
        r.boolean(j["decode_prefix_caching"], json_path(at, "decode_prefix_caching"));
  }
  return o;
}

MlaOptions parse_mla(const JsonReader& r, const json& j, const std::string& at) {
  r.only_keys(j, at, {"rank", "mode", "rope_dims", "rope_select"});
  r.require(j, at, "rank", "an integer >= 1 (latent values per token and layer)");
  MlaOptions m;
  m.rank = r.int32(j["rank"], json_path(at, "rank"), 1, 1 << 16);
  if (j.contains("mode")) {
    const std::string mode = r.string(j["mode"], json_path(at, "mode"));
    if (mode == "expanded")
      m.mode = MlaMode::kReconstruct;
    else if (mode == "absorbed")
      m.mode = MlaMode::kAbsorbed;
    else
      r.fail(json_path(at, "mode"), "\"expanded\" (mode A) or \"absorbed\" (mode B)", j["mode"]);
  }
  if (j.contains("rope_dims")) {
    m.rope_dims = r.int32(j["rope_dims"], json_path(at, "rope_dims"), 0, 1 << 12);
    if (m.mode != MlaMode::kAbsorbed && m.rope_dims != 0)
      r.fail(json_path(at, "rope_dims"), "0 unless \"mode\" is \"absorbed\"", j["rope_dims"]);
  }
  if (j.contains("rope_select")) {
    const std::string sel = r.string(j["rope_select"], json_path(at, "rope_select"));
    if (sel == "high-freq")
      m.rope_select = RopeSelect::kHighFrequency;
    else if (sel == "norm")
      m.rope_select = RopeSelect::kWeightNorm;
    else
      r.fail(json_path(at, "rope_select"), "\"high-freq\" or \"norm\"", j["rope_select"]);
  }
  return m;
}

}  // namespace

namespace {

// "tiers": [{"medium": "host", "blocks": N}, {"medium": "disk", "blocks": N, "dir": "..."}],
// first tier first.
std::vector<KvTierOptions> parse_tiers(const JsonReader& r, const Json& j, const std::string& at) {
  if (!j.is_array()) r.fail(at, "an array of tiers, first tier first", j);
  if (j.size() > KvTierStore::kMaxTiers) {
    r.fail_text(at, "at most " + std::to_string(KvTierStore::kMaxTiers) + " tiers",
                std::to_string(j.size()));
  }
  std::vector<KvTierOptions> tiers;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string ti = json_path(at, i);
    const Json& t = j[i];
    if (!t.is_object()) r.fail(ti, "an object like {\"medium\": \"host\", \"blocks\": 256}", t);
    r.only_keys(t, ti, {"medium", "blocks", "dir"});
    r.require(t, ti, "medium", "\"host\" or \"disk\"");
    r.require(t, ti, "blocks", "the tier's capacity in blocks");
    KvTierOptions o;
    o.name = r.string(t["medium"], json_path(ti, "medium"));
    if (o.name != "host" && o.name != "disk") {
      r.fail(json_path(ti, "medium"), "\"host\" or \"disk\"", t["medium"]);
    }
    o.medium = o.name == "host" ? TierMedium::kHost : TierMedium::kDisk;
    o.capacity_blocks = r.int32(t["blocks"], json_path(ti, "blocks"), 1, kMaxBlocks);
    if (t.contains("dir")) {
      if (o.medium != TierMedium::kDisk) {
        r.fail_text(json_path(ti, "dir"), "\"dir\" only on a disk tier", "a host tier");
      }
      o.dir = r.string(t["dir"], json_path(ti, "dir"), true);
    }
    tiers.push_back(std::move(o));
  }
  return tiers;
}

// "layer_groups": [{"type": "sliding", "layers": 12, "window": 128}, {"type": "full", "layers":
// 12}, {"type": "state", "layers": 28, "state_bytes": 311296}] (engine/kv/layer_groups.h).
std::vector<LayerGroupSpec> parse_layer_groups(const JsonReader& r, const Json& j,
                                               const std::string& at) {
  if (!j.is_array() || j.empty())
    r.fail(at, "an array of layer groups like {\"type\": \"full\", \"layers\": 12}", j);
  std::vector<LayerGroupSpec> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string gi = json_path(at, i);
    const Json& g = j[i];
    if (!g.is_object()) r.fail(gi, "an object like {\"type\": \"full\", \"layers\": 12}", g);
    r.only_keys(g, gi, {"type", "layers", "window", "state_bytes"});
    r.require(g, gi, "type", "\"full\", \"sliding\" or \"state\"");
    r.require(g, gi, "layers", "the group's layer count");
    LayerGroupSpec spec;
    const std::string type = r.string(g["type"], json_path(gi, "type"));
    if (type == "full") {
      spec.kind = LayerKind::kFull;
    } else if (type == "sliding") {
      spec.kind = LayerKind::kSliding;
      r.require(g, gi, "window", "the sliding window in tokens");
    } else if (type == "state") {
      spec.kind = LayerKind::kState;
      r.require(g, gi, "state_bytes", "one sequence's state in one layer, in bytes");
    } else {
      r.fail(json_path(gi, "type"), "\"full\", \"sliding\" or \"state\"", g["type"]);
    }
    spec.layers = r.int32(g["layers"], json_path(gi, "layers"), 1, 4096);
    if (g.contains("window")) {
      if (spec.kind != LayerKind::kSliding)
        r.fail_text(json_path(gi, "window"), "\"window\" only on a sliding group", type);
      spec.window = r.int32(g["window"], json_path(gi, "window"), 1, 1 << 24);
    }
    if (g.contains("state_bytes")) {
      if (spec.kind != LayerKind::kState)
        r.fail_text(json_path(gi, "state_bytes"), "\"state_bytes\" only on a state group", type);
      spec.state_bytes = static_cast<long>(
          r.integer(g["state_bytes"], json_path(gi, "state_bytes"), 1, std::int64_t{1} << 32));
    }
    out.push_back(spec);
  }
  return out;
}

// One cache object being applied: its reader, JSON and location, for the steps below.
struct CacheSection {
  const JsonReader& r;
  const json& j;
  const std::string& at;
  std::string path(const char* key) const { return json_path(at, key); }
  std::string where(const char* key) const { return r.file() + ": " + json_path(at, key); }
};

// block_size and the pool's size: exactly one of num_blocks, pool_bytes, pool_tokens.
void apply_pool_size(const CacheSection& s, bool is_base, CacheSettings& c) {
  const JsonReader& r = s.r;
  const json& j = s.j;
  SimConfig& cfg = c.sim;
  if (j.contains("block_size"))
    cfg.block_size = r.int32(j["block_size"], s.path("block_size"), 1, 4096);
  const int sizes = static_cast<int>(j.contains("num_blocks")) +
                    static_cast<int>(j.contains("pool_bytes")) +
                    static_cast<int>(j.contains("pool_tokens"));
  constexpr const char* kOneSize =
      "exactly one of \"num_blocks\", \"pool_bytes\" or \"pool_tokens\"";
  if (sizes > 1) r.fail_text(s.at, kOneSize, std::to_string(sizes) + " of them");
  if (is_base && sizes == 0) r.fail_text(s.at, kOneSize, "none");
  if (j.contains("num_blocks")) {
    cfg.num_blocks = r.int32(j["num_blocks"], s.path("num_blocks"), 1, kMaxBlocks);
    c.pool_bytes.reset();
    c.pool_tokens.reset();
  }
  if (j.contains("pool_bytes")) {
    c.pool_bytes = r.integer(j["pool_bytes"], s.path("pool_bytes"), 1, std::int64_t{1} << 50);
    c.pool_tokens.reset();
    cfg.num_blocks = 0;
  }
  if (j.contains("pool_tokens")) {
    if (!is_base) {
      r.fail_text(s.path("pool_tokens"),
                  "pool_tokens only in \"cache\" (a variant keeps the bytes they come to, or "
                  "sets num_blocks or pool_bytes)",
                  "pool_tokens in a variant");
    }
    c.pool_tokens = r.integer(j["pool_tokens"], s.path("pool_tokens"), 1, std::int64_t{1} << 40);
    cfg.num_blocks = 0;
  }
}

void apply_allocator_and_formats(const CacheSection& s, SimConfig& cfg) {
  const JsonReader& r = s.r;
  const json& j = s.j;
  if (j.contains("allocator")) {
    cfg.allocator =
        parse_allocator(r.string(j["allocator"], s.path("allocator")), s.where("allocator"));
  }
  if (j.contains("max_seq_len")) {
    cfg.max_seq_len = r.int32(j["max_seq_len"], s.path("max_seq_len"), 0, 1 << 30);
  }
  if (j.contains("kv_dtype") && (j.contains("k_dtype") || j.contains("v_dtype"))) {
    r.fail_text(s.path("kv_dtype"), "either \"kv_dtype\" (both) or \"k_dtype\"/\"v_dtype\"",
                "both kinds");
  }
  if (j.contains("kv_dtype")) {
    cfg.k_format = cfg.v_format =
        parse_kv_format(r.string(j["kv_dtype"], s.path("kv_dtype")), s.where("kv_dtype"));
  }
  if (j.contains("k_dtype")) {
    cfg.k_format = parse_kv_format(r.string(j["k_dtype"], s.path("k_dtype")), s.where("k_dtype"));
  }
  if (j.contains("v_dtype")) {
    cfg.v_format = parse_kv_format(r.string(j["v_dtype"], s.path("v_dtype")), s.where("v_dtype"));
  }
}

void apply_prefix_caching(const CacheSection& s, SimConfig& cfg) {
  const JsonReader& r = s.r;
  const json& j = s.j;
  if (j.contains("prefix_caching")) {
    cfg.prefix_caching = r.boolean(j["prefix_caching"], s.path("prefix_caching"));
  }
  if (j.contains("prefix_index")) {
    const auto kind = parse_index_kind(r.string(j["prefix_index"], s.path("prefix_index")));
    if (!kind) r.fail(s.path("prefix_index"), "\"hash\" or \"radix\"", j["prefix_index"]);
    cfg.prefix_index = *kind;
  }
  if (j.contains("cached_block_eviction")) {
    const auto kind = parse_eviction_policy(
        r.string(j["cached_block_eviction"], s.path("cached_block_eviction")));
    if (!kind) {
      r.fail(s.path("cached_block_eviction"), "\"lru\", \"lfu\" or \"fifo\"",
             j["cached_block_eviction"]);
    }
    cfg.cached_block_eviction = *kind;
  }
  for (const char* key : {"prefix_index", "cached_block_eviction"}) {
    if (j.contains(key) && !cfg.prefix_caching) {
      r.fail_text(s.path(key), "\"prefix_caching\": true beside it", "prefix caching off");
    }
  }
}

void apply_token_eviction_and_mla(const CacheSection& s, CacheSettings& c) {
  const JsonReader& r = s.r;
  const json& j = s.j;
  if (j.contains("token_eviction")) {
    c.token_eviction = parse_token_eviction(r, j["token_eviction"], s.path("token_eviction"));
    c.token_eviction_at = s.path("token_eviction");
  }
  if (j.contains("sparse_attention")) {
    if (j["sparse_attention"].is_null()) {
      c.sim.sparse_attention.reset();
    } else {
      c.sim.sparse_attention =
          parse_sparse_attention(r, j["sparse_attention"], s.path("sparse_attention"));
    }
    c.sparse_at = s.path("sparse_attention");
  }
  if (j.contains("blend")) {
    if (j["blend"].is_null()) {
      c.sim.blend.reset();
    } else {
      c.sim.blend = parse_blend(r, j["blend"], s.path("blend"));
    }
    c.blend_at = s.path("blend");
  }
  if (j.contains("disaggregation")) {
    if (j["disaggregation"].is_null()) {
      c.disaggregation.reset();
    } else {
      c.disaggregation = parse_disaggregation(r, j["disaggregation"], s.path("disaggregation"),
                                              c.disaggregation.value_or(DisaggOptions{}));
    }
  }
  if (j.contains("mla")) {
    if (j["mla"].is_null()) {
      c.mla.reset();
    } else {
      c.mla = parse_mla(r, j["mla"], s.path("mla"));
    }
    c.mla_at = s.path("mla");
  }
}

void apply_preemption(const CacheSection& s, SimConfig& cfg) {
  const JsonReader& r = s.r;
  const json& j = s.j;
  if (j.contains("preemption")) {
    cfg.preemption =
        parse_preemption(r.string(j["preemption"], s.path("preemption")), s.where("preemption"));
  }
  if (j.contains("victim")) {
    cfg.victim = parse_victim(r.string(j["victim"], s.path("victim")), s.where("victim"));
  }
  if (j.contains("host_blocks")) {
    cfg.host_blocks = r.int32(j["host_blocks"], s.path("host_blocks"), 0, kMaxBlocks);
  }
}

void apply_tiers(const CacheSection& s, SimConfig& cfg) {
  const JsonReader& r = s.r;
  const json& j = s.j;
  if (j.contains("tiers")) {
    cfg.tiers = parse_tiers(r, j["tiers"], s.path("tiers"));
    require_prefix_caching_for_tiers(!cfg.tiers.empty(), cfg.prefix_caching, s.where("tiers"));
  }
  if (j.contains("tier_write")) {
    const std::string w = r.string(j["tier_write"], s.path("tier_write"));
    if (w != "back" && w != "through")
      r.fail(s.path("tier_write"), "\"back\" or \"through\"", j["tier_write"]);
    cfg.tier_write_through = w == "through";
    if (cfg.tiers.empty()) r.fail_text(s.path("tier_write"), "\"tiers\" beside it", "no tiers");
  }
  if (j.contains("tier_prefetch")) {
    cfg.tier_prefetch = r.boolean(j["tier_prefetch"], s.path("tier_prefetch"));
    if (cfg.tiers.empty()) {
      r.fail_text(s.path("tier_prefetch"), "\"tiers\" beside it", "no tiers");
    }
  }
}

}  // namespace

void apply_cache(const JsonReader& r, const json& j, const std::string& at, bool is_base,
                 CacheSettings& c) {
  r.only_keys(j, at, scenario_cache_keys());
  const SimConfig& cfg = c.sim;
  const CacheSection section{r, j, at};
  apply_pool_size(section, is_base, c);
  apply_allocator_and_formats(section, c.sim);
  apply_prefix_caching(section, c.sim);
  apply_token_eviction_and_mla(section, c);
  apply_preemption(section, c.sim);
  apply_tiers(section, c.sim);
  if (j.contains("layer_groups")) {
    if (j["layer_groups"].is_null())
      c.sim.layer_groups.clear();
    else
      c.sim.layer_groups = parse_layer_groups(r, j["layer_groups"], section.path("layer_groups"));
  }
  require_paged_for_prefix_caching(
      cfg.prefix_caching, cfg.allocator,
      section.where(j.contains("allocator") ? "allocator" : "prefix_caching"));
}

}  // namespace kvscope::scenario_detail
