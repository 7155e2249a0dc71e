// Minimal scenario parsing with nlohmann::json: strict keys, typed values, precise errors.
#include "engine/sched/scenario_min.h"

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/common/error.h"

namespace kvscope {
namespace {

using json = nlohmann::json;

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

class Ctx {
 public:
  explicit Ctx(std::string file) : file_(std::move(file)) {}
  [[noreturn]] void fail(const std::string& at, const std::string& expected,
                         const json& got) const {
    fail_expected(file_ + ": " + at, expected, shown(got));
  }
  void only_keys(const json& obj, const std::string& at, const std::set<std::string>& keys) const {
    if (!obj.is_object()) fail(at.empty() ? "(top level)" : at, "an object", obj);
    for (const auto& [k, v] : obj.items()) {
      if (keys.count(k) == 0) {
        std::string names;
        for (const auto& n : keys) names += (names.empty() ? "" : ", ") + n;
        fail_expected(file_ + ": " + (at.empty() ? "" : at + ".") + k, "one of the keys " + names,
                      "unknown key \"" + k + "\"");
      }
    }
  }
  std::int64_t integer(const json& v, const std::string& at, std::int64_t lo,
                       std::int64_t hi) const {
    if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi) {
      fail(at, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", v);
    }
    return v.get<std::int64_t>();
  }
  std::string string(const json& v, const std::string& at) const {
    if (!v.is_string()) fail(at, "a string", v);
    return v.get<std::string>();
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

constexpr std::int64_t kIntMax = 1 << 30;

void parse_cache(const Ctx& c, const json& j, MinScenario& s) {
  c.only_keys(
      j, "cache",
      {"block_size", "num_blocks", "pool_bytes", "allocator", "preemption", "victim", "host_blocks",
       "max_seq_len", "kv_dtype", "prefix_caching", "prefix_index", "cached_block_eviction"});
  SimConfig& cfg = s.config;
  if (j.contains("block_size"))
    cfg.block_size = static_cast<int>(c.integer(j["block_size"], "cache.block_size", 1, 4096));
  if (j.contains("num_blocks") == j.contains("pool_bytes")) {
    fail_expected(c.file() + ": cache", "exactly one of \"num_blocks\" or \"pool_bytes\"",
                  j.contains("num_blocks") ? "both" : "neither");
  }
  if (j.contains("num_blocks"))
    cfg.num_blocks =
        static_cast<int>(c.integer(j["num_blocks"], "cache.num_blocks", 1, 50'000'000));
  if (j.contains("pool_bytes")) {
    s.pool_bytes = c.integer(j["pool_bytes"], "cache.pool_bytes", 1, std::int64_t{1} << 50);
    cfg.num_blocks = 0;
  }
  if (j.contains("allocator"))
    cfg.allocator = parse_allocator(c.string(j["allocator"], "cache.allocator"),
                                    c.file() + ": cache.allocator");
  if (j.contains("preemption"))
    cfg.preemption = parse_preemption(c.string(j["preemption"], "cache.preemption"),
                                      c.file() + ": cache.preemption");
  if (j.contains("victim"))
    cfg.victim = parse_victim(c.string(j["victim"], "cache.victim"), c.file() + ": cache.victim");
  if (j.contains("host_blocks"))
    cfg.host_blocks =
        static_cast<int>(c.integer(j["host_blocks"], "cache.host_blocks", 0, 50'000'000));
  if (j.contains("max_seq_len"))
    cfg.max_seq_len =
        static_cast<int>(c.integer(j["max_seq_len"], "cache.max_seq_len", 0, kIntMax));
  if (j.contains("prefix_caching")) {
    if (!j["prefix_caching"].is_boolean())
      c.fail("cache.prefix_caching", "true or false", j["prefix_caching"]);
    cfg.prefix_caching = j["prefix_caching"].get<bool>();
  }
  if (j.contains("prefix_index")) {
    const std::string name = c.string(j["prefix_index"], "cache.prefix_index");
    const auto kind = parse_index_kind(name);
    if (!kind) c.fail("cache.prefix_index", "\"hash\" or \"radix\"", j["prefix_index"]);
    cfg.prefix_index = *kind;
  }
  if (j.contains("cached_block_eviction")) {
    const std::string name = c.string(j["cached_block_eviction"], "cache.cached_block_eviction");
    const auto kind = parse_eviction_policy(name);
    if (!kind)
      c.fail("cache.cached_block_eviction", "\"lru\", \"lfu\" or \"fifo\"",
             j["cached_block_eviction"]);
    cfg.cached_block_eviction = *kind;
  }
  if ((j.contains("prefix_index") || j.contains("cached_block_eviction")) && !cfg.prefix_caching) {
    fail_expected(c.file() + ": cache.prefix_index", "\"prefix_caching\": true beside it",
                  "prefix caching off");
  }
  if (cfg.prefix_caching && cfg.allocator != AllocatorKind::kPaged) {
    fail_expected(c.file() + ": cache.prefix_caching",
                  "the paged allocator (contiguous regions are private to one request)",
                  "allocator \"contiguous\"");
  }
  if (j.contains("kv_dtype")) {
    cfg.k_format = cfg.v_format =
        parse_kv_format(c.string(j["kv_dtype"], "cache.kv_dtype"), c.file() + ": cache.kv_dtype");
  }
}

MinScenarioRequest parse_request(const Ctx& c, const json& j, const std::string& at) {
  c.only_keys(j, at,
              {"arrival_step", "prompt", "prompt_tokens", "max_new_tokens", "priority", "n"});
  MinScenarioRequest r;
  if (j.contains("arrival_step"))
    r.arrival_step =
        static_cast<int>(c.integer(j["arrival_step"], at + ".arrival_step", 0, kIntMax));
  if (j.contains("prompt") == j.contains("prompt_tokens")) {
    fail_expected(c.file() + ": " + at,
                  "exactly one of \"prompt\" (text) or \"prompt_tokens\" (ids)",
                  j.contains("prompt") ? "both" : "neither");
  }
  if (j.contains("prompt")) r.prompt = c.string(j["prompt"], at + ".prompt");
  if (j.contains("prompt_tokens")) {
    const json& toks = j["prompt_tokens"];
    if (!toks.is_array() || toks.empty())
      c.fail(at + ".prompt_tokens", "a non-empty array of token ids", toks);
    for (std::size_t i = 0; i < toks.size(); ++i) {
      r.prompt_tokens.push_back(static_cast<int>(
          c.integer(toks[i], at + ".prompt_tokens[" + std::to_string(i) + "]", 0, kIntMax)));
    }
  }
  if (!j.contains("max_new_tokens"))
    fail_expected(c.file() + ": " + at + ".max_new_tokens", "an integer >= 1", "nothing (missing)");
  r.max_new_tokens =
      static_cast<int>(c.integer(j["max_new_tokens"], at + ".max_new_tokens", 1, kIntMax));
  if (j.contains("priority"))
    r.priority = static_cast<int>(c.integer(j["priority"], at + ".priority", -kIntMax, kIntMax));
  if (j.contains("n")) r.n_samples = static_cast<int>(c.integer(j["n"], at + ".n", 1, 256));
  return r;
}

}  // namespace

MinScenario parse_min_scenario_text(const std::string& text, const std::string& path) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    fail_expected(path + ": byte " + std::to_string(e.byte), "valid JSON", std::string(e.what()));
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number too large for a double
    fail_expected(path, "valid JSON", std::string(e.what()));
  }
  Ctx c(path);
  c.only_keys(doc, "", {"title", "model", "cache", "scheduler", "sampler", "requests"});
  MinScenario s;
  s.path = path;
  if (doc.contains("title")) s.config.title = c.string(doc["title"], "title");
  if (doc.contains("model")) s.model = c.string(doc["model"], "model");
  if (!doc.contains("cache")) fail_expected(path + ": cache", "an object", "nothing (missing)");
  parse_cache(c, doc["cache"], s);
  if (doc.contains("scheduler")) {
    const json& j = doc["scheduler"];
    c.only_keys(j, "scheduler", {"max_tokens_per_step", "max_running"});
    if (j.contains("max_tokens_per_step")) {
      s.config.max_tokens_per_step = static_cast<int>(
          c.integer(j["max_tokens_per_step"], "scheduler.max_tokens_per_step", 0, kIntMax));
    }
    if (j.contains("max_running"))
      s.config.max_running =
          static_cast<int>(c.integer(j["max_running"], "scheduler.max_running", 0, kIntMax));
  }
  if (doc.contains("sampler")) {
    const json& j = doc["sampler"];
    c.only_keys(j, "sampler", {"temperature", "top_p", "seed"});
    SamplerConfig& sc = s.config.sampler;
    for (const char* key : {"temperature", "top_p"}) {
      if (!j.contains(key)) continue;
      const json& v = j[key];
      const double hi = std::string(key) == "top_p" ? 1.0 : 100.0;
      if (!v.is_number() || v.get<double>() < 0.0 || v.get<double>() > hi)
        c.fail(std::string("sampler.") + key, "a number in [0, " + shown(json(hi)) + "]", v);
      (std::string(key) == "top_p" ? sc.top_p : sc.temperature) = v.get<float>();
    }
    if (j.contains("seed"))
      sc.seed = static_cast<std::uint64_t>(c.integer(j["seed"], "sampler.seed", 0, kIntMax));
  }
  if (!doc.contains("requests") || !doc["requests"].is_array() || doc["requests"].empty()) {
    c.fail("requests", "a non-empty array of requests",
           doc.contains("requests") ? doc["requests"] : json());
  }
  for (std::size_t i = 0; i < doc["requests"].size(); ++i) {
    s.requests.push_back(
        parse_request(c, doc["requests"][i], "requests[" + std::to_string(i) + "]"));
  }
  return s;
}

MinScenario parse_min_scenario(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open scenario file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_min_scenario_text(ss.str(), path);
}

SimConfig resolve_sim_config(const MinScenario& s, const ModelConfig& shape) {
  SimConfig cfg = s.config;
  if (s.pool_bytes) {
    const KvLayout layout{shape.n_layers, shape.n_kv_heads, shape.head_dim(), cfg.block_size, 1,
                          cfg.k_format,   cfg.v_format};
    const auto blocks =
        static_cast<std::int64_t>(*s.pool_bytes / static_cast<std::int64_t>(layout.block_bytes()));
    if (blocks < 1) {
      fail_expected(s.path + ": cache.pool_bytes",
                    "at least one block (" + std::to_string(layout.block_bytes()) + " bytes)",
                    std::to_string(*s.pool_bytes));
    }
    cfg.num_blocks = static_cast<int>(std::min<std::int64_t>(blocks, 50'000'000));
  }
  if (cfg.max_seq_len > shape.seq_len) {
    fail_expected(s.path + ": cache.max_seq_len",
                  "at most the model context " + std::to_string(shape.seq_len),
                  std::to_string(cfg.max_seq_len));
  }
  return cfg;
}

std::vector<SimRequest> resolve_requests(const MinScenario& s, const Tokenizer* tokenizer) {
  std::vector<SimRequest> out;
  for (std::size_t i = 0; i < s.requests.size(); ++i) {
    const MinScenarioRequest& r = s.requests[i];
    SimRequest q;
    q.arrival_step = r.arrival_step;
    q.max_new_tokens = r.max_new_tokens;
    q.priority = r.priority;
    q.n_samples = r.n_samples;
    if (r.prompt) {
      if (tokenizer == nullptr) {
        fail_expected(s.path + ": requests[" + std::to_string(i) + "].prompt",
                      "prompt_tokens (this model has no tokenizer)", "text");
      }
      q.prompt_tokens = tokenizer->encode(*r.prompt, /*bos=*/true, /*eos=*/false);
    } else {
      q.prompt_tokens = r.prompt_tokens;
    }
    out.push_back(std::move(q));
  }
  return out;
}

}  // namespace kvscope
