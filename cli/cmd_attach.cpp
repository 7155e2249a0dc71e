// kvscope attach: subscribes to a running vLLM / SGLang engine's KV-cache event stream (ZeroMQ),
// shows a status line while attached and, when it ends (--duration, --batches or Ctrl-C), writes
// recording.kvr, trace.json, report.md and summary.json into DIR. See docs/attach.md.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/model/prompt_file.h"
#include "engine/trace/kv_event_client.h"
#include "present/attach_report.h"

namespace kvscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: kvscope attach ENDPOINT [options]

attaches to the KV-cache event stream of a running vLLM or SGLang engine (started with
--kv-events-config, see docs/attach.md) and follows its prefix cache: the blocks each
data-parallel rank stores and removes, per medium, with gaps filled by replay and restarts seen.
  ENDPOINT            rank 0's event publisher, e.g. tcp://127.0.0.1:5557 (or ipc://PATH)
  --replay ENDPOINT   rank 0's replay socket, e.g. tcp://127.0.0.1:5567: fetches what the engine
                      buffered before attach and fills sequence gaps (without it they are lost)
  --topic T           only batches published on topic T (default: every topic)
  --dp N              data-parallel ranks, at port+0 .. port+N-1 (default 1)
  --bind              listen at ENDPOINT (+ rank) and let the engines connect: for engines whose
                      endpoint names kvscope's host (tcp://kvscope-host:5557, no `*`), which
                      connect instead of binding; ENDPOINT may then be tcp://*:PORT
  --duration S        stop after S seconds (default: at --batches N, or Ctrl-C)
  --batches N         stop after N batches (sequence numbers, all ranks together)
  --out DIR           where recording.kvr, trace.json, report.md, summary.json and stream.kvj
                      (the batches as received, for `kvscope lookup`) go (default kvscope-attach)
  --clear-scope S     what AllBlocksCleared drops: gpu (vLLM: its GPU pool only, offload tiers
                      keep theirs), all (SGLang: every tier) or auto (default: gpu once the
                      stream shows vLLM's fields or media, else all)
  --lookup FILE       when attach ends, say how much of this prompt's prefix each rank and medium
                      holds and why the match stops ("why did my prefix miss?"). FILE: token ids
                      (a JSON array, or the engine's /tokenize answer) or text, with
  --tokenizer PATH    the engine's tokenizer for a text prompt: tokenizer.json or a GGUF file
  --model NAME|PATH   or a model whose tokenizer to use
  --bos               put the tokenizer's BOS first even when its convention does not
  --lora NAME         the LoRA adapter the prompt runs with (default: none)
  --json              print the summary as JSON on stdout
a status line is drawn on stderr (a line every 5 s when it is not a terminal); Ctrl-C stops
cleanly and still writes DIR. exit status: 0 done, 1 no batch arrived, 2 bad flags or endpoints.
)";

volatile sig_atomic_t g_stop = 0;
void on_stop_signal(int) {
  g_stop = 1;
}

// SIGINT / SIGTERM set g_stop while attached (no SA_RESTART: the poll returns at once); the
// previous handlers come back when this goes out of scope, so a second Ctrl-C while the outputs
// are written ends the process as usual.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

void check_endpoint(const std::string& endpoint, int dp, const std::string& flag, bool bind) {
  if (endpoint.rfind("inproc://", 0) == 0) {
    fail_expected(flag,
                  "tcp://HOST:PORT or ipc://PATH (inproc:// only reaches sockets inside one "
                  "process)",
                  "'" + endpoint + "'");
  }
  check_kv_endpoint(endpoint, dp, flag, bind);
}

std::string cell(const nlohmann::json& v) {
  return v.is_number_integer() ? with_commas(v.get<std::int64_t>()) : v.dump();
}

// The summary's lost_by_cause in words (kv_lost_causes).
std::string lost_causes(const nlohmann::json& s) {
  const auto& c = s["lost_by_cause"];
  return kv_lost_causes(c["before_attach"].get<std::int64_t>(),
                        c["replay_expired"].get<std::int64_t>(),
                        c["mid_stream"].get<std::int64_t>());
}

// The title, the command, and what arrived and what was lost.
void report_overview(std::ostream& out, const nlohmann::json& s, const std::string& command,
                     double seconds) {
  const auto& ev = s["events"];
  out << "# kvscope attach: " << s["endpoint"].get<std::string>() << "\n\n";
  out << "`" << command << "`\n\n";
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", seconds);
  out << "Attached for " << secs << " s to " << s["dp"].get<int>() << " data-parallel rank"
      << (s["dp"].get<int>() == 1 ? "" : "s") << " ("
      << (s["topic"].get<std::string>().empty()
              ? std::string("every topic")
              : std::string("topic \"").append(s["topic"].get<std::string>()).append("\""))
      << (s["replay_endpoint"].get<std::string>().empty()
              ? std::string(", no replay socket")
              : std::string(", replay from ").append(s["replay_endpoint"].get<std::string>()))
      << "). " << cell(s["batches"]) << " batches arrived (" << cell(s["replayed"])
      << " of them by replay); " << cell(s["gaps"]) << " sequence gaps, " << cell(s["lost"])
      << " batches lost, " << cell(s["restarts"]) << " restarts, " << cell(s["decode_errors"])
      << " payloads that did not decode.\n\n";
  if (s["lost"].get<std::int64_t>() > 0)
    out << "Lost batches by cause: " << lost_causes(s) << ".\n\n";
  if (!s["state_exact"].get<bool>()) {
    out << "**The state below may differ from the engine's** from the first lost or "
           "undecodable batch on: a store it carried is missing here, a removal it carried "
           "left a block here (`unknown_removals` and `unknown_parents` hint at how much). "
           "Every batch that did arrive was applied in sequence order.\n\n";
  }
  out << "The engines stored " << cell(s["blocks_stored"]) << " blocks in "
      << cell(ev["BlockStored"]) << " BlockStored events, removed " << cell(s["blocks_removed"])
      << " (" << cell(ev["BlockRemoved"]) << " BlockRemoved events) and cleared "
      << cell(s["blocks_cleared"]) << " (AllBlocksCleared " << cell(ev["AllBlocksCleared"])
      << " times, or a restart). " << cell(s["live_blocks"]) << " blocks are cached now (peak "
      << cell(s["peak_live_blocks"]) << ").\n\n";
}

// One table row per rank.
void report_ranks(std::ostream& out, const nlohmann::json& s) {
  out << "## Per rank\n\n";
  out << "| rank | endpoint | batches | stored | removed | live now | peak live | gaps | "
         "replayed | lost | decode errors | restarts | live by medium |\n";
  out << "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : s["ranks"]) {
    std::string media;
    for (const auto& [name, n] : r["live_blocks_by_medium"].items())
      media.append(media.empty() ? "" : ", ").append(name).append(" ").append(cell(n));
    out << "| " << r["rank"].get<int>() << " | " << r["endpoint"].get<std::string>() << " | "
        << cell(r["batches"]) << " | " << cell(r["blocks_stored"]) << " | "
        << cell(r["blocks_removed"]) << " | " << cell(r["live_blocks"]) << " | "
        << cell(r["peak_live_blocks"]) << " | " << cell(r["gaps"]) << " | " << cell(r["replayed"])
        << " | " << cell(r["lost"]) << " | " << cell(r["decode_errors"]) << " | "
        << cell(r["restarts"]) << " | " << (media.empty() ? "-" : media) << " |\n";
  }
}

