// kvscope-ui entry point: command-line parsing, then the app (exit 2 on bad arguments).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "app/app.h"
#include "app/core/quality_shipped.h"
#include "app/core/scenario_catalog.h"
#include "app/core/shell.h"
#include "engine/common/error.h"

namespace {

// As scripts/run.sh: the SmolLM2 chat when SmolLM2-135M is on disk, else minimal.json.
std::string default_scenario() {
  return kvscope::ui::default_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios");
}

void usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: kvscope-ui [SCENARIO.json | RECORDING.kvr] [--screenshot OUT.png [--frames N]\n"
      "                  [--step S]] [--presenter] [--size WxH] [--view NAME] [--caption N]\n"
      "                  [--backend cpu|cuda-sim|cuda] [--model NAME|PATH]\n"
      "                  [--renderer kvscope|imgui]\n"
      "       kvscope-ui --attach ENDPOINT [--replay ENDPOINT] [--topic T] [--dp N] [--bind]\n"
      "                  [--slots N] [...]\n"
      "       kvscope-ui --write-quality-sweep OUT.json [--model NAME|PATH]\n"
      "  With no file, opens %s.\n"
      "  --attach ENDPOINT     follow a live vLLM / SGLang KV-event stream (docs/attach.md):\n"
      "                        --replay, --topic, --dp, --bind as in `kvscope attach`; --slots N\n"
      "                        live blocks shown (default 65536)\n"
      "  --screenshot OUT.png  render N frames (default 30) of the finished run at step S\n"
      "                        (default: the middle), write a PNG and exit\n"
      "  --presenter           large fonts and high contrast (toggle with P)\n"
      "  --size WxH            window size (default 1600x1000)\n"
      "  --view NAME           first workspace: pool (default), prefix, attention, compare, live,\n"
      "                        kernel, serving\n"
      "  --caption N           open at presenter caption N with its view (workspace, layer and\n"
      "                        head, sink grid), as PageDown reaches it\n"
      "  --renderer R          how frames are drawn: kvscope (default: flat shapes skip the font\n"
      "                        texture and opaque ones the blend, much faster on software GL)\n"
      "                        or imgui (Dear ImGui's OpenGL3 backend); the same pixels\n"
      "  --backend B           what runs the forward pass: cpu (default), cuda-sim (the CUDA\n"
      "                        kernels on the emulated device: slow) or cuda (a GPU); also in\n"
      "                        the Controls panel\n"
      "  --model NAME|PATH     run the scenario on this model instead of its own: smollm2,\n"
      "                        stories260K, a file or synthetic:<spec>; also the Controls\n"
      "                        panel's model picker\n"
      "  --write-quality-sweep OUT.json  compute the Quality panel's sweep on --model (default\n"
      "                        stories260K) with no window and write it as a shipped result\n"
      "                        (assets/quality/, docs/ui/quality.md); minutes on SmolLM2\n"
      "Keys: Space play/pause, Left/Right step, Home/End, F1 help, F11 full screen,\n"
      "      PageDown/PageUp presenter captions, F12 screenshot, Ctrl+O open,\n"
      "      Ctrl+S save the recording, Ctrl+E export metrics CSV, Ctrl+Shift+A attach,\n"
      "      Ctrl+R restart, Ctrl+1..6 workspace.\n"
      "Exit codes: 2 bad input, 3 no display (use the headless CLI: kvscope run).\n",
      default_scenario().c_str());
}

int fail(const std::string& message) {
  std::fprintf(stderr, "kvscope-ui: %s\n", message.c_str());
  usage(stderr);
  return 2;
}

// Everything the command line says.
struct UiArgs {
  kvscope::ui::AppOptions options;
  std::string sweep_out;  // --write-quality-sweep
  kvscope::ui::AttachRequest attach;
  bool attaching = false;
  std::vector<std::string> attach_flags;  // attach options seen (they need --attach)
};

// One option at argv[i]: `matched` when it was this reader's, with the exit code when it ends the
// run (help, or bad input).
struct Read {
  bool matched = false;
  std::optional<int> exit;
};
Read mine() {
  return {true, std::nullopt};
}
Read done(int code) {
  return {true, code};
}

