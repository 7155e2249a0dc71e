// kvscope: the headless command-line tool (generate | info | synth | bench | ...).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/common/error.h"

namespace {

constexpr const char* kUsage = R"(kvscope: see and understand the KV cache of LLM inference.

usage: kvscope <command> [options]     (kvscope <command> --help for its options)

commands:
  generate   run the model on a prompt and print the text (llama2.c run compatible)
  info       print a model's shape and its KV bytes per token per format
  synth      write a random-weight model of a published shape as a llama2.c checkpoint
  run        run a scenario (continuous batching on the real model); writes a recording,
             a Chrome trace, per-step metrics and a report (report.md, report.json, PNGs)
  trace      replay request traces (mooncake), import KV-cache event logs (kv-events), and
             trace one step's attention kernel on the SIMT emulator (kernel)
  bench      benchmarks: generate (decode and prefill tokens/s), weights, kv, alloc, quant, mla,
             batch (sequences per step), attention (CUDA decode attention)
  eval       quality of a KV cache change vs the fp32 cache (perplexity, KL, top-1, bytes/token):
             format, format-sweep, mla, mla-sweep, evict, evict-sweep, streaming, attention,
             key-channels
  memwall    the context or batch whose KV cache fits beside the weights on 1..8 GPUs
  disagg     a scenario colocated and disaggregated (prefill and decode instances joined by a
             link) on a modelled clock: TTFT split, time per token, K/V sent, each pool
  tokenize   the token ids and pieces of a text under a model's tokenizer (--json)
  attach     follow a running vLLM / SGLang engine's KV-cache events live (ZeroMQ); writes a
             recording, a Chrome trace and a report per data-parallel rank
  lookup     why a prompt's prefix missed: how much of it an attach recording's engine held,
             per rank and medium, and where and why the match stops

models are found via --model, $KVSCOPE_MODELS, assets/models/, then ../shared/models;
--model smollm2 is SmolLM2-135M-Instruct (GGUF; scripts/models.sh fetches it); any Llama GGUF loads;
--model synthetic:<preset> selects random weights at a published shape (llama-3-70b, ...).
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    using namespace kvscope::cli;
    if (command == "generate") return cmd_generate(args);
    if (command == "info") return cmd_info(args);
    if (command == "synth") return cmd_synth(args);
    if (command == "bench") return cmd_bench(args);
    if (command == "run") return cmd_run(args);
    if (command == "trace") return cmd_trace(args);
    if (command == "eval") return cmd_eval(args);
    if (command == "memwall") return cmd_memwall(args);
    if (command == "disagg") return cmd_disagg(args);
    if (command == "tokenize") return cmd_tokenize(args);
    if (command == "attach") return cmd_attach(args);
    if (command == "lookup") return cmd_lookup(args);
    std::fprintf(stderr, "kvscope: unknown command '%s'; run kvscope --help\n", command.c_str());
    return 2;
  } catch (const kvscope::Error& e) {
    std::fprintf(stderr, "kvscope %s: error: %s\n", command.c_str(), e.what());
    return kvscope::kExitBadInput;
  } catch (const kvscope::InternalError& e) {
    std::fprintf(stderr, "kvscope %s: %s\n", command.c_str(), e.what());
    return kvscope::kExitInternalError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kvscope %s: error: out of memory\n", command.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvscope %s: internal error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