// KV cache groups (hybrid models), ownership (offload tiers) and placeholder stores, when any.
void report_groups(std::ostream& out, const nlohmann::json& s) {
  const auto& groups = s["live_blocks_by_group"];
  if (groups.size() > 1 ||
      (groups.size() == 1 && !groups.begin().value()["kind"].get<std::string>().empty())) {
    out << "\n## KV cache groups\n\n| group | kind | sliding window | block size | stored | "
           "live now |\n|---:|---|---:|---:|---:|---:|\n";
    for (const auto& [g, info] : groups.items()) {
      const std::string kind = info["kind"].get<std::string>();
      out << "| " << g << " | " << (kind.empty() ? "-" : kind) << " | "
          << (info["sliding_window"].is_null() ? "-" : cell(info["sliding_window"])) << " | "
          << cell(info["block_size"]) << " | " << cell(info["stored"]) << " | "
          << cell(info["live"]) << " |\n";
    }
  }
  if (!s["live_blocks_by_ownership"].empty()) {
    out << "\nLive blocks by ownership (the offloading tier that reported them):";
    for (const auto& [name, n] : s["live_blocks_by_ownership"].items())
      out << " " << name << " " << cell(n) << ";";
    out << "\n";
  }
  if (s["placeholder_blocks"].get<std::int64_t>() > 0) {
    out << "\n"
        << cell(s["placeholder_blocks"])
        << " stored blocks were placeholders (token_ids = [], block_size = 0: an offload tier "
           "reporting which hashes it holds); a lookup matches them by hash.\n";
  }
}

