// kvscope trace: replay request traces through the allocator and prefix cache.
//   mooncake FILE   Mooncake JSONL trace: hit ratio, prefill saved, peak blocks, evictions;
//                   --sweep: hit ratio against cache capacity (CSV + PNG with --out DIR)
//   kv-events FILE  vLLM/SGLang KV-cache event log (JSON lines) -> kvscope events, summarized
//   kernel SCENARIO one step's attention launch on the SIMT emulator (cmd_trace_kernel.cpp)
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/report/png_plot.h"
#include "engine/trace/kv_events_import.h"
#include "engine/trace/mooncake_replay.h"

namespace kvscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: kvscope trace <mooncake|kv-events> FILE [options]
       kvscope trace kernel SCENARIO --step N [options]

  mooncake FILE   replay a Mooncake JSONL trace (no model compute, block ids only)
    --block-size B        tokens per block (default 512, the trace's own block)
    --capacity-tokens N   pool size in tokens (default 0 = unlimited, never evicts)
    --policy P            cached-block eviction: lru (default), lfu, fifo; with --sweep also all
    --index I             hash (default), radix, or both (runs each, prints each replay's time)
    --time-scale X        arrival timestamps are divided by X (default 1)
    --step-ms X           one prefill or decode step, in ms (default 20)
    --no-prefix-caching   the baseline: every prompt token is computed
    --skip-bad            count and skip bad lines instead of stopping at the first
    --sweep               hit ratio against capacity (512 .. 262,144 blocks of 512 tokens + unlimited)
    --out DIR             with --sweep: write DIR/mooncake_sweep.csv and DIR/mooncake_sweep.png
    --tiers host=N,disk=N lower tiers behind the pool, fastest first, N in tokens (K, M, G =
                          2^10, 2^20, 2^30): blocks the pool evicts move down them (LRU each) and a
                          prompt that misses on the pool is looked up in them; prints each tier's
                          hit ratio (needs --capacity-tokens or --sweep, which then sweeps the
                          pool with these tiers behind it; block ids only, no bytes or IO)
    --json                machine-readable output
  kv-events FILE  import a vLLM/SGLang KV-cache event log (see docs/concepts/prefix-caching.md)
    --json                machine-readable output
  kernel SCENARIO one step's paged-attention launch on the SIMT emulator: thread blocks, the KV
                  blocks each reads, memory transactions per warp load (kvscope trace kernel --help)
)";

// --tiers NAME=TOKENS[,NAME=TOKENS...]: tier names and capacities, converted to whole blocks.
std::vector<TierSpec> parse_tiers(const std::string& text, int block_size) {
  const std::string expected =
      "NAME=TOKENS[,NAME=TOKENS...] such as host=1M,disk=8M (TOKENS an integer >= 0, optionally "
      "with K, M or G = 2^10, 2^20, 2^30)";
  std::vector<TierSpec> tiers;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const std::size_t eq = item.find('=');
    const std::string name = eq == std::string::npos ? "" : item.substr(0, eq);
    std::string size = eq == std::string::npos ? "" : item.substr(eq + 1);
    std::int64_t scale = 1;
    if (!size.empty() && (size.back() == 'K' || size.back() == 'M' || size.back() == 'G')) {
      scale = std::int64_t{1} << (size.back() == 'K' ? 10 : size.back() == 'M' ? 20 : 30);
      size.pop_back();
    }
    const bool name_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_';
    });
    const bool size_ok =
        !size.empty() && size.size() <= 12 &&
        std::all_of(size.begin(), size.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!name_ok || !size_ok)
      fail_expected("--tiers", expected, "'" + item + "' in '" + text + "'");
    for (const TierSpec& t : tiers) {
      if (t.name == name) fail_expected("--tiers", "each tier named once", "'" + name + "' twice");
    }
    const std::int64_t tokens = std::stoll(size);
    if (tokens > (std::int64_t{1} << 50) / scale) {
      fail_expected("--tiers", "at most 2^50 tokens per tier", "'" + item + "'");
    }
    tiers.push_back(TierSpec{name, tokens * scale / block_size});
    start = end + 1;
  }
  return tiers;
}