// The option's value (advancing i past it), or null when the line ends here.
const char* value_of(int argc, char** argv, int& i) {
  return i + 1 < argc ? argv[++i] : nullptr;
}

// An integer value in [lo, hi]; nullopt when it is missing or not one.
std::optional<long> int_value(const char* v, long lo, long hi) {
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < lo || n > hi) return std::nullopt;
  return n;
}

// --screenshot, --frames, --step, --size, --view, --caption, --presenter, --renderer.
Read read_view_option(const std::string& arg, int argc, char** argv, int& i,
                      kvscope::ui::AppOptions& o) {
  if (arg == "--screenshot") {
    const char* v = value_of(argc, argv, i);
    if (!v) return done(fail("--screenshot: expected an output path"));
    o.screenshot = v;
  } else if (arg == "--frames") {
    const auto n = int_value(value_of(argc, argv, i), 1, 100000);
    if (!n) return done(fail("--frames: expected 1..100000"));
    o.frames = static_cast<int>(*n);
  } else if (arg == "--step") {
    const auto n = int_value(value_of(argc, argv, i), 0, 10000000);
    if (!n) return done(fail("--step: expected a step >= 0"));
    o.step = static_cast<int>(*n);
  } else if (arg == "--size") {
    const char* v = value_of(argc, argv, i);
    if (!v || std::sscanf(v, "%dx%d", &o.width, &o.height) != 2 || o.width < 320 ||
        o.height < 240 || o.width > 8192 || o.height > 8192) {
      return done(fail("--size: expected WxH between 320x240 and 8192x8192"));
    }
  } else if (arg == "--view") {
    const char* v = value_of(argc, argv, i);
    const std::string name = v ? v : "";
    const int found = kvscope::ui::UiShell::workspace_of_key(name);
    if (found < 0) {
      return done(fail(
          "--view: expected pool, prefix, attention, compare, live, kernel or serving, got \"" +
          name + "\""));
    }
    o.workspace = found;
    o.workspace_given = true;
  } else if (arg == "--caption") {
    const auto n = int_value(value_of(argc, argv, i), 1, 100000);
    if (!n) return done(fail("--caption: expected a caption number >= 1"));
    o.caption = static_cast<int>(*n);
  } else if (arg == "--presenter") {
    o.presenter = true;
  } else if (arg == "--renderer") {
    const char* v = value_of(argc, argv, i);
    const std::string name = v ? v : "";
    if (name != "kvscope" && name != "imgui")
      return done(fail("--renderer: expected kvscope or imgui, got \"" + name + "\""));
    o.imgui_renderer = name == "imgui";
  } else {
    return {};
  }
  return mine();
}

// --backend, --model, --write-quality-sweep.
Read read_run_option(const std::string& arg, int argc, char** argv, int& i, UiArgs& a) {
  if (arg == "--backend") {
    const char* v = value_of(argc, argv, i);
    const std::string name = v ? v : "";
    if (name != "cpu" && name != "cuda-sim" && name != "cuda")
      return done(fail("--backend: expected cpu, cuda-sim or cuda, got \"" + name + "\""));
    a.options.backend = name;
  } else if (arg == "--model") {
    const char* v = value_of(argc, argv, i);
    if (!v || *v == '\0')
      return done(fail("--model: expected a model name (smollm2), file or synthetic:<spec>"));
    a.options.model = v;
  } else if (arg == "--write-quality-sweep") {
    const char* v = value_of(argc, argv, i);
    if (!v || *v == '\0')
      return done(fail("--write-quality-sweep: expected an output path (.json)"));
    a.sweep_out = v;
  } else {
    return {};
  }
  return mine();
}

