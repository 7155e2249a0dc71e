// Workload expansion: explicit requests, generators and the trace slice become SimRequests.
#include "engine/scenario/workload.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "engine/common/error.h"
#include "engine/trace/mooncake.h"

namespace kvscope {
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kMaxWorkloadTokens = std::int64_t{1} << 26;  // prompt tokens in all
constexpr int kBos = 1;         // llama2.c prompts start with BOS
constexpr int kFirstPlain = 3;  // random ids skip <unk>, BOS and EOS

std::uint64_t next_u64(std::uint64_t& s) {  // splitmix64
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int uniform_int(std::uint64_t& s, int lo, int hi) {  // [lo, hi]
  const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<int>(next_u64(s) % span);
}

double unit_open(std::uint64_t& s) {  // (0, 1)
  return (static_cast<double>(next_u64(s) >> 11) + 0.5) * 0x1.0p-53;
}

class Builder {
 public:
  Builder(const std::string& file, int vocab, const Tokenizer* tokenizer)
      : file_(file), vocab_(vocab), tokenizer_(tokenizer) {}

  // `bos`: a prompt's start, which gets BOS when the model's convention has one (llama2.c);
  // chat models without one (SmolLM2) start from the text as written, e.g. "<|im_start|>".
  std::vector<int> encode(const std::string& text, bool bos, const std::string& at) const {
    if (tokenizer_ == nullptr) {
      fail_expected(file_ + ": " + at, "token ids (this model has no tokenizer for text)", "text");
    }
    std::vector<int> ids = tokenizer_->encode(text, bos && tokenizer_->adds_bos(), /*eos=*/false);
    if (bos && ids.empty()) {
      fail_expected(file_ + ": " + at, "a prompt that makes at least one token", "\"\"");
    }
    return ids;
  }
  static constexpr int kFirstMerged = 3 + 256;
  void random_tokens(std::vector<int>& out, int count, std::uint64_t& state,
                     const std::string& at) const {
    if (vocab_ <= kFirstPlain) {
      fail_expected(file_ + ": " + at, "a model vocabulary of more than 3 tokens for random ids",
                    std::to_string(vocab_));
    }
    // llama2.c vocabularies put the 256 byte-fallback tokens right after the 3 specials: skip
    // them when the vocabulary has merged tokens beyond, so generated text shows words, not
    // stray bytes (the UI decodes these tokens on stage).
    const int lo = vocab_ > kFirstMerged + 16 ? kFirstMerged : kFirstPlain;
    for (int i = 0; i < count; ++i) out.push_back(uniform_int(state, lo, vocab_ - 1));
  }
  void add(SimRequest q, const std::string& at) {
    total_ += static_cast<std::int64_t>(q.prompt_tokens.size()) * q.n_samples;
    if (total_ > kMaxWorkloadTokens) {
      fail_expected(
          file_ + ": " + at,
          "a workload of at most " + std::to_string(kMaxWorkloadTokens) + " prompt tokens in all",
          "more");
    }
    out_.push_back(std::move(q));
  }
  std::vector<SimRequest> take() { return std::move(out_); }
  const std::string& file() const { return file_; }

 private:
  const std::string& file_;
  int vocab_;
  const Tokenizer* tokenizer_;
  std::int64_t total_ = 0;
  std::vector<SimRequest> out_;
};

void expand_explicit(const Workload& w, Builder& b, const std::string& file, int vocab) {
  for (const ExplicitRequest& r : w.requests) {
    SimRequest q;
    q.arrival_step = r.arrival_step;
    q.max_new_tokens = r.max_new_tokens;
    q.priority = r.priority;
    q.n_samples = r.n_samples;
    if (!r.chunks.empty()) {
      // Each document tokenized alone, as a chunk cache keeps it; the first opens the prompt.
      for (std::size_t i = 0; i < r.chunks.size(); ++i) {
        const std::string at = r.at + ".chunks[" + std::to_string(i) + "]";
        const auto ids = b.encode(r.chunks[i], i == 0, at);
        if (ids.empty())
          fail_expected(file + ": " + at, "a text that makes at least one token", "\"\"");
        q.prompt_tokens.insert(q.prompt_tokens.end(), ids.begin(), ids.end());
        q.blend_chunks.push_back(static_cast<int>(ids.size()));
      }
      const auto question = b.encode(*r.prompt.text, false, r.at + ".prompt");
      if (question.empty()) {
        fail_expected(file + ": " + r.at + ".prompt", "a question that makes at least one token",
                      "\"\"");
      }
      q.prompt_tokens.insert(q.prompt_tokens.end(), question.begin(), question.end());
    } else if (r.prompt.text) {
      q.prompt_tokens = b.encode(*r.prompt.text, true, r.at + ".prompt");
    } else if (r.prompt.prefix) {
      q.prompt_tokens = b.encode(w.prefixes.at(*r.prompt.prefix), true, r.at + ".prompt.prefix");
      if (!r.prompt.suffix.empty()) {
        const auto suffix = b.encode(r.prompt.suffix, false, r.at + ".prompt.suffix");
        q.prompt_tokens.insert(q.prompt_tokens.end(), suffix.begin(), suffix.end());
      }
    } else {
      for (std::size_t k = 0; k < r.prompt.tokens.size(); ++k) {
        if (r.prompt.tokens[k] >= vocab) {
          fail_expected(file + ": " + r.at + ".prompt_tokens[" + std::to_string(k) + "]",
                        "a token id in [0, " + std::to_string(vocab) + ")",
                        std::to_string(r.prompt.tokens[k]));
        }
      }
      q.prompt_tokens = r.prompt.tokens;
    }
    b.add(std::move(q), r.at);
  }
}

// Generator request i's arrival step: start + i x every, at most 2^30.
int generator_arrival(const Generator& g, const Builder& b, std::int64_t i) {
  const std::int64_t step = g.arrival.start + i * g.arrival.every;
  if (step > (1 << 30)) {
    fail_expected(b.file() + ": " + g.at + ".arrival", "arrival steps up to 2^30",
                  std::to_string(step));
  }
  return static_cast<int>(step);
}

// Conversation c starts at its arrival; its turn t comes turn_gap x t steps later.
int chat_turn_arrival(const Generator& g, const Builder& b, int c, int t) {
  const std::int64_t step =
      std::int64_t{generator_arrival(g, b, c)} + static_cast<std::int64_t>(t) * g.turn_gap;
  if (step > (1 << 30)) {
    fail_expected(b.file() + ": " + g.at + ".turn_gap", "arrival steps up to 2^30",
                  std::to_string(step));
  }
  return static_cast<int>(step);
}

void expand_shared_prefix(const Workload& w, const Generator& g, Builder& b, std::uint64_t& state) {
  const std::vector<int> prefix = b.encode(w.prefixes.at(g.prefix), true, g.at + ".prefix");
  for (int i = 0; i < g.count; ++i) {
    SimRequest q;
    q.arrival_step = generator_arrival(g, b, i);
    q.prompt_tokens = prefix;
    if (!g.suffixes.empty()) {
      const auto s = b.encode(g.suffixes[static_cast<std::size_t>(i) % g.suffixes.size()], false,
                              g.at + ".suffixes");
      q.prompt_tokens.insert(q.prompt_tokens.end(), s.begin(), s.end());
    } else {
      b.random_tokens(q.prompt_tokens, draw_length(g.suffix_tokens, state), state, g.at);
    }
    q.max_new_tokens = draw_length(g.max_new_tokens, state);
    q.n_samples = g.n_samples;
    b.add(std::move(q), g.at);
  }
}

// Chat from a script: each turn's request holds the history so far plus the user's text; the
// scripted reply joins the history after it.
void expand_scripted_chat(const Generator& g, const std::vector<int>& system, Builder& b,
                          std::uint64_t& state) {
  for (std::size_t c = 0; c < g.script.size(); ++c) {
    std::vector<int> history = system;
    const std::vector<ChatTurn>& conv = g.script[c];
    for (std::size_t t = 0; t < conv.size(); ++t) {
      const std::string turn_at =
          g.at + ".script[" + std::to_string(c) + "][" + std::to_string(t) + "]";
      const std::vector<int> user = b.encode(conv[t].user, false, turn_at + ".user");
      history.insert(history.end(), user.begin(), user.end());
      SimRequest q;
      q.arrival_step = chat_turn_arrival(g, b, static_cast<int>(c), static_cast<int>(t));
      q.prompt_tokens = history;
      q.max_new_tokens = draw_length(g.max_new_tokens, state);
      if (!conv[t].reply.empty()) {
        const std::vector<int> reply = b.encode(conv[t].reply, false, turn_at + ".reply");
        history.insert(history.end(), reply.begin(), reply.end());
      }
      b.add(std::move(q), g.at);
    }
  }
}

void expand_random_chat(const Generator& g, const std::vector<int>& system, Builder& b,
                        std::uint64_t& state) {
  for (int c = 0; c < g.conversations; ++c) {
    std::vector<int> history = system;
    for (int t = 0; t < g.turns; ++t) {
      b.random_tokens(history, draw_length(g.user_tokens, state), state, g.at);
      SimRequest q;
      q.arrival_step = chat_turn_arrival(g, b, c, t);
      q.prompt_tokens = history;
      q.max_new_tokens = draw_length(g.max_new_tokens, state);
      // The next turn's history holds a stand-in for this reply (seeded ids of the same
      // length): the model's reply is not known before the run.
      b.random_tokens(history, q.max_new_tokens, state, g.at);
      b.add(std::move(q), g.at);
    }
  }
}

void expand_chat(const Workload& w, const Generator& g, Builder& b, std::uint64_t& state) {
  const std::vector<int> system = g.prefix.empty()
                                      ? std::vector<int>{kBos}
                                      : b.encode(w.prefixes.at(g.prefix), true, g.at + ".prefix");
  if (!g.script.empty()) {
    expand_scripted_chat(g, system, b, state);
  } else {
    expand_random_chat(g, system, b, state);
  }
}

void expand_random(const Generator& g, Builder& b, std::uint64_t& state) {
  for (int i = 0; i < g.count; ++i) {
    SimRequest q;
    q.arrival_step = generator_arrival(g, b, i);
    q.prompt_tokens.push_back(kBos);
    b.random_tokens(q.prompt_tokens, draw_length(g.prompt_tokens, state) - 1, state, g.at);
    q.max_new_tokens = draw_length(g.max_new_tokens, state);
    q.n_samples = g.n_samples;
    b.add(std::move(q), g.at);
  }
}

void expand_generator(const Workload& w, const Generator& g, Builder& b) {
  std::uint64_t state = g.seed;
  switch (g.kind) {
    case Generator::Kind::kSharedPrefix:
      expand_shared_prefix(w, g, b, state);
      break;
    case Generator::Kind::kChat:
      expand_chat(w, g, b, state);
      break;
    case Generator::Kind::kRandom:
      expand_random(g, b, state);
      break;
  }
}

void expand_trace(const TraceWorkload& t, Builder& b, const std::string& file,
                  const std::string& scenario_dir, int vocab) {
  const std::string path = locate_trace(t.path, scenario_dir, file + ": " + t.at + ".mooncake");
  const MooncakeTrace trace = load_mooncake_trace(path);
  const auto size = static_cast<std::int64_t>(trace.requests.size());
  const std::int64_t count = t.count.value_or(size - t.first);
  if (t.first >= size || t.first + count > size) {
    fail_expected(file + ": " + t.at + (t.count ? ".count" : ".first"),
                  "a slice inside the trace's " + std::to_string(size) + " requests",
                  "first " + std::to_string(t.first) + ", count " + std::to_string(count));
  }
  const double t0 = trace.requests[static_cast<std::size_t>(t.first)].timestamp_ms;
  for (std::int64_t i = t.first; i < t.first + count; ++i) {
    const MooncakeRequest& m = trace.requests[static_cast<std::size_t>(i)];
    const std::string line = path + ":" + std::to_string(m.line);
    if (m.output_length < 1 || m.output_length > (1 << 30)) {
      fail_expected(line + ": output_length", "an integer in [1, 2^30] for the Simulator",
                    std::to_string(m.output_length));
    }
    if (m.input_length < 1) {
      fail_expected(line + ": input_length", "at least one prompt token",
                    std::to_string(m.input_length));
    }
    const double steps = (m.timestamp_ms - t0) / t.time_scale / t.step_ms;
    if (!(steps >= 0.0) || steps > (1 << 30)) {
      fail_expected(line + ": timestamp",
                    "a time at or after the slice's first request, within 2^30 steps",
                    std::to_string(m.timestamp_ms));
    }
    SimRequest q;
    q.arrival_step = static_cast<int>(std::floor(steps));
    q.max_new_tokens = static_cast<int>(m.output_length);
    mooncake_prompt_tokens(m, q.prompt_tokens, vocab);
    b.add(std::move(q), t.at);
  }
}

}  // namespace

int draw_length(const LengthDist& d, std::uint64_t& state) {
  switch (d.kind) {
    case LengthDist::Kind::kFixed:
      return d.value;
    case LengthDist::Kind::kUniform:
      return uniform_int(state, d.min, d.max);
    case LengthDist::Kind::kLognormal:
      for (int attempt = 0; attempt < 64; ++attempt) {
        // Box-Muller: one standard normal from two uniforms.
        const double z = std::sqrt(-2.0 * std::log(unit_open(state))) *
                         std::cos(6.283185307179586 * unit_open(state));
        const double x = std::round(d.median * std::exp(d.sigma * z));
        if (x >= d.min && x <= d.max) return static_cast<int>(x);
      }
      return static_cast<int>(std::round(d.median));  // 64 misses in a row: the median
  }
  return d.value;
}

std::string locate_trace(const std::string& path, const std::string& scenario_dir,
                         const std::string& where) {
  std::vector<fs::path> candidates;
  if (fs::path(path).is_absolute()) {
    candidates.emplace_back(path);
  } else {
    candidates.push_back(fs::path(scenario_dir.empty() ? "." : scenario_dir) / path);
    if (const char* env = std::getenv("KVSCOPE_TRACES"); env != nullptr && *env != '\0') {
      candidates.push_back(fs::path(env) / path);
    }
    candidates.push_back(fs::path(KVSCOPE_SOURCE_DIR).parent_path() / "shared" / "traces" / path);
  }
  std::string tried;
  for (const fs::path& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) return c.lexically_normal().string();
    tried += (tried.empty() ? "" : ", ") + c.lexically_normal().string();
  }
  fail_expected(where, "a trace file (looked at " + tried + "; set KVSCOPE_TRACES to its folder)",
                "\"" + path + "\"");
}

std::vector<SimRequest> expand_workload(const Workload& w, const std::string& file,
                                        const std::string& scenario_dir, int vocab_size,
                                        const Tokenizer* tokenizer) {
  Builder b(file, vocab_size, tokenizer);
  expand_explicit(w, b, file, vocab_size);
  for (const Generator& g : w.generators) expand_generator(w, g, b);
  if (w.trace) expand_trace(*w.trace, b, file, scenario_dir, vocab_size);
  return b.take();
}

}  // namespace kvscope