double share(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

nlohmann::json tiers_json(const MooncakeReplayResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const MooncakeTierResult& t : r.tiers) {
    out.push_back({{"name", t.spec.name},
                   {"capacity_blocks", t.spec.capacity_blocks},
                   {"hit_tokens", t.hit_tokens},
                   {"token_hit_ratio", share(t.hit_tokens, r.cache.prompt_tokens)},
                   {"blocks_written", t.stats.written},
                   {"blocks_passed_down", t.stats.passed_down},
                   {"peak_blocks_held", t.stats.peak_held}});
  }
  return out;
}

nlohmann::json result_json(const MooncakeReplayResult& r) {
  const PrefixCacheMetrics& m = r.cache;
  nlohmann::json reasons = nlohmann::json::object();
  for (int i = 0; i < kNumMissReasons; ++i) {
    reasons[std::string(miss_reason_name(static_cast<MissReason>(i)))] =
        m.lookups_by_reason[static_cast<std::size_t>(i)];
  }
  return {{"requests", r.requests},
          {"admitted", r.admitted},
          {"rejected", r.rejected},
          {"num_blocks", r.num_blocks},
          {"prompt_tokens", m.prompt_tokens},
          {"hit_tokens", m.hit_tokens},
          {"token_hit_ratio", m.token_hit_rate()},
          {"block_hit_ratio", m.block_hit_rate()},
          {"prefill_tokens_saved", m.hit_tokens},
          {"peak_blocks_held", r.peak_blocks_held},
          {"peak_blocks_no_sharing", r.peak_blocks_no_sharing},
          {"peak_blocks_cached", r.peak_blocks_cached},
          {"peak_running", r.peak_running},
          {"peak_waiting", r.peak_waiting},
          {"evictions", m.evictions},
          {"collisions", m.collisions},
          {"lookups_by_reason", reasons},
          {"simulated_seconds", r.end_ms / 1000.0},
          {"replay_wall_seconds", r.wall_seconds},
          {"tiers", tiers_json(r)}};
}

void print_result(const MooncakeReplayConfig& c, const MooncakeReplayResult& r) {
  const PrefixCacheMetrics& m = r.cache;
  std::printf(
      "replay: index %s, policy %s, block size %d, capacity %s (%s blocks)%s\n",
      std::string(index_kind_name(c.index)).c_str(),
      std::string(eviction_policy_name(c.policy)).c_str(), c.block_size,
      c.capacity_tokens ? (with_commas(c.capacity_tokens) + " tokens").c_str() : "unlimited",
      with_commas(r.num_blocks).c_str(), c.prefix_caching ? "" : ", prefix caching OFF");
  std::printf("  requests %s admitted, %s rejected (larger than the pool)\n",
              with_commas(r.admitted).c_str(), with_commas(r.rejected).c_str());
  std::printf("  hit ratio: %.4f of prompt tokens (%s of %s), %.4f of full prompt blocks\n",
              m.token_hit_rate(), with_commas(m.hit_tokens).c_str(),
              with_commas(m.prompt_tokens).c_str(), m.block_hit_rate());
  std::printf("  prefill tokens saved: %s\n", with_commas(m.hit_tokens).c_str());
  std::printf(
      "  peak blocks held by running requests: %s (unshared they would be %s); peak cached: %s\n",
      with_commas(r.peak_blocks_held).c_str(), with_commas(r.peak_blocks_no_sharing).c_str(),
      with_commas(r.peak_blocks_cached).c_str());
  std::printf("  evictions: %s; peak running %d, peak waiting %d; simulated %.0f s\n",
              with_commas(m.evictions).c_str(), r.peak_running, r.peak_waiting, r.end_ms / 1000.0);
  std::printf("  lookups by reason:");
  for (int i = 0; i < kNumMissReasons; ++i) {
    const auto n = m.lookups_by_reason[static_cast<std::size_t>(i)];
    if (n)
      std::printf(" %s %s", std::string(miss_reason_name(static_cast<MissReason>(i))).c_str(),
                  with_commas(n).c_str());
  }
  std::printf("\n");
  if (!r.tiers.empty()) {
    const std::int64_t prompt = m.prompt_tokens;
    std::printf(
        "  tiers (block ids only: which tier a prompt block is found in, no bytes or IO):\n");
    std::printf("    %-8s %14s %10s %16s %16s\n", "tier", "capacity", "hit ratio", "blocks written",
                "passed down");
    std::printf("    %-8s %14s %10.4f\n", "device", (with_commas(r.num_blocks) + " blk").c_str(),
                m.token_hit_rate());
    for (const MooncakeTierResult& t : r.tiers) {
      std::printf("    %-8s %14s %10.4f %16s %16s\n", t.spec.name.c_str(),
                  (with_commas(t.spec.capacity_blocks) + " blk").c_str(),
                  share(t.hit_tokens, prompt), with_commas(t.stats.written).c_str(),
                  with_commas(t.stats.passed_down).c_str());
    }
    std::printf("    on the device behind a reloaded block: %.4f; all tiers together: %.4f\n",
                share(r.device_behind_reload_tokens, prompt), share(r.all_hit_tokens(), prompt));
  }
  std::printf("  replay time: %.2f s (one thread, including synthetic token generation)\n",
              r.wall_seconds);
}