// The --lookup answer, per rank and medium.
void report_lookup(std::ostream& out, const nlohmann::json& s) {
  if (s.contains("lookup")) {
    const auto& lk = s["lookup"];
    out << "\n## Lookup: " << lk["file"].get<std::string>() << " (" << cell(lk["prompt_tokens"])
        << " tokens, LoRA " << lk["lora"].get<std::string>() << ")\n\n";
    for (const auto& row : lk["rows"]) {
      out << "- rank " << row["rank"].get<int>() << " " << row["medium"].get<std::string>();
      if (row["group"].get<std::int64_t>() != 0) out << " group " << cell(row["group"]);
      out << ": " << row["text"].get<std::string>() << "\n";
    }
    if (lk["rows"].empty()) out << "No blocks were stored while attached: nothing to match.\n";
  }
}

// Churn, what was skipped, and what the stream cannot tell.
void report_loose_ends(std::ostream& out, const nlohmann::json& s) {
  out << "\n## Churn and loose ends\n\n";
  out << "- " << cell(s["short_lived"]) << " blocks were removed within 1 s of being stored "
      << "(by the engine's timestamps).\n";
  out << "- " << cell(s["unknown_removals"]) << " removals named a block not cached here "
      << "(stored before attach and not replayed, or in a lost batch); "
      << cell(s["unknown_parents"]) << " stores named such a parent.\n";
  out << "- Skipped and counted: " << cell(s["skipped_events"]) << " events of unknown type, "
      << cell(s["skipped_fields"]) << " unknown fields, " << cell(s["bad_frames"])
      << " malformed messages, " << cell(s["other_topics"]) << " batches on other topics.\n";
  if (!s["last_decode_error"].get<std::string>().empty())
    out << "- Last decode error: " << s["last_decode_error"].get<std::string>() << "\n";
  const auto& cs = s["clear_scope"];
  out << "\n## What the stream cannot tell\n\n"
      << "The engines publish stores and removals, not lookups: prefix-cache hits, which "
         "request used which block and how much prefill a hit saved are not in the stream. "
         "Physical block ids are not published either: recording.kvr numbers blocks by its own "
         "recycled slots.\n\n"
      << "AllBlocksCleared does not say which tiers it empties: vLLM's comes from its GPU pool "
         "only (its CPU offload tier keeps its blocks, or empties silently when reset with "
         "reset_external=true), SGLang's empties every tier. Clear scope used: "
      << cs["setting"].get<std::string>()
      << (cs["setting"] == "auto"
              ? " (the stream looked like " + cs["engine"].get<std::string>() + ")"
              : std::string())
      << "; " << cell(cs["clears_gpu_only"]) << " clears dropped the GPU medium only, "
      << cell(cs["clears_all"]) << " dropped every medium.\n\n";
}

