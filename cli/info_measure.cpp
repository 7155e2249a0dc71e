// kvscope info --measure: the KV memory of one sequence at each context, measured on the real
// engine (engine/analysis/kv_memory_probe.h) beside the formula, with a CSV and a PNG.
#include "cli/info_measure.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/format.h"
#include "cli/progress.h"
#include "engine/analysis/kv_memory_probe.h"
#include "engine/analysis/memory_math.h"
#include "engine/analysis/quality.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/common/openmp.h"
#include "engine/common/text_lines.h"
#include "engine/report/png_plot.h"

namespace kvscope::cli {

namespace {

// "45.00 MiB", or "320.0 KiB" below a MiB.
std::string mib(double bytes) {
  char buf[32];
  if (bytes < 1024.0 * 1024.0)
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

// A difference in bytes, exact: "+0", "+61,440".
std::string signed_bytes(double bytes) {
  const auto b = static_cast<std::int64_t>(bytes);
  return (b >= 0 ? "+" : "-") + with_commas(b >= 0 ? b : -b);
}

void write_csv(const std::string& path, const ModelConfig& c, const std::string& model, bool random,
               const KvMemoryProbeOptions& o, double mha_per_token,
               const std::vector<KvMemoryPoint>& points) {
  write_file_atomically(path, [&](std::ostream& out) {
    out << "model,random_weights,k_format,v_format,block_size,layers,kv_heads,head_dim,tokens,"
           "formula_bytes,exact_bytes,blocks,allocated_bytes,pool_bytes,resident_bytes,"
           "mha_formula_bytes,seconds\n";
    for (const KvMemoryPoint& p : points) {
      std::ostringstream row;
      row.precision(17);
      row << model << ',' << (random ? 1 : 0) << ',' << o.k_format.name() << ','
          << o.v_format.name() << ',' << o.block_size << ',' << c.n_layers << ',' << c.n_kv_heads
          << ',' << c.head_dim() << ',' << p.tokens << ',' << p.formula_bytes << ','
          << p.exact_bytes << ',' << p.blocks << ',' << p.allocated_bytes << ',' << p.pool_bytes
          << ',' << p.resident_bytes << ',' << mha_per_token * p.tokens << ',' << p.seconds << '\n';
      out << row.str();
    }
  });
}

void write_png(const std::string& path, const ModelConfig& c, const std::string& name, bool random,
               const KvMemoryProbeOptions& o, double formula_per_token, double mha_per_token,
               const std::vector<KvMemoryPoint>& points, const std::string& command) {
  PlotSpec spec;
  spec.title = "KV cache vs context, " + name + (random ? " [random weights]" : "");
  spec.x_label = "context (tokens)";
  spec.y_label = "KV bytes (MiB)";
  spec.log_x = true;
  spec.log_y = true;
  const double lo = points.front().tokens, hi = points.back().tokens;
  auto line = [&](const std::string& label, double per_token) {
    PlotSeries s;
    s.label = label;
    s.x = {lo, hi};
    s.y = {per_token * lo / (1024.0 * 1024.0), per_token * hi / (1024.0 * 1024.0)};
    spec.series.push_back(s);
  };
  line("formula, " + std::string(attention_kind(c)) + " " + std::to_string(c.n_kv_heads) +
           " KV heads",
       formula_per_token);
  if (c.n_kv_heads != c.n_heads)
    line("formula, same shape as MHA (" + std::to_string(c.n_heads) + " KV heads)", mha_per_token);
  PlotSeries allocated, resident;
  allocated.label = "allocator: blocks x block bytes";
  resident.label = "OS: resident pages of the pool";
  for (PlotSeries* s : {&allocated, &resident}) {
    s->line = false;
    s->markers = true;
  }
  for (const KvMemoryPoint& p : points) {
    allocated.x.push_back(p.tokens);
    allocated.y.push_back(p.allocated_bytes / (1024.0 * 1024.0));
    if (p.resident_bytes >= 0) {
      resident.x.push_back(p.tokens);
      resident.y.push_back(static_cast<double>(p.resident_bytes) / (1024.0 * 1024.0));
    }
  }
  spec.series.push_back(allocated);
  if (!resident.x.empty()) spec.series.push_back(resident);
  spec.footnote =
      command + " (" + o.k_format.name() + ", block " + std::to_string(o.block_size) + ")";
  write_png_plot(spec, path);
}

// The tokens each context runs on (the --text file, repeated as needed, or fixed pseudo-random
// ids without a tokenizer) and a line saying where they came from.
struct ProbeText {
  std::vector<int> tokens;
  std::string source;
};

ProbeText read_probe_text(const Args& args, const LoadedModel& loaded, int longest) {
  const Model& model = *loaded.model;
  const ModelConfig& c = model.config();
  if (args.has("--text") && !loaded.tokenizer)
    throw Error("--text", "expected a model with a tokenizer, got " + model.source());
  const std::string path = args.get("--text", default_eval_text_path());
  int repeats = 0;
  ProbeText text;
  text.tokens = probe_tokens(
      loaded.tokenizer.get(),
      loaded.tokenizer ? read_text_file(path, "cannot open the text file (--text)") : "", longest,
      c.vocab_size, path, &repeats);
  text.source = !loaded.tokenizer
                    ? "fixed pseudo-random token ids (the model has no tokenizer)"
                    : path + (repeats > 1 ? " (repeated " + std::to_string(repeats) +
                                                "x to reach " + std::to_string(longest) + " tokens)"
                                          : "");
  return text;
}

// measure_kv_memory over the sorted contexts, a progress line per context on stderr.
std::vector<KvMemoryPoint> measure_with_progress(Transformer& t, const std::vector<int>& tokens,
                                                 const std::vector<int>& sorted,
                                                 const KvMemoryProbeOptions& o) {
  // One run per context. The ETA weighs each by C x (C + 256): the attention over the
  // context, not the weights' matmuls, dominates a long prefill on the CPU (SmolLM2 took 20.5,
  // 80.2 and 359.4 s at 2K, 4K and 8K: docs/concepts/kv-memory.md).
  std::vector<double> weights;
  std::vector<long> starts;  // the engine's count (tokens over all contexts) where each begins
  long start = 0;
  for (int ctx : sorted) {
    weights.push_back(ctx * (ctx + 256.0));
    starts.push_back(start);
    start += ctx;
  }
  Progress progress("info --measure", static_cast<int>(sorted.size()), "tokens", weights);
  std::size_t at = 0;
  progress.step("context " + with_commas(sorted[0]));
  return measure_kv_memory(t, tokens, sorted, o, [&](long done, long) {
    while (at + 1 < sorted.size() && done > starts[at] + sorted[at]) {
      ++at;
      progress.step("context " + with_commas(sorted[at]));
    }
    progress.update(done - starts[at], sorted[at]);
  });
}

void print_points_json(const std::vector<KvMemoryPoint>& points, double mha_per_token) {
  nlohmann::json j = nlohmann::json::array();
  for (const KvMemoryPoint& p : points) {
    j.push_back({{"tokens", p.tokens},
                 {"formula_bytes", p.formula_bytes},
                 {"exact_bytes", p.exact_bytes},
                 {"blocks", p.blocks},
                 {"allocated_bytes", p.allocated_bytes},
                 {"pool_bytes", p.pool_bytes},
                 {"resident_bytes", p.resident_bytes},
                 {"mha_formula_bytes", mha_per_token * p.tokens},
                 {"seconds", p.seconds}});
  }
  std::printf("%s\n", j.dump(2).c_str());
}

// What the table's header and footer say about the run.
struct MeasureRun {
  const Model* model = nullptr;
  KvMemoryProbeOptions options;
  int threads = 0;
  std::string source;  // where the tokens came from
  int longest = 0;
  double formula_per_token = 0.0;
  double mha_per_token = 0.0;
  std::string out_dir;
  std::string csv, png;  // written only with --out
};

void print_points_table(const MeasureRun& run, const std::vector<KvMemoryPoint>& points) {
  const Model& model = *run.model;
  const ModelConfig& c = model.config();
  const KvMemoryProbeOptions& o = run.options;
  std::printf(
      "\nmeasured: one sequence per context through %s%s (%d threads)\n", model.source().c_str(),
      model.is_random_weights() ? "; its bytes do not depend on the weights" : "", run.threads);
  std::printf("  K/V %s, block %d; text: %s\n", o.k_format.name().c_str(), o.block_size,
              run.source.c_str());
  if (run.longest > c.seq_len) {
    std::printf("  note: contexts past %d tokens are beyond the model's trained context\n",
                c.seq_len);
  }
  std::printf(
      "| context | formula | allocator (blocks) | allocator - formula | OS resident | resident - "
      "allocator | same shape as MHA (formula) | run "
      "|\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const KvMemoryPoint& p : points) {
    const std::string resident =
        p.resident_bytes >= 0 ? mib(static_cast<double>(p.resident_bytes)) : std::string("unknown");
    const std::string resident_delta =
        p.resident_bytes >= 0
            ? signed_bytes(static_cast<double>(p.resident_bytes) - p.allocated_bytes) + " B"
            : std::string("-");
    std::printf(
        "| %s | %s | %s (%d) | %s | %s | %s | %s | %.1f s |\n", with_commas(p.tokens).c_str(),
        mib(p.formula_bytes).c_str(), mib(p.allocated_bytes).c_str(), p.blocks,
        (signed_bytes(p.allocated_bytes - p.formula_bytes) + " B").c_str(), resident.c_str(),
        resident_delta.c_str(), mib(run.mha_per_token * p.tokens).c_str(), p.seconds);
  }
  std::printf(
      "formula: 2 x %d layers x %d KV heads x %d head_dim x %g bytes = %s bytes/token; the "
      "allocator adds the format's scales and the last block's empty slots; the OS backs whole "
      "pages of the pool (a pool of 2 MiB or more is mapped in whole 2 MiB pages)\n",
      c.n_layers, c.n_kv_heads, c.head_dim(), payload_bytes_per_element(o.k_format.dtype),
      with_commas(static_cast<std::int64_t>(run.formula_per_token)).c_str());
  if (run.out_dir.empty())
    std::printf("(--out DIR writes these points as DIR/memory_measured.csv and a plot)\n");
  else
    std::printf("wrote %s, %s\n", run.csv.c_str(), run.png.c_str());
}

}  // namespace

int run_info_measure(const Args& args, const LoadedModel& loaded) {
  const Model& model = *loaded.model;
  const ModelConfig& c = model.config();
  // Contexts past the trained one run (RoPE has no limit) but say so: the model never saw them.
  const std::vector<int> contexts =
      parse_int_list(args.get("--measure"), "--measure", 1, 1 << 20, "context lengths in tokens");
  std::vector<int> sorted = contexts;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  KvMemoryProbeOptions o;
  o.block_size = args.get_int("--block-size", 16);
  if (o.block_size < 1 || o.block_size > 256)
    fail_expected("--block-size", "an integer in [1, 256]", std::to_string(o.block_size));
  o.k_format = o.v_format = parse_kv_format(args.get("--kv-dtype", "fp16"), "--kv-dtype");
  o.k_format.validate(o.block_size, c.n_kv_heads, c.head_dim(), "--kv-dtype");
  int threads = args.get_int("--threads", 0);
  if (threads < 0) fail_expected("--threads", "a non-negative integer", std::to_string(threads));
  if (threads == 0) threads = omp_get_num_procs();
  // Files only where asked: without --out the table (or --json) is the whole output.
  const std::string out_dir = args.get("--out", "");
  if (args.has("--out") && out_dir.empty()) throw Error("--out", "expected a directory, got ''");
  const bool json = args.has("--json");

  const int longest = sorted.back();
  const ProbeText text = read_probe_text(args, loaded, longest);
  if (!out_dir.empty()) checked_out_dir(out_dir);  // a bad --out fails before the long run

  auto backend = make_cpu_backend(threads);
  Transformer t(loaded.model, *backend);
  const std::vector<KvMemoryPoint> points = measure_with_progress(t, text.tokens, sorted, o);
  const double formula_per_token = points.front().formula_bytes / points.front().tokens;
  ModelConfig mha = c;
  mha.n_kv_heads = c.n_heads;
  const double mha_per_token = kv_bytes_per_token(mha, payload_bytes_per_element(o.k_format.dtype));
  const std::string name = std::filesystem::path(model.source()).stem().string();
  const bool random = model.is_random_weights();
  const std::string csv = out_dir + "/memory_measured.csv";
  const std::string png = out_dir + "/memory_vs_context.png";
  if (!out_dir.empty()) {
    write_csv(csv, c, name, random, o, mha_per_token, points);
    write_png(png, c, name, random, o, formula_per_token, mha_per_token, points,
              "kvscope info --measure " + args.get("--measure"));
    // With --json, stdout is the JSON alone.
    if (json) std::fprintf(stderr, "kvscope info: wrote %s, %s\n", csv.c_str(), png.c_str());
  }

  if (json) {
    print_points_json(points, mha_per_token);
    return 0;
  }
  print_points_table({.model = &model,
                      .options = o,
                      .threads = threads,
                      .source = text.source,
                      .longest = longest,
                      .formula_per_token = formula_per_token,
                      .mha_per_token = mha_per_token,
                      .out_dir = out_dir,
                      .csv = csv,
                      .png = png},
                     points);
  return 0;
}

}  // namespace kvscope::cli