void write_sweep_outputs(
    const std::string& dir, const std::string& source, int block_size,
    const std::vector<TierSpec>& tiers,
    const std::vector<
        std::pair<EvictionPolicyKind, std::vector<std::pair<std::int64_t, MooncakeReplayResult>>>>&
        rows) {
  std::filesystem::create_directories(dir);
  write_file_atomically(dir + "/mooncake_sweep.csv", [&](std::ostream& out) {
    out << "policy,capacity_tokens,capacity_blocks,token_hit_ratio,block_hit_ratio,evictions,peak_"
           "blocks_held";
    for (const TierSpec& t : tiers) out << ",tier_" << t.name << "_hit_ratio";
    if (!tiers.empty()) out << ",all_tiers_hit_ratio";
    out << '\n';
    for (const auto& [policy, pts] : rows) {
      for (const auto& [cap, r] : pts) {
        out << eviction_policy_name(policy) << ',' << cap << ',' << r.num_blocks << ','
            << r.cache.token_hit_rate() << ',' << r.cache.block_hit_rate() << ','
            << r.cache.evictions << ',' << r.peak_blocks_held;
        for (std::size_t t = 0; t < tiers.size(); ++t) {
          out << ','
              << (r.tiers.empty() ? 0.0 : share(r.tiers[t].hit_tokens, r.cache.prompt_tokens));
        }
        if (!tiers.empty()) out << ',' << share(r.all_hit_tokens(), r.cache.prompt_tokens);
        out << '\n';
      }
    }
  });
  PlotSpec spec;
  spec.title = "Prefix hit ratio vs capacity: " + std::filesystem::path(source).stem().string();
  spec.x_label = "cache capacity (blocks of " + std::to_string(block_size) + " tokens)";
  spec.y_label = "hit ratio (prompt tokens)";
  spec.log_x = true;
  double unlimited = 0.0;
  for (const auto& [policy, pts] : rows) {
    // One line per policy; with tiers, one per policy and depth: the pool, the pool + the first
    // tier, ... (each tier's share is the gap between two lines).
    for (std::size_t depth = 0; depth <= tiers.size(); ++depth) {
      PlotSeries s;
      s.label = std::string(eviction_policy_name(policy));
      if (!tiers.empty()) s.label += depth == 0 ? ": pool" : " + " + tiers[depth - 1].name;
      s.markers = true;
      for (const auto& [cap, r] : pts) {
        if (cap == 0) {
          unlimited = r.cache.token_hit_rate();
          continue;
        }
        std::int64_t hit = r.cache.hit_tokens;
        for (std::size_t t = 0; t < depth; ++t) hit += r.tiers[t].hit_tokens;
        s.x.push_back(r.num_blocks);
        s.y.push_back(share(hit, r.cache.prompt_tokens));
      }
      spec.series.push_back(std::move(s));
    }
  }
  char label[64];
  std::snprintf(label, sizeof label, "unlimited capacity: %.3f", unlimited);
  spec.h_lines.emplace_back(unlimited, label);
  spec.footnote = "kvscope trace mooncake --sweep: block ids only, no model compute";
  if (!tiers.empty()) {
    spec.x_label = "pool capacity (blocks of " + std::to_string(block_size) + " tokens)";
    spec.footnote = "block ids only; tiers behind the pool:";
    for (const TierSpec& t : tiers) {
      spec.footnote += (&t == &tiers.front() ? " " : ", ") + t.name + " " +
                       with_commas(t.capacity_blocks) + " blocks";
    }
  }
  write_png_plot(spec, dir + "/mooncake_sweep.png");
}