// --attach, --replay, --topic, --dp, --slots, --bind.
Read read_attach_option(const std::string& arg, int argc, char** argv, int& i, UiArgs& a) {
  if (arg == "--attach") {
    const char* v = value_of(argc, argv, i);
    if (!v) return done(fail("--attach: expected an endpoint such as tcp://127.0.0.1:5557"));
    a.attach.endpoint = v;
    a.attaching = true;
    return mine();
  }
  if (arg == "--replay" || arg == "--topic") {
    const char* v = value_of(argc, argv, i);
    if (!v) return done(fail(arg + ": expected a value"));
    (arg == "--replay" ? a.attach.replay : a.attach.topic) = v;
  } else if (arg == "--dp" || arg == "--slots") {
    const char* v = value_of(argc, argv, i);
    const bool dp = arg == "--dp";
    const auto n = int_value(v, dp ? 1 : 16, dp ? 256 : (1 << 20));
    if (!n) {
      return done(fail(arg +
                       (dp ? ": expected an integer in [1, 256], got '"
                           : ": expected an integer in [16, 1048576], got '") +
                       (v ? v : "") + "'"));
    }
    (dp ? a.attach.dp : a.attach.slots) = static_cast<int>(*n);
  } else if (arg == "--bind") {
    a.attach.bind = true;
  } else {
    return {};
  }
  a.attach_flags.push_back(arg);
  return mine();
}

// Reads the whole command line into `a`; the exit code when it ends the run.
std::optional<int> read_args(int argc, char** argv, UiArgs& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
    Read r = read_view_option(arg, argc, argv, i, a.options);
    if (!r.matched) r = read_run_option(arg, argc, argv, i, a);
    if (!r.matched) r = read_attach_option(arg, argc, argv, i, a);
    if (r.exit) return r.exit;
    if (r.matched) continue;
    if (!arg.empty() && arg[0] == '-') return fail("unknown option " + arg);
    if (!a.options.input.empty())
      return fail("expected one scenario or recording, got a second: " + arg);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(arg, ec)) {
      std::fprintf(stderr, "kvscope-ui: %s: no such file\n", arg.c_str());
      return 2;
    }
    a.options.input = arg;
  }
  return std::nullopt;
}

// --write-quality-sweep: the Quality panel's sweep, no window.
int write_quality_sweep(const UiArgs& a, int argc, char** argv) {
  const kvscope::ui::AppOptions& o = a.options;
  // Only --model goes with it: the sweep has its own fixed setup (docs/ui/quality.md).
  if (a.attaching || !o.input.empty() || !o.screenshot.empty() || !o.backend.empty() ||
      o.presenter || o.workspace_given || o.caption > 0 || !a.attach_flags.empty())
    return fail("--write-quality-sweep: takes only --model besides its output path");
  kvscope::ui::ShippedSweepRequest request;
  request.out_path = a.sweep_out;
  request.model_arg = o.model;
  request.made_by = "kvscope-ui";
  for (int i = 1; i < argc; ++i) request.made_by.append(" ").append(argv[i]);
  try {
    const kvscope::ui::ShippedSweep s = kvscope::ui::write_shipped_sweep(request, stderr);
    std::printf("kvscope-ui: wrote %s (%zu points, %s)\n", a.sweep_out.c_str(),
                s.sweep.points.size(), s.wall_time.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvscope-ui: %s\n", e.what());
    return 2;
  }
}

int run_main(int argc, char** argv) {
  UiArgs a;
  if (const std::optional<int> code = read_args(argc, argv, a)) return *code;
  if (!a.sweep_out.empty()) return write_quality_sweep(a, argc, argv);
  kvscope::ui::AppOptions& options = a.options;
  if (!a.attaching && !a.attach_flags.empty())
    return fail(a.attach_flags.front() + ": only with --attach ENDPOINT");
  if (a.attaching && !options.input.empty())
    return fail("--attach follows a live engine: no scenario or recording with it");
  if (a.attaching) options.attach = a.attach;
  if (options.input.empty() && !a.attaching) options.input = default_scenario();
  const bool scenario = !a.attaching && std::filesystem::path(options.input).extension() == ".json";
  if (!options.model.empty() && !scenario)
    return fail("--model: runs a scenario (.json); a recording or live stream has no model");
  if (!options.backend.empty() && options.backend != "cpu" && !scenario)
    return fail("--backend: runs a scenario (.json); a recording or live stream has no model");
  return kvscope::ui::run_app(options);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {  // bad input is caught (exit 2) before: this is a bug
    std::fprintf(stderr, "kvscope-ui: internal error (a bug in kvscope; please report it): %s\n",
                 e.what());
    return kvscope::kExitInternalError;
  }
}
