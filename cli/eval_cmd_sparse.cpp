// kvscope eval sparse: sparse attention by token selection (oracle top-k, Quest's blocks, a proxy
// indexer from the model's weights, SparQ's query channels) on the real model against dense
// attention over the same whole fp32 cache, each budget beside token eviction at the same budget.
// All runs in lockstep.
#include <cstdio>
#include <limits>
#include <memory>

#include "cli/eval_input.h"
#include "cli/eval_report.h"
#include "cli/eval_verbs.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "engine/analysis/eviction_quality.h"
#include "engine/analysis/sparse_quality.h"
#include "engine/common/error.h"
#include "engine/common/setting_source.h"

namespace kvscope::cli {
namespace {

struct SparsePlan {
  std::vector<int> topk;
  std::vector<SelectorKind> selectors;
  SparseOptions base;  // sinks, recent, proxy dims
  EvictionKind beside = EvictionKind::kSinksWindow;
  bool with_eviction = true;
};

// Every flag checked before the model loads, except what needs its shape (proxy dims, k against
// the block size: checked right after it loads, before the reference run).
SparsePlan parse_plan(const Args& args) {
  SparsePlan p;
  p.topk = parse_int_list(args.get("--topk", "64,128,256"), "--topk", 1,
                          std::numeric_limits<int>::max(), "comma-separated integers >= 1");
  for (const std::string& s : split_list(args.get("--selector", "oracle,quest,proxy,sparq")))
    p.selectors.push_back(parse_selector_kind(s, "--selector"));
  p.base.sinks = args.get_int("--sinks", 0);
  p.base.recent = args.get_int("--recent", 0);
  p.base.dense_layers = args.get_int("--dense-layers", 0);
  if (p.base.sinks < 0) fail_expected("--sinks", "an integer >= 0", std::to_string(p.base.sinks));
  if (p.base.recent < 0)
    fail_expected("--recent", "an integer >= 0", std::to_string(p.base.recent));
  const std::string beside = args.get("--evict-beside", "sinks");
  p.with_eviction = beside != "none";
  if (p.with_eviction) {
    p.beside = parse_eviction_kind(beside, "--evict-beside");
    if (p.beside == EvictionKind::kNone)
      fail_expected("--evict-beside", "a policy (window, sinks, h2o, ...) or none", beside);
  }
  return p;
}

struct Row {
  bool selection = true;
  int budget = 0;
  std::unique_ptr<SparseVariant> sparse;
  std::unique_ptr<EvictionVariant> evict;
  CacheVariant* variant() const {
    return sparse ? static_cast<CacheVariant*>(sparse.get()) : evict.get();
  }
};

// What a row's queries attended and read, per token, beside dense attention: a selection row's
// own counts; an eviction row attends and reads its live tokens (every head the same ones, no
// indexer), priced the same way in the fp32 cache it ran with.
SparseCost row_cost(const Row& r, const ModelConfig& c, double dense_keys) {
  if (r.sparse) return r.sparse->cost(c);
  const EvictionRunStats& e = r.evict->stats();
  const double q = static_cast<double>(e.queries);
  const double heads = static_cast<double>(c.n_layers) * c.n_heads;
  const double kv_heads = static_cast<double>(c.n_layers) * c.n_kv_heads;
  SparseStats s;
  s.queries = e.queries;
  s.keys_attended = e.mean_attended * q * heads;
  s.keys_dense = dense_keys * q * heads;
  s.keys_read = e.mean_attended * q * kv_heads;
  s.keys_dense_read = dense_keys * q * kv_heads;
  const double head_bytes = c.head_dim() * 4.0;  // fp32 K or V of one head
  return sparse_cost(s, c, head_bytes, head_bytes, 4.0);
}

nlohmann::json row_json(const Row& r, const QualityReport& q, const SparseCost& cost) {
  nlohmann::json j = report_json(q);
  j["mechanism"] = r.selection ? "selection" : "eviction";
  j["budget"] = r.budget;
  if (r.sparse) {
    const SparseOptions& o = r.sparse->options();
    j["selector"] = selector_kind_name(o.selector);
    j["topk"] = o.topk;
    j["sinks"] = o.sinks;
    j["recent"] = o.recent;
    j["dense_layers"] = o.dense_layers;
    if (o.selector == SelectorKind::kProxy || o.selector == SelectorKind::kSparq)
      j["proxy_dims"] = o.proxy_dims;
  } else {
    const EvictionConfig& e = r.evict->options().evictor.policy;
    j["policy"] = eviction_kind_name(e.kind);
    j["sinks"] = e.sinks;
    j["peak_bytes_per_context_token"] = r.evict->stats().peak_bytes_per_context_token();
  }
  j["keys_attended_per_query"] = cost.keys_per_query;
  j["dense_keys_per_query"] = cost.dense_keys_per_query;
  j["attention_macs_per_token"] = cost.attention_macs;
  j["indexer_macs_per_token"] = cost.indexer_macs;
  j["dense_attention_macs_per_token"] = cost.dense_macs;
  j["macs_fraction_of_dense"] = cost.macs_fraction();
  j["kv_bytes_read_per_token"] = cost.kv_bytes;
  j["indexer_bytes_read_per_token"] = cost.indexer_bytes;
  j["dense_kv_bytes_read_per_token"] = cost.dense_kv_bytes;
  j["bytes_read_fraction_of_dense"] = cost.bytes_fraction();
  j["buckets"] = buckets_json(q);
  return j;
}

int run(const Args& args) {
  check_eval_input_flags(args);
  const int block_size = eval_block_size(args);
  SparsePlan plan = parse_plan(args);
  EvalModel m = load_eval_model(args);
  if (m.backend->name() != "cpu") {
    fail_expected("--backend", "cpu (sparse selection runs on the CPU backend)", m.backend->name());
  }
  const ModelConfig& c = m.config();
  plan.base.proxy_dims = args.get_int("--proxy-dims", std::max(2, c.head_dim() / 4 / 2 * 2));
  for (int k : plan.topk) {
    for (SelectorKind kind : plan.selectors) {
      SparseOptions o = plan.base;
      o.selector = kind;
      o.topk = k;
      with_setting_sources({{kSparseTopk, "--topk"},
                            {kSparseSinks, "--sinks"},
                            {kSparseRecent, "--recent"},
                            {kSparseDenseLayers, "--dense-layers"},
                            {kSparseProxyDims, "--proxy-dims"}},
                           [&] { validate(o, c, block_size); });
    }
  }
  bool any_proxy = false;
  for (SelectorKind kind : plan.selectors) any_proxy = any_proxy || kind == SelectorKind::kProxy;
  const std::vector<std::vector<int>> channels =
      any_proxy ? proxy_channels(c, m.loaded.model->weights(), plan.base.proxy_dims)
                : std::vector<std::vector<int>>{};
  EvalText text = read_eval_text(args, m);
  const int bucket = args.get_int("--bucket", args.has("--long") ? 256 : 0);
  if (bucket < 0) fail_expected("--bucket", "an integer >= 0", std::to_string(bucket));

  std::vector<Row> rows;
  for (int k : plan.topk) {
    for (SelectorKind kind : plan.selectors) {
      SparseOptions o = plan.base;
      o.selector = kind;
      o.topk = k;
      Row r;
      r.budget = k;
      r.sparse = std::make_unique<SparseVariant>(o, block_size, channels);
      rows.push_back(std::move(r));
    }
    if (plan.with_eviction) {
      EvictionRunOptions e;
      e.block_size = block_size;
      e.evictor.policy.kind = plan.beside;
      e.evictor.policy.budget = k;
      Row r;
      r.selection = false;
      r.budget = k;
      r.evict = std::make_unique<EvictionVariant>(e);
      rows.push_back(std::move(r));
    }
  }
  const auto evaluator = run_reference(m, text, block_size);
  std::vector<CacheVariant*> all;
  for (const Row& r : rows) all.push_back(r.variant());
  EvalScope scope;
  scope.bucket_size = bucket;
  std::vector<QualityReport> reports;
  {
    Progress progress("eval sparse", 1, "positions");
    progress.step(std::to_string(all.size()) + " runs in lockstep");
    reports = evaluator->evaluate_all(all, progress.callback(), scope);
  }
  // Dense attention's keys per query: query p of a window holds p + 1 keys.
  double dense_keys = 0.0;
  long queries = 0;
  for (const auto& w : evaluator->windows()) {
    for (std::size_t p = 0; p < w.size(); ++p, ++queries) dense_keys += static_cast<double>(p + 1);
  }
  dense_keys /= static_cast<double>(std::max(1L, queries));

  if (args.has("--json")) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      nlohmann::json j = row_json(rows[i], reports[i], row_cost(rows[i], c, dense_keys));
      j["source"] = text.source;
      j["block_size"] = block_size;
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  const QualityReport& first = reports.front();
  std::printf(
      "eval sparse: %s, %d windows (longest %d tokens), %ld scored positions, block %d, fp32 "
      "cache\n",
      text.source.c_str(), first.windows, text.max_window, first.positions, block_size);
  std::printf("  dense attention: perplexity %.4f, %.1f keys per query on average\n",
              first.ppl_reference, dense_keys);
  std::printf(
      "  selection keeps the whole cache and attends k keys per query head; eviction keeps k "
      "tokens\n");
  std::printf(
      "  | run | keys/query | ppl | KL mean | top-1 | attention MACs | K/V bytes read | cache "
      "B/token |\n");
  std::printf("  |---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const QualityReport& q = reports[i];
    const SparseCost cost = row_cost(rows[i], c, dense_keys);
    const double held = rows[i].sparse ? q.footprint.bytes_per_token
                                       : rows[i].evict->stats().peak_bytes_per_context_token();
    std::printf("  | %s%s | %.1f | %.4f | %.3e | %.2f%% | %.1f%% | %.1f%% | %.0f |\n",
                rows[i].sparse ? "" : "evict ", q.variant.c_str(), cost.keys_per_query,
                q.ppl_variant, q.kl_mean, 100.0 * q.top1_agreement, 100.0 * cost.macs_fraction(),
                100.0 * cost.bytes_fraction(), held);
  }
  std::printf(
      "  MACs and bytes read are per token as a share of dense attention's over the same keys, "
      "the indexer's included\n  (the oracle reads every key to choose: it is the quality "
      "bound, not a saving)\n");
  return 0;
}

}  // namespace

const Subverb& eval_sparse_verb() {
  static const Subverb verb{
      "sparse",
      "sparse attention by token selection (oracle, quest, proxy, sparq) beside eviction",
      eval_value_flags({"--topk", "--selector", "--sinks", "--recent", "--dense-layers",
                        "--proxy-dims", "--evict-beside", "--bucket", "--block-size"}),
      {"--json"},
      eval_help(R"(usage: kvscope eval sparse [options]

Sparse attention by token selection against dense attention over the same whole fp32 cache: each
query head attends only to the k keys a selector picks, the cache keeps every token (a key
skipped now can be picked later). Beside each k, token eviction at the same budget (which keeps
only k tokens). Perplexity, KL, top-1 agreement, keys attended, and the attention multiply-adds
and K/V bytes read per token against dense, indexer included. All runs in lockstep.

  --topk LIST                keys per query head (default 64,128,256)
  --selector LIST            oracle (the true top-k scores: the bound any indexer can reach),
                             quest (whole blocks by Quest's min/max bound), proxy (top-k by q.k
                             over a few RoPE pairs chosen by weight norm), sparq (top-k by q.k
                             over the query's largest |q| channels); default all four
  --sinks S                  first tokens always attended, counted in k (default 0)
  --recent R                 last tokens always attended, counted in k (default 0)
  --dense-layers L           the first L layers attend every key (Quest's setup: 2; default 0)
  --proxy-dims R             proxy, sparq: channels per head (proxy: even; default head_dim / 4)
  --evict-beside POLICY      eviction at each k: window, sinks (StreamingLLM, 4 sinks; the
                             default), h2o, snapkv, tova, random, or none
  --bucket B                 per-position figures in buckets of B in the JSON (default 256
                             with --long)
  --block-size B             KV block size in tokens, quest's unit (default 16)
  --json                     print one JSON object per run
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli
