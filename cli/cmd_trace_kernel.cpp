// kvscope trace kernel: one engine step's paged-attention launch, run on the SIMT emulator with
// its memory loads recorded (issue #45): the grid, each thread block's sequence, KV head and
// split, the KV blocks it read through its block table, and the memory transactions its warps
// issued against the fewest their bytes allow. Writes kernel_trace.json and kernel_grid.png.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "engine/analysis/memory_math.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/report/png_plot.h"
#include "engine/report/raster.h"
#include "engine/scenario/scenario.h"
#include "kernels/backend/attention_timing.h"
#include "kernels/backend/backend_select.h"
#include "kernels/backend/device_ops.h"
#include "kernels/backend/kernel_trace_run.h"

namespace kvscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: kvscope trace kernel SCENARIO --step N [options]

Runs SCENARIO on the CUDA backend's kernels under the SIMT emulator (--backend cuda-sim) and
records step N's paged-attention launch for one layer: the grid of thread blocks, which
sequence, KV head and split each works on, the KV blocks it reads through its block table, and
each warp load's memory transactions (32-byte sectors) against the fewest its bytes allow.

  --step N          the step to trace, numbered as kvscope-ui and the recording number them
                    (default 0, the first; the steps before it run untraced)
  --layer L         whose attention launch (default 0)
  --variant V       the scenario's variant (default base)
  --model PATH      the model instead of the scenario's (weights are dequantized to f32: the
                    emulated device runs f32 weights)
  --kv-format F     K and V format instead of the scenario's (fp32, fp16, bf16, int8, fp8-e4m3,
                    fp8-e5m2, int4, int2, ...): the decode kernel reads the byte formats, the
                    paged kernel the packed ones
  --block-size B    tokens per KV block instead of the scenario's (the pool keeps its tokens)
  --out DIR         write DIR/kernel_trace.json and DIR/kernel_grid.png
  --json            print kernel_trace.json to stdout instead of the summary
  --warp-sample N   warp loads of thread block 0 listed in the JSON (default 32)