// The files beside report.md.
void report_files(std::ostream& out, const nlohmann::json& s) {
  out << "## Files\n\n"
      << "- recording.kvr: " << cell(s["recording"]["batches"]) << " steps (one per batch), "
      << cell(s["recording"]["events"]) << " events"
      << (s["recording"]["truncated"].get<bool>()
              ? " (the recording reached its cap and stopped growing; counters went on)"
              : "")
      << "; open it in kvscope-ui.\n"
      << "- trace.json: Chrome trace of the same steps (ui.perfetto.dev).\n"
      << "- summary.json: every counter above (what `kvscope attach --json` prints).\n"
      << "- stream.kvj: every batch as received, for `kvscope lookup "
      << "DIR --prompt FILE`"
      << (!s["journal"].is_null() && s["journal"]["truncated"].get<bool>()
              ? " (it reached its 1 GiB cap and stopped growing: a lookup from it sees the "
                "first part of the run only)"
              : "")
      << ".\n";
}

// report.md: what the engine's prefix cache did while attached, per rank and medium, and what
// the stream cannot say.
void write_report(const std::string& path, const nlohmann::json& s, const std::string& command,
                  double seconds) {
  write_file_atomically(path, [&](std::ostream& out) {
    report_overview(out, s, command, seconds);
    report_ranks(out, s);
    report_groups(out, s);
    report_lookup(out, s);
    report_loose_ends(out, s);
    report_files(out, s);
  });
}

void print_summary(const nlohmann::json& s) {
  std::printf(
      "kvscope attach %s: %s batches (%s replayed, %s lost), %s gaps, %s restarts, "
      "%s decode errors\n",
      s["endpoint"].get<std::string>().c_str(), cell(s["batches"]).c_str(),
      cell(s["replayed"]).c_str(), cell(s["lost"]).c_str(), cell(s["gaps"]).c_str(),
      cell(s["restarts"]).c_str(), cell(s["decode_errors"]).c_str());
  if (s["lost"].get<std::int64_t>() > 0)
    std::printf("  lost by cause: %s\n", lost_causes(s).c_str());
  const auto& ev = s["events"];
  std::printf("  events: BlockStored %s, BlockRemoved %s, AllBlocksCleared %s\n",
              cell(ev["BlockStored"]).c_str(), cell(ev["BlockRemoved"]).c_str(),
              cell(ev["AllBlocksCleared"]).c_str());
  std::printf("  blocks stored %s, removed %s, cleared %s; live now %s (peak %s)\n",
              cell(s["blocks_stored"]).c_str(), cell(s["blocks_removed"]).c_str(),
              cell(s["blocks_cleared"]).c_str(), cell(s["live_blocks"]).c_str(),
              cell(s["peak_live_blocks"]).c_str());
  if (s.contains("lookup")) {
    std::printf("  lookup %s (%s tokens):\n", s["lookup"]["file"].get<std::string>().c_str(),
                cell(s["lookup"]["prompt_tokens"]).c_str());
    for (const auto& row : s["lookup"]["rows"]) {
      std::printf(
          "    rank %d %s%s: %s\n", row["rank"].get<int>(),
          row["medium"].get<std::string>().c_str(),
          row["group"].get<std::int64_t>() != 0 ? (" group " + cell(row["group"])).c_str() : "",
          row["text"].get<std::string>().c_str());
    }
  }
  for (const auto& r : s["ranks"]) {
    std::string media;  // ": GPU 12 CPU 3"
    for (const auto& [name, n] : r["live_blocks_by_medium"].items())
      media.append(media.empty() ? ": " : " ").append(name).append(" ").append(cell(n));
    std::printf("  rank %d (%s): %s batches, live %s%s\n", r["rank"].get<int>(),
                r["endpoint"].get<std::string>().c_str(), cell(r["batches"]).c_str(),
                cell(r["live_blocks"]).c_str(), media.c_str());
  }
}