// The replay configuration and the policies and indexes to run, checked in the order the errors
// are reported.
struct MooncakeFlags {
  MooncakeReplayConfig config;
  std::vector<EvictionPolicyKind> policies;
  std::vector<IndexKind> indexes;
};

MooncakeFlags read_mooncake_flags(const Args& args) {
  MooncakeFlags f;
  MooncakeReplayConfig& c = f.config;
  c.block_size = args.get_int("--block-size", kMooncakeBlockTokens);
  c.capacity_tokens = args.get_i64("--capacity-tokens", 0);
  c.time_scale = args.get_double("--time-scale", 1.0);
  c.step_ms = args.get_double("--step-ms", 20.0);
  c.prefix_caching = !args.has("--no-prefix-caching");
  if (args.has("--tiers")) {
    if (c.block_size <= 0)
      fail_expected("--block-size", "a positive integer", std::to_string(c.block_size));
    if (!args.has("--sweep") && c.capacity_tokens <= 0) {
      fail_expected(
          "--tiers", "--capacity-tokens N as well, or --sweep (an unlimited pool never evicts)",
          args.has("--capacity-tokens") ? "--capacity-tokens " + std::to_string(c.capacity_tokens)
                                        : "no --capacity-tokens");
    }
    require_prefix_caching_for_tiers(true, c.prefix_caching, "--tiers");
    c.tiers = parse_tiers(args.get("--tiers"), c.block_size);
  }
  const std::string policy_name = args.get("--policy", "lru");
  if (policy_name == "all" && args.has("--sweep")) {
    f.policies = {EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu, EvictionPolicyKind::kFifo};
  } else if (auto p = parse_eviction_policy(policy_name)) {
    f.policies = {*p};
  } else {
    fail_expected("--policy", args.has("--sweep") ? "lru, lfu, fifo or all" : "lru, lfu or fifo",
                  "'" + policy_name + "'");
  }
  const std::string index_name = args.get("--index", "hash");
  if (index_name == "both") {
    f.indexes = {IndexKind::kHashChain, IndexKind::kRadix};
  } else if (auto k = parse_index_kind(index_name)) {
    f.indexes = {*k};
  } else {
    fail_expected("--index", "hash, radix or both", "'" + index_name + "'");
  }
  c.policy = f.policies.front();
  return f;
}

void print_trace_summary(const MooncakeTrace& trace, double hash_id_reuse_ratio) {
  std::printf("mooncake trace %s: %s requests, %s bad lines skipped\n", trace.source.c_str(),
              with_commas(static_cast<std::int64_t>(trace.requests.size())).c_str(),
              with_commas(trace.skipped_lines).c_str());
  for (const auto& e : trace.skipped_errors) std::printf("  skipped: %s\n", e.c_str());
  std::printf(
      "trace-level reuse from hash ids alone (unlimited, last partial block counted): %.4f\n",
      hash_id_reuse_ratio);
}

