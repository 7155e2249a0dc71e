// kvscope_wasm_bench: the engine's prefill and decode speed as the browser build compiles it, run
// under Node.js on a model file of the host (NODERAWFS), one thread. scripts/web.sh --bench runs
// it beside the desktop build's `kvscope bench generate` on the same file, for the ratio that
// docs/web.md reports. Prints one JSON line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/infer/generate.h"
#include "engine/model/locate.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kvscope_wasm_bench MODEL [STEPS [native|f32]]\n");
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 64;
  try {
    const bool f32 = argc > 3 && std::string(argv[3]) == "f32";
    const auto t0 = std::chrono::steady_clock::now();
    const kvscope::LoadedModel m =
        kvscope::load_model(argv[1], "", kvscope::WeightStorage::kMapped,
                            f32 ? kvscope::WeightFormat::kF32 : kvscope::WeightFormat::kNative);
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto backend = kvscope::make_cpu_backend(1);
    kvscope::Transformer t(m.model, *backend);
    kvscope::GenerateOptions o;
    o.prompt =
        "Once upon a time, there was a little girl named Lily who loved to play outside in "
        "the park with her friends every single day after school.";
    o.steps = steps;
    const kvscope::GenerateResult r =
        kvscope::generate(t, *m.tokenizer, o, [](const std::string&) {});
    const int decoded = r.positions_run - r.prefill_positions;
    std::printf(
        "{\"isa\": \"%s\", \"load_seconds\": %.2f, \"prefill_tokens\": %d, "
        "\"prefill_tokens_per_s\": %.2f, "
        "\"decode_tokens\": %d, \"decode_tokens_per_s\": %.2f}\n",
        kvscope::cpu::quant_isa_name(kvscope::cpu::best_quant_isa()), load_s, r.prefill_positions,
        r.prefill_positions / r.prefill_seconds, decoded, decoded / r.decode_seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvscope_wasm_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