Measuring on a GPU instead (the figure the Kernel panel states beside the emulator's bytes):
  --measure         run SCENARIO on the GPU (--backend cuda) and time step N's launch for the
                    layer: issued again --repeats times back to back per round, --rounds rounds;
                    prints the median round's time per launch, the K/V bytes it reads and their
                    rate beside a device-to-device copy's; --out DIR writes DIR/kernel_timing.json
  --all-steps       time every step from N to the end of the run
  --timings FILE    also add the launches to FILE (created, or extended: a launch of the same
                    shape replaces the one there); assets/gpu/kernel-timings.json is the Kernel
                    panel's
  --repeats N       launches per round (default 20)
  --rounds N        rounds (default 7)
  --backend B       cuda (default) or cuda-sim (the emulator: its times are not a GPU's, and the
                    file says so; for tests)
  --commit C        the commit measured, recorded in the file (default "unknown")

The KV write launches of the layer (each new token's K and V rows stored into its slot) are
traced too: the block each writes and its stores' transactions.

Not traced: MLA's latent kernels, contexts past 4,096 slots (one launch per query).
See docs/concepts/paged-attention-kernel.md.
)";

std::string percent(long part, long whole) {
  if (whole <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100.0 * static_cast<double>(part) / whole);
  return b;
}

// What a thread block's position in the grid means, per kernel.
std::string grid_meaning(const std::string& kernel) {
  if (kernel == "decode_split_batch_kernel") return "KV heads x splits, queries";
  if (kernel == "paged_attention_batch_kernel") return "query heads, queries";
  if (kernel == "decode_split_kernel") return "KV heads x splits";
  if (kernel == "paged_attention_split_kernel") return "query heads, splits";
  return "query heads";
}

// Green where every byte a block's loads move is a byte they asked for, through yellow to red at
// an eighth of them or fewer.
Rgb efficiency_colour(const sim::Traffic& traffic) {
  const double e = traffic.used_share();
  const double t = std::clamp((e - 0.125) / 0.875, 0.0, 1.0);
  const auto mix = [](double a, double b, double f) {
    return static_cast<std::uint8_t>(a + (b - a) * f);
  };
  if (t > 0.5)
    return {mix(230, 46, (t - 0.5) * 2), mix(190, 160, (t - 0.5) * 2), mix(60, 90, (t - 0.5) * 2)};
  return {mix(200, 230, t * 2), mix(60, 190, t * 2), mix(50, 60, t * 2)};
}

void write_grid_png(const StepKernelTrace& t, const std::string& label, const std::string& path) {
  const sim::KernelTrace& k = t.summary;
  const int cols = static_cast<int>(k.grid.x), rows = static_cast<int>(k.grid.y);
  const int width = 1280, left = 200, top = 110, right = 40;
  const int cell_w = std::max(6, std::min(160, (width - left - right) / std::max(1, cols)));
  const int cell_h = std::max(6, std::min(48, 560 / std::max(1, rows)));
  const int height = std::max(360, top + rows * cell_h + 120);
  Canvas c(width, height, Rgb{255, 255, 255});
  const Rgb ink{34, 38, 46}, muted{110, 116, 128};
  c.text(20, 16,
         k.kernel + ": grid " + std::to_string(k.grid.x) + " x " + std::to_string(k.grid.y) + " (" +
             grid_meaning(k.kernel) + "), " + std::to_string(k.block.x) + " threads per block",
         ink, 2);
  c.text(20, 42, label, muted, 2);
  c.text(20, 66,
         "KV read " + human_bytes(static_cast<double>(k.kv.distinct_bytes)) + " in " +
             with_commas(k.kv.sectors) + " transactions of 32 B (" +
             percent(k.kv.distinct_bytes, k.kv.bytes_moved()) +
             " of the bytes moved used); ideal " + with_commas(k.kv.ideal_sectors),
         ink, 2);
  for (const sim::ThreadBlockTrace& tb : k.blocks) {
    const int x = left + static_cast<int>(tb.block % k.grid.x) * cell_w;
    const int y = top + static_cast<int>((tb.block / k.grid.x) % k.grid.y) * cell_h;
    const bool empty = tb.kv.loads == 0;
    c.fill_rect(x + 1, y + 1, x + cell_w - 1, y + cell_h - 1,
                empty ? Rgb{236, 238, 242} : efficiency_colour(tb.kv));
    if (tb.role) {
      const sim::TraceRole& role = *tb.role;
      std::string head = "g";
      head.append(std::to_string(role.kv_head));
      if (k.kernel.find("split") != std::string::npos)
        head.append(" s").append(std::to_string(role.split));
      else
        head.append(" h").append(std::to_string(role.head_first));
      std::string slots = std::to_string(role.slot_begin);  // first and last slot
      slots.append("-").append(std::to_string(std::max(role.slot_begin, role.slot_end - 1)));
      slots.append(", ");
      slots.append(std::to_string(tb.kv_blocks.size())).append(" blk");
      // Two lines at the larger size where they fit, else the first line small, else nothing.
      const int big = 2, th = Canvas::text_height(big);
      if (cell_h >= 2 * th + 14 && Canvas::text_width(slots, big) + 10 <= cell_w) {
        const int y0 = y + (cell_h - 2 * th - 6) / 2;
        c.text(x + 6, y0, head, ink, big);
        c.text(x + 6, y0 + th + 6, slots, ink, big);
      } else if (cell_h >= Canvas::text_height(1) + 4 &&
                 Canvas::text_width(head, 1) + 6 <= cell_w) {
        c.text(x + 3, y + (cell_h - Canvas::text_height(1)) / 2, head, ink, 1);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    const int req = r < static_cast<int>(t.query_request.size())
                        ? t.query_request[static_cast<std::size_t>(r)]
                        : -1;
    std::string name = "query ";
    name.append(std::to_string(r));
    if (req >= 0) name.append(" (req ").append(std::to_string(req)).append(")");
    const int scale = cell_h >= Canvas::text_height(2) + 4 ? 2 : 1;
    if (cell_h >= Canvas::text_height(1) + 2)
      c.text(14, top + r * cell_h + (cell_h - Canvas::text_height(scale)) / 2, name, muted, scale);
  }
  const int ly = top + rows * cell_h + 24;
  c.text(left, ly,
         "colour: bytes asked for / bytes moved (green 100%, red 12.5% or less); grey: no slots",
         muted, 2);
  c.text(left, ly + 28,
         "kvscope trace kernel (SIMT emulator: sectors counted, caches not modelled)", muted, 2);
  write_canvas_png(c, path);
}

void print_summary(const StepKernelTrace& t, const std::string& label) {
  const sim::KernelTrace& k = t.summary;
  std::printf("kvscope trace kernel: %s\n", label.c_str());
  std::printf("  launch: %s, grid %u x %u (%s), %u threads per block\n", k.kernel.c_str(), k.grid.x,
              k.grid.y, grid_meaning(k.kernel).c_str(), k.block.x);
  std::printf("  KV: K %s, V %s, block size %d, %d query heads over %d KV heads of %d\n",
              t.k_format.c_str(), t.v_format.c_str(), t.block_size, t.n_heads, t.kv_heads,
              t.head_dim);
  std::string queries;
  for (std::size_t i = 0; i < t.query_request.size(); ++i) {
    if (!queries.empty()) queries += ", ";
    queries += t.query_request[i] >= 0 ? std::to_string(t.query_request[i]) : "?";
  }
  std::printf("  queries: %zu (requests %s)\n", t.query_request.size(), queries.c_str());
  std::printf(
      "  KV read: %s (%s distinct) in %s warp loads: %s transactions of 32 B moving %s, %s of it "
      "used; ideal %s transactions\n",
      human_bytes(static_cast<double>(k.kv.distinct_bytes)).c_str(),
      human_bytes(static_cast<double>(k.kv_unique_bytes)).c_str(), with_commas(k.kv.loads).c_str(),
      with_commas(k.kv.sectors).c_str(),
      human_bytes(static_cast<double>(k.kv.bytes_moved())).c_str(),
      percent(k.kv.distinct_bytes, k.kv.bytes_moved()).c_str(),
      with_commas(k.kv.ideal_sectors).c_str());
  for (unsigned w = 0; w < sim::kTraceWhatCount; ++w) {
    const sim::Traffic& x = k.by_what[w];
    if (x.loads == 0) continue;
    std::printf("    %-12s %10s  %8s loads  %9s transactions, ideal %9s\n", sim::trace_what_name(w),
                human_bytes(static_cast<double>(x.distinct_bytes)).c_str(),
                with_commas(x.loads).c_str(), with_commas(x.sectors).c_str(),
                with_commas(x.ideal_sectors).c_str());
  }
  for (std::size_t i = 0; i < t.reduce.size(); ++i)
    std::printf("  then %s, grid %u x %u: the splits combined\n", t.reduce_kernels[i].c_str(),
                t.reduce[i].x, t.reduce[i].y);
  if (!t.writes.empty()) {
    const auto& w0 = t.writes.front();
    const sim::Traffic& s = t.write_total;
    std::printf(
        "  before it, KV write: %zu launches of %s (grid %u x %u, %u threads), one per new %s: "
        "%s written in %s transactions of 32 B (%s of the bytes moved used); ideal %s\n",
        t.writes.size(), w0.kernel.c_str(), w0.grid.x, w0.grid.y, w0.block.x,
        w0.kernel == "kv_write_groups_kernel" ? "token and row" : "token",
        human_bytes(static_cast<double>(s.distinct_bytes)).c_str(), with_commas(s.sectors).c_str(),
        percent(s.distinct_bytes, s.bytes_moved()).c_str(), with_commas(s.ideal_sectors).c_str());
    const std::size_t shown = std::min<std::size_t>(t.writes.size(), 8);
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& w = t.writes[i];
      std::printf(
          "    request %s, slot %d -> block %d row %d (%s): %s in %s transactions, ideal %s\n",
          w.request >= 0 ? std::to_string(w.request).c_str() : "?", w.slot, w.kv_block,
          t.block_size > 0 ? w.slot % t.block_size : 0, w.rows.c_str(),
          human_bytes(static_cast<double>(w.stores.distinct_bytes)).c_str(),
          with_commas(w.stores.sectors).c_str(), with_commas(w.stores.ideal_sectors).c_str());
    }
    if (t.writes.size() > shown) std::printf("    ... %zu more\n", t.writes.size() - shown);
  }
}

std::string contexts_text(const std::vector<int>& contexts) {
  std::string s;
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    if (i == 6 && contexts.size() > 8) {
      s.append(", ... (").append(std::to_string(contexts.size())).append(" queries)");
      break;
    }
    if (i > 0) s.append(", ");
    s.append(std::to_string(contexts[i]));
  }
  return s;
}

std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// --measure: steps from `step` (all of them with --all-steps) timed on the device.
int measure(const Args& args, Simulator& sim, int step, int layer, const std::string& path,
            const std::string& backend_name, const std::string& out_dir) {
  const int repeats = args.get_int("--repeats", 20), rounds = args.get_int("--rounds", 7);
  if (repeats < 1 || repeats > 10000)
    fail_expected("--repeats", "1..10000 launches a round", std::to_string(repeats));
  if (rounds < 1 || rounds > 1000) fail_expected("--rounds", "1..1000", std::to_string(rounds));
  if (layer < 0 || layer >= sim.cache().layout().n_layers)
    fail_expected("--layer", "a layer in 0.." + std::to_string(sim.cache().layout().n_layers - 1),
                  std::to_string(layer));
  const bool emulated = backend_name != "cuda";
  const std::string device_name = emulated ? "SIMT emulator" : device::cuda_device_name();
  KernelTimings file;
  const std::string timings_path = args.get("--timings", "");
  if (!timings_path.empty() && std::filesystem::exists(timings_path)) {
    file = load_kernel_timings(timings_path);
    if (file.device != device_name || file.emulated != emulated)
      fail_expected("--timings", "a file measured on this device (" + device_name + ")",
                    timings_path + ", measured on " + file.device);
  }
  KernelTimings run;
  run.device = device_name;
  run.emulated = emulated;
  run.date = utc_date();
  run.commit = args.get("--commit", "unknown");
  run.scenario = std::filesystem::path(path).filename().string();
  const bool all = args.has("--all-steps");
  long copy_bytes = emulated ? 1L << 20 : 256L << 20;
  int untimed = 0;
  {
    Progress p("trace kernel --measure", 1, "steps");
    for (;;) {
      AttentionTiming t;
      t.layer = layer;
      t.repeats = repeats;
      t.rounds = rounds;
      t.copy_bytes = copy_bytes;
      bool stepped = false;
      {
        ScopedAttentionTiming on(t);
        stepped = sim.step();
      }
      if (!stepped) break;
      const int done = sim.current_step() - 1;
      if (t.copy_gb_per_s > 0.0) {
        run.copy_gb_per_s = t.copy_gb_per_s;
        copy_bytes = 0;  // once a run
      }
      p.update(done - step + 1, all ? 0 : 1);
      if (!t.timed) {
        ++untimed;
        p.message("step " + std::to_string(done) + ": " +
                  (t.per_query ? "one launch per query (contexts past 4,096 slots): not timed"
                               : "no attention launch on the device: not timed"));
      } else {
        run.launches.push_back(measured_launch(t, done));
      }
      if (!all) break;
    }
  }
  if (run.launches.empty())
    throw Error(path, "no step from " + std::to_string(step) + " ran a timed attention launch");
  for (const MeasuredLaunch& m : run.launches) file.add(m);
  file.device = run.device;
  file.emulated = run.emulated;
  file.date = run.date;
  file.commit = run.commit;
  if (file.scenario.empty() || file.scenario == run.scenario)
    file.scenario = run.scenario;
  else if (file.scenario.find(run.scenario) == std::string::npos)
    file.scenario += ", " + run.scenario;
  if (run.copy_gb_per_s > 0.0) file.copy_gb_per_s = run.copy_gb_per_s;
  if (!out_dir.empty()) {
    const std::string json_path = out_dir + "/kernel_timing.json";
    write_file_atomically(json_path, [&](std::ostream& o) { write_kernel_timings(o, run); });
    std::fprintf(stderr, "wrote %s\n", json_path.c_str());
  }
  if (!timings_path.empty()) {
    write_file_atomically(timings_path, [&](std::ostream& o) { write_kernel_timings(o, file); });
    std::fprintf(stderr, "wrote %s (%zu launches)\n", timings_path.c_str(), file.launches.size());
  }
  std::printf("kvscope trace kernel --measure: %s on %s%s, layer %d, %d rounds of %d launches\n",
              path.c_str(), run.device.c_str(),
              emulated ? " (the emulator's times, not a GPU's)" : "", layer, rounds, repeats);
  if (run.copy_gb_per_s > 0.0)
    std::printf("  device-to-device copy: %.1f GB/s\n", run.copy_gb_per_s);
  const std::size_t shown = all ? std::min<std::size_t>(run.launches.size(), 12) : 1;
  for (std::size_t i = 0; i < run.launches.size(); ++i) {
    const MeasuredLaunch& m = run.launches[i];
    if (i == shown) {
      std::printf("  ... %zu more steps (the file has every one)\n", run.launches.size() - shown);
      break;
    }
    std::string share;
    if (run.copy_gb_per_s > 0.0) {
      char b[64];
      std::snprintf(b, sizeof b, ", %.2f%% of the copy",
                    100.0 * m.kv_gb_per_s() / run.copy_gb_per_s);
      share = b;
    }
    std::printf(
        "  step %d: %s, block %d, contexts %s: %s of K/V in %s (fastest %s): %.2f GB/s%s\n", m.step,
        m.shape.k_format.c_str(), m.shape.block_size, contexts_text(m.shape.contexts).c_str(),
        human_bytes(static_cast<double>(m.kv_bytes)).c_str(), format_time(m.ms / 1e3).c_str(),
        format_time(m.ms_min / 1e3).c_str(), m.kv_gb_per_s(), share.c_str());
  }
  if (untimed > 0) std::printf("  %d steps not timed (see above)\n", untimed);
  return 0;
}

}  // namespace