// What `kvscope attach` was asked for, each flag checked before any socket is opened.
struct AttachRun {
  KvAttachConfig cfg;
  double duration = 0.0;  // seconds; 0 = until --batches N or a signal
  long long batches = 0;  // 0 = no limit
  bool lookup = false;    // --lookup FILE given
  std::string lookup_file, lora;
  std::vector<std::int64_t> prompt;  // --lookup's tokens
  bool json = false;
  std::string out_dir;
};

// The endpoints, ranks, topic, bind mode, limits and clear scope.
KvAttachConfig parse_stream_flags(const Args& args, AttachRun& run) {
  KvAttachConfig cfg;
  cfg.endpoint = args.positional()[0];
  cfg.replay_endpoint = args.get("--replay", "");
  cfg.topic = args.get("--topic", "");
  cfg.dp_ranks = args.get_int("--dp", 1);
  cfg.bind = args.has("--bind");
  if (cfg.dp_ranks < 1 || cfg.dp_ranks > 256)
    fail_expected("--dp", "an integer in [1, 256]", std::to_string(cfg.dp_ranks));
  run.duration = args.get_double("--duration", 0.0);
  if (args.has("--duration") && run.duration <= 0)
    fail_expected("--duration", "a positive number of seconds", args.get("--duration"));
  run.batches = args.get_i64("--batches", 0);
  if (args.has("--batches") && run.batches < 1)
    fail_expected("--batches", "a positive integer", args.get("--batches"));
  check_endpoint(cfg.endpoint, cfg.dp_ranks, "ENDPOINT", cfg.bind);
  // The replay socket is always the engine's (a ROUTER it binds): kvscope connects to it.
  if (args.has("--replay")) {
    check_endpoint(cfg.replay_endpoint, cfg.dp_ranks, "--replay", /*bind=*/false);
    check_kv_ports_apart(cfg, "--replay");
  }
  cfg.clear_scope = parse_kv_clear_scope(args.get("--clear-scope", "auto"), "--clear-scope");
  return cfg;
}

AttachRun parse_attach(const Args& args) {
  AttachRun run;
  run.cfg = parse_stream_flags(args, run);
  // The prompt before attaching: a bad file fails now, not after an hour attached.
  run.lookup = args.has("--lookup");
  run.lookup_file = args.get("--lookup", "");
  run.lora = args.get("--lora", "base");
  if (run.lookup) {
    run.prompt = read_prompt_tokens({run.lookup_file, "", args.get("--tokenizer", ""),
                                     args.get("--model", ""), args.has("--bos")});
  } else {
    for (const char* flag : {"--tokenizer", "--model", "--lora", "--bos"})
      if (args.has(flag)) throw Error(flag, "only means something with --lookup FILE");
  }
  run.json = args.has("--json");
  run.out_dir = args.get("--out", "kvscope-attach");
  // The output directory first: a bad --out fails now, not after an hour attached.
  std::error_code dir_error;
  std::filesystem::create_directories(run.out_dir, dir_error);
  if (dir_error)
    throw Error(run.out_dir, "cannot create the output directory: " + dir_error.message());
  run.cfg.journal_path = run.out_dir + "/stream.kvj";
  return run;
}

std::string status_line(const KvEventClient& client) {
  return kv_attach_status_line(client.status(), client.model());
}

