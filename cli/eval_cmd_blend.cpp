// kvscope eval blend: CacheBlend on the real model. Each window's context is cut into chunks, each
// prefilled alone (as a RAG server caches retrieved documents), and reused by concatenation with
// a share of its tokens recomputed; the continuation after it is scored against a full prefill.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/eval_input.h"
#include "cli/eval_verbs.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "engine/analysis/cache_blend.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/report/png_plot.h"

namespace kvscope::cli {
namespace {

// Each window's last `continuation` tokens follow its context; windows too short to hold the
// chunks and a scored continuation are left out (how many is said).
struct Samples {
  std::vector<BlendSample> samples;
  int skipped = 0;
  int shortest_context = 0, longest_context = 0;
};

Samples split_windows(const EvalText& text, int continuation, int chunks) {
  Samples out;
  for (const std::vector<int>& w : text.windows) {
    const int n = static_cast<int>(w.size()) - continuation;
    if (n < chunks) {
      ++out.skipped;
      continue;
    }
    BlendSample s;
    s.context.assign(w.begin(), w.begin() + n);
    s.continuation.assign(w.begin() + n, w.end());
    out.shortest_context = out.samples.empty() ? n : std::min(out.shortest_context, n);
    out.longest_context = std::max(out.longest_context, n);
    out.samples.push_back(std::move(s));
  }
  if (out.samples.empty()) {
    fail_expected(
        "--continuation",
        "windows of at least --continuation + --chunks tokens (" + std::to_string(continuation) +
            " + " + std::to_string(chunks) +
            ": the continuation and a token per chunk); use a longer --text or --long, "
            "or a shorter --continuation or fewer --chunks",
        "windows of at most " + std::to_string(text.max_window) + " tokens in " + text.source);
  }
  return out;
}

// One line per 96 tokens of the first context: '#' recomputed, '.' reused, '|' where a chunk
// starts.
void print_map(const std::vector<int>& starts, const std::vector<int>& recomputed, int tokens) {
  std::string line;
  std::size_t next_pick = 0, next_start = 1;
  for (int s = 0; s < tokens; ++s) {
    if (next_start < starts.size() && starts[next_start] == s) {
      line += '|';
      ++next_start;
    }
    const bool picked = next_pick < recomputed.size() && recomputed[next_pick] == s;
    if (picked) ++next_pick;
    line += picked ? '#' : '.';
  }
  for (std::size_t at = 0; at < line.size(); at += 96)
    std::printf("    %s\n", line.substr(at, 96).c_str());
}

std::string per_chunk(const std::vector<long>& counts) {
  std::string out;
  for (const long n : counts) {
    if (!out.empty()) out += '/';
    out += std::to_string(n);
  }
  return out;
}

std::string row_name(const BlendRow& r) {
  if (r.method == BlendRow::Method::kReuse) return "plain reuse (0%)";
  if (r.method == BlendRow::Method::kFull) return "full prefill";
  return "blend " + std::to_string(r.recompute_percent) + "%";
}

// DIR/blend.csv (a row per run) and DIR/blend.png: the continuation's KL against the prefill
// work each run did, as layer work and as measured time (shares of the full prefill's), from
// plain reuse at 0 to the full prefill at 100%.
void write_outputs(const std::string& dir, const BlendReport& report, const std::string& model,
                   const std::string& command) {
  checked_out_dir(dir);
  const BlendRow& full = report.rows.back();
  const auto layers = [&](const BlendRow& r) {
    return 100.0 * static_cast<double>(r.token_layers) /
           static_cast<double>(std::max(1L, report.full_token_layers));
  };
  const auto time = [&](const BlendRow& r) {
    return full.prefill_seconds > 0 ? 100.0 * r.prefill_seconds / full.prefill_seconds : 0.0;
  };
  write_file_atomically(dir + "/blend.csv", [&](std::ostream& out) {
    out << "method,recompute_percent,tokens_recomputed,context_tokens,ppl_reference,ppl_variant,"
           "kl_mean,kl_max,top1_agreement,layer_work_percent,prefill_seconds,"
           "prefill_time_percent\n";
    for (const BlendRow& r : report.rows) {
      char line[512];
      std::snprintf(line, sizeof line, "%s,%d,%ld,%ld,%.6f,%.6f,%.6e,%.6e,%.6f,%.3f,%.6f,%.3f\n",
                    blend_method_name(r.method).c_str(), r.recompute_percent, r.tokens_recomputed,
                    r.context_tokens, r.quality.ppl_reference(), r.quality.ppl_variant(),
                    r.quality.kl_mean(), r.quality.kl_max(), r.quality.top1_agreement(), layers(r),
                    r.prefill_seconds, time(r));
      out << line;
    }
  });
  PlotSpec plot;
  plot.title = "CacheBlend, " + model + ": KL vs prefill work";
  plot.x_label = "share of the full prefill (%): 0 = plain reuse, 100 = full prefill";
  plot.y_label = "mean KL (nats)";
  plot.footnote = command;
  PlotSeries work{"layer work (token-layers run)", {}, {}, true, true};
  // Measured times can come out of order (a noisy machine): points, not a line.
  PlotSeries measured{"measured prefill time", {}, {}, false, true};
  for (const BlendRow& r : report.rows) {
    work.x.push_back(layers(r));
    work.y.push_back(r.quality.kl_mean());
    measured.x.push_back(time(r));
    measured.y.push_back(r.quality.kl_mean());
  }
  plot.series = {work, measured};
  write_png_plot(plot, dir + "/blend.png");
  std::printf("wrote %s/blend.csv and blend.png\n", dir.c_str());
}

int run(const Args& args) {
  check_eval_input_flags(args);
  const int block_size = eval_block_size(args);
  BlendOptions o;
  o.block_size = block_size;
  o.chunks = args.get_int("--chunks", 4);
  if (o.chunks < 1) fail_expected("--chunks", "an integer >= 1", std::to_string(o.chunks));
  const std::vector<int> percents =
      parse_int_list(args.get("--recompute", "0,5,15,30"), "--recompute", 0, 100,
                     "comma-separated percentages from 0 to 100");
  const int continuation = args.get_int("--continuation", 64);
  if (continuation < 2) {
    fail_expected("--continuation", "an integer >= 2 (tokens scored after the context)",
                  std::to_string(continuation));
  }
  EvalModel m = load_eval_model(args);
  if (m.backend->name() != "cpu") {
    fail_expected("--backend", "cpu (CacheBlend's recompute runs on the CPU backend)",
                  m.backend->name());
  }
  const ModelConfig& c = m.config();
  o.check_layer = args.get_int("--check-layer", 1);
  check_blend_layer(o.check_layer, c, "--check-layer");
  EvalText text = read_eval_text(args, m);
  const Samples samples = split_windows(text, continuation, o.chunks);

  BlendReport report;
  {
    Progress progress("eval blend", 1, "prefills");
    progress.step(std::to_string(samples.samples.size()) + " contexts, " +
                  std::to_string(percents.size() + 2) + " prefills each");
    report = evaluate_blend(*m.transformer, samples.samples, o, percents, progress.callback());
  }
  const BlendRow& full = report.rows.back();
  const auto speedup = [&](const BlendRow& r) {
    return r.prefill_seconds > 0 ? full.prefill_seconds / r.prefill_seconds : 0.0;
  };
  const auto layers_share = [&](const BlendRow& r) {
    return report.full_token_layers > 0
               ? static_cast<double>(r.token_layers) / static_cast<double>(report.full_token_layers)
               : 0.0;
  };

  if (args.has("--out")) {
    std::string command = "kvscope eval blend --chunks " + std::to_string(o.chunks) +
                          " --continuation " + std::to_string(continuation) + "; " +
                          std::filesystem::path(text.source).filename().string();
    write_outputs(args.get("--out"), report,
                  std::filesystem::path(m.loaded.model->source()).filename().string(), command);
  }
  if (args.has("--json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const BlendRow& r : report.rows) {
      nlohmann::json j;
      j["method"] = blend_method_name(r.method);
      j["recompute_percent"] = r.recompute_percent;
      j["chunks"] = o.chunks;
      j["check_layer"] = o.check_layer;
      j["contexts"] = report.samples;
      j["context_tokens"] = r.context_tokens;
      j["tokens_recomputed"] = r.tokens_recomputed;
      j["recomputed_per_chunk"] = r.recomputed_per_chunk;
      j["positions"] = r.quality.positions();
      j["ppl_reference"] = r.quality.ppl_reference();
      j["ppl_variant"] = r.quality.ppl_variant();
      j["kl_mean"] = r.quality.kl_mean();
      j["kl_max"] = r.quality.kl_max();
      j["top1_agreement"] = r.quality.top1_agreement();
      j["token_layers"] = r.token_layers;
      j["token_layers_fraction_of_full"] = layers_share(r);
      j["prefill_seconds"] = r.prefill_seconds;
      j["full_prefill_seconds"] = full.prefill_seconds;
      j["prefill_speedup"] = speedup(r);
      j["source"] = text.source;
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf(
      "eval blend: %s, %d contexts of %d-%d tokens in %d chunks, a %d-token continuation after "
      "each (%d predictions scored)%s\n",
      text.source.c_str(), report.samples, samples.shortest_context, samples.longest_context,
      o.chunks, continuation, continuation - 1,
      samples.skipped > 0 ? (" (" + std::to_string(samples.skipped) + " windows too short)").c_str()
                          : "");
  std::printf(
      "  full prefill: perplexity %.4f; the chunks prefilled alone took %.2f s (cached, not "
      "counted below)\n",
      full.quality.ppl_reference(), report.chunk_prefill_seconds);
  std::printf("  tokens checked at layer %d of %d; the recomputed ones run the layers after it\n",
              o.check_layer, c.n_layers);
  std::printf(
      "  | run | tokens recomputed | per chunk | ppl | KL mean | top-1 | layer work | prefill time "
      "| speedup |\n");
  std::printf("  |---|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (const BlendRow& r : report.rows) {
    const std::string name = row_name(r);
    // Plain reuse only re-rotates keys: a ratio against that says nothing.
    char ratio[32] = "re-rotation only";
    if (r.method != BlendRow::Method::kReuse)
      std::snprintf(ratio, sizeof ratio, "%.2fx", speedup(r));
    std::printf("  | %s | %ld | %s | %.4f | %.3e | %.2f%% | %.1f%% | %.3f s | %s |\n", name.c_str(),
                r.tokens_recomputed, per_chunk(r.recomputed_per_chunk).c_str(),
                r.quality.ppl_variant(), r.quality.kl_mean(), 100.0 * r.quality.top1_agreement(),
                100.0 * layers_share(r), r.prefill_seconds, ratio);
  }
  std::printf(
      "  layer work: token-layers run, as a share of the full prefill's; prefill time: the "
      "re-rotation and the recompute (or the full prefill), measured\n");
  if (args.has("--show")) {
    std::printf("  the first context ('#' recomputed, '.' reused, '|' a chunk starts):\n");
    const int tokens = static_cast<int>(samples.samples.front().context.size());
    for (std::size_t i = 0; i + 1 < report.rows.size(); ++i) {
      const BlendRow& r = report.rows[i];
      if (r.method != BlendRow::Method::kBlend) continue;
      std::printf("  blend %d%%:\n", r.recompute_percent);
      print_map(report.first_starts, report.first_recomputed[i], tokens);
    }
  }
  return 0;
}

}  // namespace

const Subverb& eval_blend_verb() {
  static const Subverb verb{
      "blend",
      "CacheBlend: chunks prefilled alone, reused with a share of tokens recomputed",
      eval_value_flags(
          {"--chunks", "--recompute", "--continuation", "--check-layer", "--block-size", "--out"}),
      {"--json", "--show"},
      eval_help(R"(usage: kvscope eval blend [options]

CacheBlend (Yao et al., 2025) on the real model. Each window's context is cut into chunks, each
prefilled alone as a RAG server caches retrieved documents, then reused by concatenation (keys
re-rotated to their place). Plain reuse (0%) recomputes nothing, so no chunk saw the ones before
it; CacheBlend runs every token through the check layer, picks the tokens whose K/V there
deviate most from the reused ones, and recomputes only those through the later layers. The
continuation after the context is scored against a full prefill: perplexity, KL, top-1
agreement, with the prefill work and time each saves (measured). 100% equals the full prefill.

  --chunks N                 chunks per context (default 4)
  --recompute LIST           percentages of the context's tokens to recompute (default
                             0,5,15,30; 0 is plain reuse)
  --continuation T           tokens after the context, each but the last predicting the next,
                             scored (default 64)
  --check-layer L            the layer whose K/V deviation picks the tokens (default 1; at 0
                             the K/V differ only by the re-rotation's rounding)
  --block-size B             KV block size in tokens (default 16)
  --out DIR                  also write DIR/blend.csv and DIR/blend.png (KL against the
                             prefill's layer work and measured time)
  --show                     draw which tokens of the first context each run recomputed
  --json                     print a JSON array, one object per run
)"),
      run};
  return verb;
}

}  // namespace kvscope::cli
