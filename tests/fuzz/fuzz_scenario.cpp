// libFuzzer target: the scenario parser (parse_scenario_text), then resolving every variant's pool
// size and requests against the stories260K shape. Bad files must end in kvscope::Error.
#include <cstdint>
#include <string>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"
#include "tests/fuzz/fuzz_support.h"

using kvscope::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kvscope::ModelConfig shape = [] {
    kvscope::ModelConfig c;  // stories260K
    c.dim = 64, c.hidden_dim = 172, c.n_layers = 5, c.n_heads = 8, c.n_kv_heads = 4;
    c.vocab_size = 512, c.seq_len = 512;
    return c;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const kvscope::Scenario s = kvscope::parse_scenario_text(text, "fuzz.json");
    for (const std::string& name : s.variant_names()) {
      try {
        const kvscope::ResolvedRun run = kvscope::resolve_scenario(s, name, shape, nullptr);
        check(run.config.num_blocks >= 1 && run.config.block_size >= 1, "pool of one block");
        check(run.requests.size() >= s.workload.requests.size(), "a request per request");
        for (const auto& r : run.requests) {
          check(!r.prompt_tokens.empty() && r.max_new_tokens >= 1 && r.n_samples >= 1,
                "request shape");
        }
      } catch (const kvscope::Error&) {
      }
    }
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}