// One replay per index (--index both: two), printed or added to the JSON.
void run_replays(const MooncakeTrace& trace, MooncakeReplayConfig c,
                 const std::vector<IndexKind>& indexes, bool json, nlohmann::json& out) {
  for (IndexKind k : indexes) {
    c.index = k;
    const MooncakeReplayResult r = replay_mooncake(trace, c);
    if (json) {
      nlohmann::json j = result_json(r);
      j["index"] = std::string(index_kind_name(k));
      out["replays"].push_back(j);
    } else {
      print_result(c, r);
    }
  }
}

using SweepRows = std::vector<
    std::pair<EvictionPolicyKind, std::vector<std::pair<std::int64_t, MooncakeReplayResult>>>>;

void print_sweep_header(const std::vector<TierSpec>& tiers) {
  std::printf("%-6s %16s %12s %10s", "policy", "capacity tokens", "blocks", "hit ratio");
  for (const TierSpec& t : tiers) std::printf(" %10s", ("+" + t.name).c_str());
  if (!tiers.empty()) std::printf(" %10s", "all");
  std::printf(" %12s %10s\n", "evictions", "seconds");
}

void print_sweep_row(EvictionPolicyKind p, std::int64_t cap, const MooncakeReplayResult& r,
                     const std::vector<TierSpec>& tiers) {
  std::printf("%-6s %16s %12s %10.4f", std::string(eviction_policy_name(p)).c_str(),
              cap ? with_commas(cap).c_str() : "unlimited", with_commas(r.num_blocks).c_str(),
              r.cache.token_hit_rate());
  for (std::size_t t = 0; t < tiers.size(); ++t) {
    if (r.tiers.empty()) {
      std::printf(" %10s", "-");
    } else {
      std::printf(" %10.4f", share(r.tiers[t].hit_tokens, r.cache.prompt_tokens));
    }
  }
  if (!tiers.empty()) std::printf(" %10.4f", share(r.all_hit_tokens(), r.cache.prompt_tokens));
  std::printf(" %12s %10.2f\n", with_commas(r.cache.evictions).c_str(), r.wall_seconds);
}

// --sweep: every policy at every capacity, a row each, then the CSV and PNG with --out.
void run_sweep(const Args& args, const MooncakeTrace& trace, MooncakeReplayConfig c,
               const std::vector<EvictionPolicyKind>& policies, bool json, nlohmann::json& out) {
  SweepRows rows;
  // With tiers, each capacity's pool has the same tiers behind it (the unlimited pool, which
  // never evicts, runs without).
  const std::vector<TierSpec> tiers = c.tiers;
  if (!json) print_sweep_header(tiers);
  std::vector<std::int64_t> caps;
  for (std::int64_t b = 512; b <= 262144; b *= 2) caps.push_back(b * kMooncakeBlockTokens);
  caps.push_back(0);
  Progress progress("trace mooncake --sweep", static_cast<int>(policies.size() * caps.size()));
  for (EvictionPolicyKind p : policies) {
    c.policy = p;
    rows.push_back({p, {}});
    for (std::int64_t cap : caps) {
      c.capacity_tokens = cap;
      c.tiers = cap ? tiers : std::vector<TierSpec>{};
      progress.step(std::string(eviction_policy_name(p)) + ", " +
                    (cap ? with_commas(cap) + " tokens" : std::string("unlimited")));
      const MooncakeReplayResult r = replay_mooncake(trace, c);
      if (!json) progress.clear();  // the row goes below, not over, the progress line
      if (json) {
        nlohmann::json j = result_json(r);
        j["policy"] = std::string(eviction_policy_name(p));
        j["capacity_tokens"] = cap;
        out["sweep"].push_back(j);
      } else {
        print_sweep_row(p, cap, r, tiers);
      }
      rows.back().second.emplace_back(cap, r);
    }
  }
  if (args.has("--out")) {
    write_sweep_outputs(args.get("--out"), trace.source, c.block_size, tiers, rows);
    if (!json)
      std::printf("wrote %s/mooncake_sweep.csv and %s/mooncake_sweep.png\n",
                  args.get("--out").c_str(), args.get("--out").c_str());
  }
}

