// The scenario's workload section: named prefixes, explicit requests, generators, a trace slice.
#include <string>

#include "engine/common/error.h"
#include "engine/scenario/scenario_internal.h"

namespace kvscope::scenario_detail {

using json = Json;

namespace {

constexpr int kMaxInt = 1 << 30;
constexpr int kMaxLength = 1 << 20;    // tokens in one drawn length
constexpr int kMaxGenerated = 100000;  // requests one generator may make

LengthDist parse_length(const JsonReader& r, const json& j, const std::string& at) {
  LengthDist d;
  if (j.is_number()) {
    d.value = r.int32(j, at, 1, kMaxLength);
    return d;
  }
  if (!j.is_object()) r.fail(at, "a token count or {\"dist\": ...}", j);
  r.require(j, at, "dist", "\"fixed\", \"uniform\" or \"lognormal\"");
  const std::string dist = r.string(j["dist"], json_path(at, "dist"));
  if (dist == "fixed") {
    r.only_keys(j, at, {"dist", "value"});
    r.require(j, at, "value", "an integer >= 1");
    d.value = r.int32(j["value"], json_path(at, "value"), 1, kMaxLength);
    return d;
  }
  if (dist != "uniform" && dist != "lognormal") {
    r.fail(json_path(at, "dist"), "\"fixed\", \"uniform\" or \"lognormal\"", j["dist"]);
  }
  const bool logn = dist == "lognormal";
  if (logn)
    r.only_keys(j, at, {"dist", "median", "sigma", "min", "max"});
  else
    r.only_keys(j, at, {"dist", "min", "max"});
  r.require(j, at, "min", "an integer >= 1");
  r.require(j, at, "max", "an integer >= min");
  d.kind = logn ? LengthDist::Kind::kLognormal : LengthDist::Kind::kUniform;
  d.min = r.int32(j["min"], json_path(at, "min"), 1, kMaxLength);
  d.max = r.int32(j["max"], json_path(at, "max"), d.min, kMaxLength);
  if (logn) {
    r.require(j, at, "median", "a number in [min, max]");
    r.require(j, at, "sigma", "a number in [0, 4]");
    d.median = r.number(j["median"], json_path(at, "median"), d.min, d.max);
    d.sigma = r.number(j["sigma"], json_path(at, "sigma"), 0.0, 4.0);
  }
  return d;
}

Arrivals parse_arrivals(const JsonReader& r, const json& j, const std::string& at) {
  r.only_keys(j, at, {"start", "every"});
  Arrivals a;
  if (j.contains("start")) a.start = r.int32(j["start"], json_path(at, "start"), 0, kMaxInt);
  if (j.contains("every")) a.every = r.int32(j["every"], json_path(at, "every"), 0, 1 << 20);
  return a;
}

std::string prefix_name(const JsonReader& r, const json& v, const std::string& at,
                        const Workload& w) {
  const std::string name = r.string(v, at, true);
  if (w.prefixes.count(name) == 0) {
    std::vector<std::string> names;
    for (const auto& [n, text] : w.prefixes) names.push_back(n);
    const std::string near = did_you_mean(name, names);
    r.fail_text(
        at,
        "a name in workload.prefixes" + (near.empty() ? "" : " (did you mean \"" + near + "\"?)"),
        shown_json(v));
  }
  return name;
}

ExplicitRequest parse_request(const JsonReader& r, const json& j, const std::string& at,
                              const Workload& w) {
  r.only_keys(
      j, at,
      {"arrival_step", "prompt", "prompt_tokens", "max_new_tokens", "priority", "n", "chunks"});
  ExplicitRequest q;
  q.at = at;
  if (j.contains("arrival_step")) {
    q.arrival_step = r.int32(j["arrival_step"], json_path(at, "arrival_step"), 0, kMaxInt);
  }
  if (j.contains("prompt") == j.contains("prompt_tokens")) {
    r.fail_text(at,
                "exactly one of \"prompt\" (text or {\"prefix\", \"suffix\"}) or "
                "\"prompt_tokens\" (ids)",
                j.contains("prompt") ? "both" : "neither");
  }
  if (j.contains("prompt")) {
    const json& p = j["prompt"];
    const std::string pat = json_path(at, "prompt");
    if (p.is_object()) {
      r.only_keys(p, pat, {"prefix", "suffix"});
      r.require(p, pat, "prefix", "the name of a shared prefix in workload.prefixes");
      q.prompt.prefix = prefix_name(r, p["prefix"], json_path(pat, "prefix"), w);
      if (p.contains("suffix")) q.prompt.suffix = r.string(p["suffix"], json_path(pat, "suffix"));
    } else {
      if (!p.is_string()) r.fail(pat, "text or {\"prefix\": name, \"suffix\": text}", p);
      q.prompt.text = p.get<std::string>();
    }
  } else {
    const json& toks = j["prompt_tokens"];
    const std::string tat = json_path(at, "prompt_tokens");
    if (!toks.is_array() || toks.empty()) r.fail(tat, "a non-empty array of token ids", toks);
    for (std::size_t i = 0; i < toks.size(); ++i) {
      q.prompt.tokens.push_back(r.int32(toks[i], json_path(tat, i), 0, kMaxInt));
    }
  }
  r.require(j, at, "max_new_tokens", "an integer >= 1");
  q.max_new_tokens = r.int32(j["max_new_tokens"], json_path(at, "max_new_tokens"), 1, kMaxInt);
  if (j.contains("priority")) {
    q.priority = r.int32(j["priority"], json_path(at, "priority"), -kMaxInt, kMaxInt);
  }
  if (j.contains("n")) q.n_samples = r.int32(j["n"], json_path(at, "n"), 1, 256);
  if (j.contains("chunks")) {
    const json& c = j["chunks"];
    const std::string cat = json_path(at, "chunks");
    if (!c.is_array() || c.empty()) r.fail(cat, "a non-empty array of texts (documents)", c);
    if (!q.prompt.text) {
      r.fail_text(cat, "a text \"prompt\" after the chunks (the question)",
                  j.contains("prompt_tokens") ? "prompt_tokens" : "a shared-prefix prompt");
    }
    for (std::size_t i = 0; i < c.size(); ++i)
      q.chunks.push_back(r.string(c[i], json_path(cat, i)));
  }
  return q;
}

// "script": [[{"user": text, "reply": text}, ...], ...]: conversations of turns; every turn but a
// conversation's last needs its reply (the next turn's history holds it).
std::vector<std::vector<ChatTurn>> parse_script(const JsonReader& r, const json& j,
                                                const std::string& at) {
  if (!j.is_array() || j.empty()) r.fail(at, "a non-empty array of conversations", j);
  std::vector<std::vector<ChatTurn>> script;
  std::size_t turns = 0;
  for (std::size_t c = 0; c < j.size(); ++c) {
    const std::string conv_at = json_path(at, c);
    const json& conv = j[c];
    if (!conv.is_array() || conv.empty()) {
      r.fail(conv_at, "a non-empty array of turns {\"user\": text, \"reply\": text}", conv);
    }
    std::vector<ChatTurn> turns_of;
    for (std::size_t t = 0; t < conv.size(); ++t) {
      const std::string turn_at = json_path(conv_at, t);
      const json& turn = conv[t];
      if (!turn.is_object()) r.fail(turn_at, "an object {\"user\": text, \"reply\": text}", turn);
      r.only_keys(turn, turn_at, {"user", "reply"});
      r.require(turn, turn_at, "user", "the user's message (text)");
      ChatTurn ct;
      ct.user = r.string(turn["user"], json_path(turn_at, "user"));
      if (turn.contains("reply")) {
        ct.reply = r.string(turn["reply"], json_path(turn_at, "reply"));
      } else if (t + 1 < conv.size()) {
        r.require(turn, turn_at, "reply", "the reply the next turn's history holds (text)");
      }
      turns_of.push_back(std::move(ct));
    }
    turns += turns_of.size();
    script.push_back(std::move(turns_of));
  }
  if (turns > static_cast<std::size_t>(kMaxGenerated)) {
    r.fail_text(at, "at most " + std::to_string(kMaxGenerated) + " turns in all",
                std::to_string(turns));
  }
  return script;
}

// The shared_prefix generator's keys: its prefix and exactly one of suffix texts or random ids.
void parse_shared_prefix_keys(const JsonReader& r, const json& j, const std::string& at,
                              const Workload& w, Generator& g) {
  auto path = [&](const char* key) { return json_path(at, key); };
  r.require(j, at, "prefix", "the name of a shared prefix in workload.prefixes");
  g.prefix = prefix_name(r, j["prefix"], path("prefix"), w);
  if (j.contains("suffixes") == j.contains("suffix_tokens")) {
    r.fail_text(at, "exactly one of \"suffixes\" (texts) or \"suffix_tokens\" (random ids)",
                j.contains("suffixes") ? "both" : "neither");
  }
  if (j.contains("suffixes")) {
    const json& s = j["suffixes"];
    if (!s.is_array() || s.empty()) r.fail(path("suffixes"), "a non-empty array of texts", s);
    for (std::size_t i = 0; i < s.size(); ++i) {
      g.suffixes.push_back(r.string(s[i], json_path(path("suffixes"), i)));
    }
  } else {
    g.suffix_tokens = parse_length(r, j["suffix_tokens"], path("suffix_tokens"));
  }
}

// The chat generator's keys: a script of texts, or conversations x turns of random ids.
void parse_chat_keys(const JsonReader& r, const json& j, const std::string& at, const Workload& w,
                     Generator& g) {
  auto path = [&](const char* key) { return json_path(at, key); };
  if (j.contains("prefix")) g.prefix = prefix_name(r, j["prefix"], path("prefix"), w);
  if (j.contains("turn_gap")) g.turn_gap = r.int32(j["turn_gap"], path("turn_gap"), 0, 1 << 20);
  if (j.contains("script")) {
    for (const char* key : {"conversations", "turns", "user_tokens"}) {
      if (j.contains(key)) {
        r.fail_text(path(key),
                    "no \"" + std::string(key) + "\" beside \"script\" (the script sets it)",
                    "both");
      }
    }
    g.script = parse_script(r, j["script"], path("script"));
    g.conversations = static_cast<int>(g.script.size());
    return;
  }
  r.require(j, at, "conversations", "an integer >= 1 (or a \"script\" of texts instead)");
  r.require(j, at, "turns", "an integer >= 1");
  r.require(j, at, "user_tokens", "a token count or {\"dist\": ...}");
  g.conversations = r.int32(j["conversations"], path("conversations"), 1, kMaxGenerated);
  g.turns = r.int32(j["turns"], path("turns"), 1, 1000);
  if (static_cast<std::int64_t>(g.conversations) * g.turns > kMaxGenerated) {
    r.fail_text(path("turns"), "conversations x turns at most " + std::to_string(kMaxGenerated),
                std::to_string(static_cast<std::int64_t>(g.conversations) * g.turns));
  }
  g.user_tokens = parse_length(r, j["user_tokens"], path("user_tokens"));
}

Generator parse_generator(const JsonReader& r, const json& j, const std::string& at,
                          const Workload& w) {
  if (!j.is_object()) r.fail(at, "an object", j);
  r.require(j, at, "type", "\"shared_prefix\", \"chat\" or \"random\"");
  const std::string type = r.string(j["type"], json_path(at, "type"));
  Generator g;
  g.at = at;
  std::vector<std::string> keys = {"type", "seed", "arrival", "max_new_tokens"};
  if (type == "shared_prefix") {
    g.kind = Generator::Kind::kSharedPrefix;
    keys.insert(keys.end(), {"prefix", "count", "suffixes", "suffix_tokens", "n"});
  } else if (type == "chat") {
    g.kind = Generator::Kind::kChat;
    keys.insert(keys.end(),
                {"prefix", "conversations", "turns", "user_tokens", "turn_gap", "script"});
  } else if (type == "random") {
    g.kind = Generator::Kind::kRandom;
    keys.insert(keys.end(), {"count", "prompt_tokens", "n"});
  } else {
    r.fail(json_path(at, "type"), "\"shared_prefix\", \"chat\" or \"random\"", j["type"]);
  }
  r.only_keys(j, at, keys);
  auto path = [&](const char* key) { return json_path(at, key); };
  if (j.contains("seed")) {
    g.seed = static_cast<std::uint64_t>(r.integer(j["seed"], path("seed"), 0, INT64_MAX));
  }
  if (j.contains("arrival")) g.arrival = parse_arrivals(r, j["arrival"], path("arrival"));
  r.require(j, at, "max_new_tokens", "a token count or {\"dist\": ...}");
  g.max_new_tokens = parse_length(r, j["max_new_tokens"], path("max_new_tokens"));
  if (j.contains("n")) g.n_samples = r.int32(j["n"], path("n"), 1, 256);
  if (g.kind != Generator::Kind::kChat) {
    r.require(j, at, "count", "an integer >= 1");
    g.count = r.int32(j["count"], path("count"), 1, kMaxGenerated);
  }
  switch (g.kind) {
    case Generator::Kind::kSharedPrefix:
      parse_shared_prefix_keys(r, j, at, w, g);
      break;
    case Generator::Kind::kChat:
      parse_chat_keys(r, j, at, w, g);
      break;
    case Generator::Kind::kRandom:
      r.require(j, at, "prompt_tokens", "a token count or {\"dist\": ...}");
      g.prompt_tokens = parse_length(r, j["prompt_tokens"], path("prompt_tokens"));
      break;
  }
  return g;
}

TraceWorkload parse_trace(const JsonReader& r, const json& j, const std::string& at) {
  r.only_keys(j, at, {"mooncake", "first", "count", "time_scale", "step_ms"});
  r.require(j, at, "mooncake", "the path of a Mooncake JSONL trace");
  TraceWorkload t;
  t.at = at;
  t.path = r.string(j["mooncake"], json_path(at, "mooncake"), true);
  if (j.contains("first")) t.first = r.integer(j["first"], json_path(at, "first"), 0, kMaxInt);
  if (j.contains("count")) t.count = r.integer(j["count"], json_path(at, "count"), 1, kMaxInt);
  if (j.contains("time_scale")) {
    t.time_scale = r.number(j["time_scale"], json_path(at, "time_scale"), 0.0, 1e6, true);
  }
  if (j.contains("step_ms")) {
    t.step_ms = r.number(j["step_ms"], json_path(at, "step_ms"), 0.0, 1e9, true);
  }
  return t;
}

}  // namespace

Workload parse_workload(const JsonReader& r, const json& j) {
  const std::string at = "workload";
  r.only_keys(j, at, {"prefixes", "requests", "generators", "trace"});
  Workload w;
  if (j.contains("prefixes")) {
    const json& p = j["prefixes"];
    if (!p.is_object()) r.fail("workload.prefixes", "an object of name: text", p);
    for (const auto& [name, text] : p.items()) {
      w.prefixes[name] = r.string(text, "workload.prefixes." + name, true);
    }
  }
  if (j.contains("requests")) {
    const json& q = j["requests"];
    if (!q.is_array() || q.empty()) r.fail("workload.requests", "a non-empty array of requests", q);
    for (std::size_t i = 0; i < q.size(); ++i) {
      w.requests.push_back(parse_request(r, q[i], json_path("workload.requests", i), w));
    }
  }
  if (j.contains("generators")) {
    const json& g = j["generators"];
    if (!g.is_array() || g.empty()) {
      r.fail("workload.generators", "a non-empty array of generators", g);
    }
    for (std::size_t i = 0; i < g.size(); ++i) {
      w.generators.push_back(parse_generator(r, g[i], json_path("workload.generators", i), w));
    }
  }
  if (j.contains("trace")) w.trace = parse_trace(r, j["trace"], "workload.trace");
  if (w.requests.empty() && w.generators.empty() && !w.trace) {
    r.fail_text(at, "at least one of \"requests\", \"generators\" or \"trace\"", "none");
  }
  return w;
}

}  // namespace kvscope::scenario_detail
