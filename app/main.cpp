// kvscope-ui entry point: command-line parsing, then the app (exit 2 on bad arguments).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "app/app.h"
#include "app/core/quality_shipped.h"
#include "app/core/scenario_catalog.h"
#include "app/core/shell.h"

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
      "  --view NAME           first workspace: pool (default), prefix, attention, compare, live\n"
      "  --caption N           open at presenter caption N with its view (workspace, layer and\n"
      "                        head, sink grid), as PageDown reaches it\n"
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
      "      Ctrl+Shift+A attach, Ctrl+R restart, Ctrl+1..5 workspace.\n"
      "Exit codes: 2 bad input, 3 no display (use the headless CLI: kvscope run).\n",
      default_scenario().c_str());
}

int fail(const std::string& message) {
  std::fprintf(stderr, "kvscope-ui: %s\n", message.c_str());
  usage(stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  kvscope::ui::AppOptions options;
  std::string sweep_out;  // --write-quality-sweep
  kvscope::ui::AttachRequest attach;
  bool attaching = false;
  std::vector<std::string> attach_flags;  // attach options seen (they need --attach)
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)name;
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else if (arg == "--screenshot") {
      const char* v = value("--screenshot");
      if (!v) return fail("--screenshot: expected an output path");
      options.screenshot = v;
    } else if (arg == "--frames") {
      const char* v = value("--frames");
      char* end = nullptr;
      const long n = v ? std::strtol(v, &end, 10) : 0;
      if (!v || *end != '\0' || n < 1 || n > 100000) return fail("--frames: expected 1..100000");
      options.frames = static_cast<int>(n);
    } else if (arg == "--step") {
      const char* v = value("--step");
      char* end = nullptr;
      const long n = v ? std::strtol(v, &end, 10) : -1;
      if (!v || *end != '\0' || n < 0 || n > 10000000) return fail("--step: expected a step >= 0");
      options.step = static_cast<int>(n);
    } else if (arg == "--size") {
      const char* v = value("--size");
      if (!v || std::sscanf(v, "%dx%d", &options.width, &options.height) != 2 ||
          options.width < 320 || options.height < 240 || options.width > 8192 ||
          options.height > 8192) {
        return fail("--size: expected WxH between 320x240 and 8192x8192");
      }
    } else if (arg == "--view") {
      const char* v = value("--view");
      const std::string name = v ? v : "";
      const int found = kvscope::ui::UiShell::workspace_of_key(name);
      if (found < 0) {
        return fail("--view: expected pool, prefix, attention, compare or live, got \"" + name +
                    "\"");
      }
      options.workspace = found;
      options.workspace_given = true;
    } else if (arg == "--caption") {
      const char* v = value("--caption");
      char* end = nullptr;
      const long n = v ? std::strtol(v, &end, 10) : -1;
      if (!v || *end != '\0' || n < 1 || n > 100000)
        return fail("--caption: expected a caption number >= 1");
      options.caption = static_cast<int>(n);
    } else if (arg == "--backend") {
      const char* v = value("--backend");
      const std::string name = v ? v : "";
      if (name != "cpu" && name != "cuda-sim" && name != "cuda")
        return fail("--backend: expected cpu, cuda-sim or cuda, got \"" + name + "\"");
      options.backend = name;
    } else if (arg == "--model") {
      const char* v = value("--model");
      if (!v || *v == '\0')
        return fail("--model: expected a model name (smollm2), file or synthetic:<spec>");
      options.model = v;
    } else if (arg == "--write-quality-sweep") {
      const char* v = value("--write-quality-sweep");
      if (!v || *v == '\0') return fail("--write-quality-sweep: expected an output path (.json)");
      sweep_out = v;
    } else if (arg == "--attach") {
      const char* v = value("--attach");
      if (!v) return fail("--attach: expected an endpoint such as tcp://127.0.0.1:5557");
      attach.endpoint = v;
      attaching = true;
    } else if (arg == "--replay" || arg == "--topic") {
      const char* v = value(arg.c_str());
      if (!v) return fail(arg + ": expected a value");
      (arg == "--replay" ? attach.replay : attach.topic) = v;
      attach_flags.push_back(arg);
    } else if (arg == "--dp" || arg == "--slots") {
      const char* v = value(arg.c_str());
      char* end = nullptr;
      const long n = v ? std::strtol(v, &end, 10) : 0;
      const bool dp = arg == "--dp";
      if (!v || *end != '\0' || n < (dp ? 1 : 16) || n > (dp ? 256 : (1 << 20))) {
        return fail(arg +
                    (dp ? ": expected an integer in [1, 256], got '"
                        : ": expected an integer in [16, 1048576], got '") +
                    (v ? v : "") + "'");
      }
      (dp ? attach.dp : attach.slots) = static_cast<int>(n);
      attach_flags.push_back(arg);
    } else if (arg == "--bind") {
      attach.bind = true;
      attach_flags.push_back(arg);
    } else if (arg == "--presenter") {
      options.presenter = true;
    } else if (!arg.empty() && arg[0] == '-') {
      return fail("unknown option " + arg);
    } else if (options.input.empty()) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(arg, ec)) {
        std::fprintf(stderr, "kvscope-ui: %s: no such file\n", arg.c_str());
        return 2;
      }
      options.input = arg;
    } else {
      return fail("expected one scenario or recording, got a second: " + arg);
    }
  }
  if (!sweep_out.empty()) {
    // Only --model goes with it: the sweep has its own fixed setup (docs/ui/quality.md).
    if (attaching || !options.input.empty() || !options.screenshot.empty() ||
        !options.backend.empty() || options.presenter || options.workspace_given ||
        options.caption > 0 || !attach_flags.empty())
      return fail("--write-quality-sweep: takes only --model besides its output path");
    kvscope::ui::ShippedSweepRequest request;
    request.out_path = sweep_out;
    request.model_arg = options.model;
    request.made_by = "kvscope-ui";
    for (int i = 1; i < argc; ++i) request.made_by.append(" ").append(argv[i]);
    try {
      const kvscope::ui::ShippedSweep s = kvscope::ui::write_shipped_sweep(request, stderr);
      std::printf("kvscope-ui: wrote %s (%zu points, %s)\n", sweep_out.c_str(),
                  s.sweep.points.size(), s.wall_time.c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvscope-ui: %s\n", e.what());
      return 2;
    }
  }
  if (!attaching && !attach_flags.empty())
    return fail(attach_flags.front() + ": only with --attach ENDPOINT");
  if (attaching && !options.input.empty())
    return fail("--attach follows a live engine: no scenario or recording with it");
  if (attaching) options.attach = attach;
  if (options.input.empty() && !attaching) options.input = default_scenario();
  const bool scenario = !attaching && std::filesystem::path(options.input).extension() == ".json";
  if (!options.model.empty() && !scenario)
    return fail("--model: runs a scenario (.json); a recording or live stream has no model");
  if (!options.backend.empty() && options.backend != "cpu" && !scenario)
    return fail("--backend: runs a scenario (.json); a recording or live stream has no model");
  return kvscope::ui::run_app(options);
}