int cmd_trace_kernel(const Argv& argv) {
  const Args args(
      argv,
      {"--step", "--layer", "--variant", "--model", "--kv-format", "--block-size", "--out",
       "--warp-sample", "--timings", "--repeats", "--rounds", "--backend", "--commit"},
      {"--json", "--help", "--measure", "--all-steps"});
  if (args.has("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  // positional()[0] is "kernel"
  if (args.positional().size() != 2)
    fail_expected("trace kernel", "one scenario file (see --help)",
                  std::to_string(args.positional().size() - 1) + " arguments");
  const std::string path = args.positional()[1];
  const int step = args.get_int("--step", 0);
  if (step < 0) fail_expected("--step", "a step >= 0 (0: the first)", std::to_string(step));
  const int layer = args.get_int("--layer", 0);
  const int warp_sample = args.get_int("--warp-sample", 32);
  if (warp_sample < 0) fail_expected("--warp-sample", "a count >= 0", std::to_string(warp_sample));
  const std::string out_dir = args.get("--out", "");
  if (!out_dir.empty()) checked_out_dir(out_dir);

  const Scenario scenario = parse_scenario(path);
  const std::string variant = args.get("--variant", "base");
  scenario.variant(variant);
  const ScenarioModelLoad loaded =
      load_scenario_model(scenario, args.get("--model", ""), false, WeightFormat::kF32);
  if (loaded.weights == nullptr)
    throw Error(path, "trace kernel needs model weights (the scenario runs bookkeeping only)");
  ResolvedRun resolved = resolve_scenario(scenario, variant, loaded.shape, loaded.tokenizer.get());
  attach_mla(resolved, loaded.weights, path);
  SimConfig config = resolved.config;
  if (args.has("--kv-format")) {
    config.k_format = config.v_format = parse_kv_format(args.get("--kv-format"), "--kv-format");
  }
  if (args.has("--block-size")) {
    const int b = args.get_int("--block-size", 16);
    if (b < 1 || b > 4096) fail_expected("--block-size", "1..4096 tokens", std::to_string(b));
    const long tokens = static_cast<long>(config.num_blocks) * config.block_size;
    config.num_blocks = static_cast<int>((tokens + b - 1) / b);
    config.block_size = b;
  }
  config.tokenizer = loaded.tokenizer;
  const bool measuring = args.has("--measure");
  for (const char* flag :
       {"--all-steps", "--timings", "--repeats", "--rounds", "--backend", "--commit"}) {
    if (args.has(flag) && !measuring)
      fail_expected(flag, "--measure with it (it sets how the launch is timed)", "no --measure");
  }
  if (measuring && args.has("--json"))
    fail_expected("--json", "no --json with --measure (--out DIR writes kernel_timing.json)",
                  "--json");
  const std::string backend_name = measuring ? args.get("--backend", "cuda") : "cuda-sim";
  if (backend_name != "cuda" && backend_name != "cuda-sim")
    fail_expected("--backend", "cuda or cuda-sim", backend_name);
  std::unique_ptr<Backend> backend =
      make_backend(backend_name, 1, "f32", RunNeeds{loaded.weights.get()});
  config.make_backend = [&backend] { return std::move(backend); };
  std::unique_ptr<Simulator> sim;
  try {
    sim = std::make_unique<Simulator>(config, SimModel{loaded.shape, loaded.weights},
                                      std::move(resolved.requests));
  } catch (const Error& e) {
    throw Error(path + ": " + e.where(), e.detail());
  }
  {
    Progress p("trace kernel", 1, "steps");
    while (sim->current_step() < step) {
      if (!sim->step())
        fail_expected(
            "--step",
            "a step the run reaches (its last is " + std::to_string(sim->current_step() - 1) + ")",
            std::to_string(step));
      p.update(sim->current_step(), step + 1);
    }
  }
  if (measuring) return measure(args, *sim, step, layer, path, backend_name, out_dir);
  const StepKernelTrace t = trace_next_step(*sim, layer, path);
  const std::string where = variant == "base" ? path : path + " [" + variant + "]";
  const std::string model_name = std::filesystem::path(loaded.source).filename().string();
  const std::string label = where + ", step " + std::to_string(t.step) + ", layer " +
                            std::to_string(t.layer) + " of " + std::to_string(t.layers) + " (" +
                            model_name + (loaded.random_weights ? ", random weights" : "") +
                            ", cuda-sim)";
  nlohmann::json j = kernel_trace_json(t, static_cast<std::size_t>(warp_sample));
  j["scenario"] = path;
  j["variant"] = variant;
  j["model"] = loaded.source;
  j["random_weights"] = loaded.random_weights;
  if (!out_dir.empty()) {
    const std::string json_path = out_dir + "/kernel_trace.json",
                      png = out_dir + "/kernel_grid.png";
    write_file_atomically(json_path, [&](std::ostream& o) { o << j.dump(1) << "\n"; });
    write_grid_png(t, label, png);
    std::fprintf(stderr, "wrote %s and %s\n", json_path.c_str(), png.c_str());
  }
  if (args.has("--json")) {
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    print_summary(t, label);
  }
  return 0;
}

}  // namespace kvscope::cli