// Polls until `duration` seconds passed (0: no limit), the batch limit or a signal, drawing the
// status line on stderr. Returns the seconds attached.
double follow(KvEventClient& client, double duration) {
  const bool tty = isatty(2) != 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double next_status = tty ? 0.0 : 5.0;  // a pipe or log gets a line every 5 s, not a redraw
  bool first_seen = false, line_drawn = false;
  StopSignals signals;
  g_stop = 0;
  while (!g_stop && !client.batch_limit_reached()) {
    const double left = duration > 0 ? duration - elapsed() : 1.0;
    if (left <= 0) break;
    client.poll(static_cast<int>(std::min(left, 0.2) * 1000) + 1);
    const std::int64_t got = client.totals().batches;
    if (got > 0 && !first_seen) {
      first_seen = true;  // said once even in a log: the stream is live
      if (line_drawn) std::fputs("\r\033[K", stderr);
      std::fprintf(stderr, "kvscope attach: first batch after %.1f s\n", elapsed());
      line_drawn = false;
    }
    if (elapsed() >= next_status) {
      if (tty) {
        std::fprintf(stderr, "\r\033[K%.1f s  %s", elapsed(), status_line(client).c_str());
        line_drawn = true;
        next_status = elapsed() + 0.25;
      } else {
        std::fprintf(stderr, "kvscope attach: %.1f s  %s\n", elapsed(),
                     status_line(client).c_str());
        next_status = elapsed() + 5.0;
      }
    }
  }
  if (line_drawn) std::fputs("\r\033[K", stderr);
  return elapsed();
}

// Writes DIR's files and prints the summary. Returns the exit status (1: no batch arrived).
int finish(KvEventClient& client, const AttachRun& run, const Argv& argv, double seconds) {
  nlohmann::json summary = kv_attach_summary_json(client.status(), client.model());
  if (run.lookup) {
    const KvEventModel& model = client.model();
    summary["lookup"] = {
        {"file", run.lookup_file},
        {"prompt_tokens", run.prompt.size()},
        {"lora", run.lora},
        {"rows", kv_lookup_json(model.lookup({run.prompt, run.lora}), model.last_ts())}};
  }
  std::string command = "kvscope attach";
  for (const std::string& a : argv) command.append(" ").append(a);
  const std::string& out_dir = run.out_dir;
  // The small files first, so a recording that cannot be written (disk full) loses nothing else.
  write_file_atomically(out_dir + "/summary.json",
                        [&](std::ostream& o) { o << summary.dump(2) << "\n"; });
  write_report(out_dir + "/report.md", summary, command, seconds);
  const Timeline timeline =
      client.model().build_timeline(std::string("kvscope attach ").append(run.cfg.endpoint));
  timeline.save(out_dir + "/recording.kvr");
  timeline.export_chrome_trace(out_dir + "/trace.json");
  client.finish_journal();
  if (run.json)
    std::printf("%s\n", summary.dump(2).c_str());
  else
    print_summary(summary);
  std::fprintf(stderr,
               "kvscope attach: wrote %s/recording.kvr, trace.json, report.md, "
               "summary.json, stream.kvj\n",
               out_dir.c_str());
  if (summary["batches"].get<std::int64_t>() == 0) {
    std::fprintf(stderr, "kvscope attach: no batch arrived in %.1f s: %s\n", seconds,
                 status_line(client).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int cmd_attach(const Argv& argv) {
  if (argv.empty()) {
    std::fputs(kHelp, stderr);
    return kExitBadInput;
  }
  const Args args(argv,
                  {"--replay", "--topic", "--dp", "--duration", "--batches", "--out",
                   "--clear-scope", "--lookup", "--tokenizer", "--model", "--lora"},
                  {"--json", "--bind", "--bos", "--help"});
  if (args.has("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (args.positional().size() != 1) {
    throw Error("attach", "expected one ENDPOINT (e.g. tcp://127.0.0.1:5557), got " +
                              std::to_string(args.positional().size()) + "; see --help");
  }
  const AttachRun run = parse_attach(args);
  KvEventClient client(run.cfg);
  client.set_batch_limit(run.batches);
  const double seconds = follow(client, run.duration);
  if (g_stop) std::fprintf(stderr, "kvscope attach: stopped (signal) after %.1f s\n", seconds);
  return finish(client, run, argv, seconds);
}

}  // namespace kvscope::cli
