// libFuzzer target: the minimal scenario parser (parse_min_scenario_text), then resolving its
// pool size and requests against the stories260K shape. Bad files must end in kvscope::Error.
#include <cstdint>
#include <string>

#include "engine/common/error.h"
#include "engine/sched/scenario_min.h"
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
    const kvscope::MinScenario s = kvscope::parse_min_scenario_text(text, "fuzz.json");
    check(!s.requests.empty(), "at least one request");
    const kvscope::SimConfig cfg = kvscope::resolve_sim_config(s, shape);
    check(cfg.num_blocks >= 1 && cfg.block_size >= 1, "pool of at least one block");
    const auto requests = kvscope::resolve_requests(s, nullptr);
    check(requests.size() == s.requests.size(), "one SimRequest per request");
    for (const auto& r : requests) {
      check(!r.prompt_tokens.empty() && r.max_new_tokens >= 1, "request shape");
    }
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}
