// A scenario's workload: explicit requests, seeded generators (shared-prefix groups, multi-turn
// chat, random lengths) and a Mooncake trace slice, and their expansion into SimRequests. The
// expansion is deterministic: the same file and seeds give the same token ids on every machine
// (a splitmix64 generator and integer arithmetic, no std:: distributions).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/sched/sim_config.h"

namespace kvscope {

// A length (in tokens) drawn per request.
struct LengthDist {
  enum class Kind { kFixed, kUniform, kLognormal };
  Kind kind = Kind::kFixed;
  int value = 1;         // fixed
  int min = 1, max = 1;  // uniform: [min, max]; lognormal: draws outside are drawn again
  double median = 1.0;   // lognormal: exp(mu)
  double sigma = 0.0;    // lognormal: standard deviation of the log
};

// A request's prompt: text, token ids, or a named shared prefix followed by suffix text.
struct PromptSpec {
  std::optional<std::string> text;
  std::vector<int> tokens;
  std::optional<std::string> prefix;  // a name in Workload::prefixes
  std::string suffix;                 // text after the prefix (may be empty)
};

struct ExplicitRequest {
  std::string at;  // JSON path, for errors found while resolving ("workload.requests[2]")
  int arrival_step = 0;
  PromptSpec prompt;
  int max_new_tokens = 1;
  int priority = 0;
  int n_samples = 1;
  // CacheBlend: documents before the prompt, each tokenized alone (as a chunk cache keeps them);
  // only with a text prompt. Empty: none.
  std::vector<std::string> chunks;
};

struct Arrivals {
  int start = 0;  // step of the first arrival
  int every = 1;  // steps between arrivals (0 = all at start)
};

// One turn of a scripted chat: the user's message, and the reply the next turn's history holds
// (texts, used verbatim: a chat template's markup is written out by the scenario).
struct ChatTurn {
  std::string user;
  std::string reply;  // may be empty on a conversation's last turn
};

struct Generator {
  enum class Kind {
    kSharedPrefix,  // `count` requests: the named prefix + a suffix (texts round robin, or random)
    kChat,          // `conversations` x `turns`: each turn's prompt is the whole history so far
    kRandom,        // `count` requests of random token ids with drawn prompt and output lengths
  };
  std::string at;  // JSON path ("workload.generators[1]")
  Kind kind = Kind::kRandom;
  std::uint64_t seed = 1;
  Arrivals arrival;
  int count = 1;                      // shared_prefix, random
  std::string prefix;                 // shared_prefix (required), chat (optional system prompt)
  std::vector<std::string> suffixes;  // shared_prefix: texts; empty = random suffix_tokens
  LengthDist suffix_tokens;           // shared_prefix without suffixes
  LengthDist prompt_tokens;           // random
  LengthDist max_new_tokens;          // all kinds (chat: the reply length)
  int n_samples = 1;                  // shared_prefix, random
  int conversations = 1, turns = 1;   // chat
  LengthDist user_tokens;             // chat: tokens per user message
  int turn_gap = 1;                   // chat: steps between a conversation's turns
  // chat: scripted conversations (texts); empty = `conversations` x `turns` of random ids.
  std::vector<std::vector<ChatTurn>> script;
};

// A slice of a Mooncake JSONL trace; hash ids become synthetic token blocks
// (mooncake_prompt_tokens), timestamps become arrival steps.
struct TraceWorkload {
  std::string at;                     // JSON path ("workload.trace")
  std::string path;                   // as written in the scenario
  std::int64_t first = 0;             // first line's request index (0-based, in file order)
  std::optional<std::int64_t> count;  // requests taken; absent = to the end
  double time_scale = 1.0;            // > 1 replays faster
  double step_ms = 20.0;              // simulated milliseconds per step
};

struct Workload {
  std::map<std::string, std::string> prefixes;  // named shared prompt texts
  std::vector<ExplicitRequest> requests;
  std::vector<Generator> generators;
  std::optional<TraceWorkload> trace;
};

// Expands the workload: explicit requests, then each generator, then the trace, in file order.
// `file` names the scenario in errors; `scenario_dir` anchors relative trace paths. Throws
// kvscope::Error naming the JSON path when text needs a tokenizer and there is none, or a trace
// file is missing or bad.
std::vector<SimRequest> expand_workload(const Workload& w, const std::string& file,
                                        const std::string& scenario_dir, int vocab_size,
                                        const Tokenizer* tokenizer);

// Where a trace path is looked for: as given (absolute), beside the scenario, then
// $KVSCOPE_TRACES and ../shared/traces beside the checkout. Throws listing every place looked.
std::string locate_trace(const std::string& path, const std::string& scenario_dir,
                         const std::string& where);

// Draws one length; deterministic for a given state.
int draw_length(const LengthDist& d, std::uint64_t& state);

}  // namespace kvscope