int trace_mooncake(const Args& args) {
  if (args.positional().size() != 2)
    throw Error("trace mooncake", "expected one trace FILE; see --help");
  MooncakeFlags flags = read_mooncake_flags(args);
  MooncakeReplayConfig& c = flags.config;
  const bool json = args.has("--json");
  MooncakeLoadOptions lo;
  lo.skip_bad = args.has("--skip-bad");
  const MooncakeTrace trace = load_mooncake_trace(args.positional()[1], lo);
  nlohmann::json out = {{"trace", trace.source},
                        {"requests", trace.requests.size()},
                        {"skipped_lines", trace.skipped_lines},
                        {"hash_id_reuse_ratio", mooncake_hash_id_reuse_ratio(trace.requests)}};
  if (!json) print_trace_summary(trace, out["hash_id_reuse_ratio"].get<double>());
  if (!args.has("--sweep")) {
    run_replays(trace, c, flags.indexes, json, out);
  } else {
    c.index = flags.indexes.front();
    run_sweep(args, trace, c, flags.policies, json, out);
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int trace_kv_events(const Args& args) {
  if (args.positional().size() != 2)
    throw Error("trace kv-events", "expected one event log FILE; see --help");
  const KvEventImport imp = load_kv_events(args.positional()[1]);
  if (args.has("--json")) {
    nlohmann::json out = {{"log", args.positional()[1]},
                          {"lines", imp.lines},
                          {"events", imp.events.size()},
                          {"blocks_stored", imp.blocks_stored},
                          {"blocks_removed", imp.blocks_removed},
                          {"clears", imp.clears},
                          {"unknown_parents", imp.unknown_parents},
                          {"unknown_removals", imp.unknown_removals},
                          {"peak_cached", imp.peak_cached},
                          {"cached_at_end", imp.cached_at_end}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("kv events %s: %s lines -> %s kvscope events\n", args.positional()[1].c_str(),
              with_commas(imp.lines).c_str(),
              with_commas(static_cast<std::int64_t>(imp.events.size())).c_str());
  std::printf("  blocks stored %s, removed %s, all-cleared %s times; cached now %s, peak %s\n",
              with_commas(imp.blocks_stored).c_str(), with_commas(imp.blocks_removed).c_str(),
              with_commas(imp.clears).c_str(), with_commas(imp.cached_at_end).c_str(),
              with_commas(imp.peak_cached).c_str());
  std::printf("  parents never stored in this log: %s; removals of blocks never stored: %s\n",
              with_commas(imp.unknown_parents).c_str(), with_commas(imp.unknown_removals).c_str());
  return 0;
}

}  // namespace

int cmd_trace(const Argv& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    std::fputs(kHelp, argv.empty() ? stderr : stdout);
    return argv.empty() ? 2 : 0;
  }
  if (argv[0] == "kernel") return cmd_trace_kernel(argv);
  const Args args(argv,
                  {"--block-size", "--capacity-tokens", "--policy", "--index", "--time-scale",
                   "--step-ms", "--out", "--tiers"},
                  {"--skip-bad", "--json", "--sweep", "--no-prefix-caching", "--help"});
  if (args.has("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (args.positional().empty())
    throw Error("trace", "expected mooncake, kv-events or kernel; see --help");
  const std::string what = args.positional()[0];
  if (what == "mooncake") return trace_mooncake(args);
  if (what == "kv-events") return trace_kv_events(args);
  fail_expected("trace", "mooncake, kv-events or kernel", "'" + what + "'");
}

}  // namespace kvscope::cli
