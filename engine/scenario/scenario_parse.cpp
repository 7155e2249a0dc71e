// The scenario file's top level: version, texts, model, cache, scheduler, sampler, workload,
// steps, captions and compare variants.
#include <algorithm>
#include <utility>

#include "engine/common/error.h"
#include "engine/common/text_lines.h"
#include "engine/model/synthetic.h"
#include "engine/scenario/scenario_internal.h"

namespace kvscope {

using json = Json;
using scenario_detail::apply_cache;

std::vector<std::string> scenario_top_level_keys() {
  return {"$schema",   "format_version", "title",    "description", "model",    "cache",
          "scheduler", "sampler",        "workload", "steps",       "captions", "compare"};
}

std::vector<std::string> scenario_cache_keys() {
  return {"block_size",       "num_blocks",
          "pool_bytes",       "pool_tokens",
          "allocator",        "max_seq_len",
          "kv_dtype",         "k_dtype",
          "v_dtype",          "prefix_caching",
          "prefix_index",     "cached_block_eviction",
          "token_eviction",   "mla",
          "preemption",       "victim",
          "host_blocks",      "tiers",
          "tier_prefetch",    "tier_write",
          "sparse_attention", "blend",
          "disaggregation",   "layer_groups"};
}

namespace {

constexpr int kMaxInt = 1 << 30;

ScenarioModel parse_model(const JsonReader& r, const json& j) {
  ScenarioModel m;
  auto check_synthetic = [&](const std::string& arg, const std::string& at) {
    if (!is_synthetic_model_arg(arg)) return;
    try {
      parse_synthetic_spec(arg.substr(10));
    } catch (const Error& e) {
      throw Error(r.file() + ": " + at + " (" + e.where() + ")", e.detail());
    }
  };
  if (j.is_string()) {
    m.arg = r.string(j, "model", true);
    check_synthetic(m.arg, "model");
    return m;
  }
  r.only_keys(j, "model", {"path", "synthetic", "bookkeeping"});
  if (j.contains("path") && j.contains("synthetic")) {
    r.fail_text("model", "at most one of \"path\" or \"synthetic\"", "both");
  }
  if (j.contains("path")) m.arg = r.string(j["path"], "model.path", true);
  if (j.contains("synthetic")) {
    m.arg = "synthetic:" + r.string(j["synthetic"], "model.synthetic", true);
    check_synthetic(m.arg, "model.synthetic");
  }
  if (j.contains("bookkeeping")) m.bookkeeping = r.boolean(j["bookkeeping"], "model.bookkeeping");
  return m;
}

void parse_sampler(const JsonReader& r, const json& j, SamplerConfig& sc) {
  r.only_keys(j, "sampler", {"temperature", "top_p", "seed"});
  if (j.contains("temperature")) {
    sc.temperature = static_cast<float>(r.number(j["temperature"], "sampler.temperature", 0, 100));
  }
  if (j.contains("top_p"))
    sc.top_p = static_cast<float>(r.number(j["top_p"], "sampler.top_p", 0, 1));
  if (j.contains("seed")) {
    sc.seed = static_cast<std::uint64_t>(r.integer(j["seed"], "sampler.seed", 0, INT64_MAX));
  }
}

CaptionView parse_caption_view(const JsonReader& r, const json& j, const std::string& at) {
  if (!j.is_object()) {
    r.fail(at,
           "an object (workspace, layer, head, sink_grid, pause, variant, compare, compare_tab)",
           j);
  }
  r.only_keys(
      j, at,
      {"workspace", "layer", "head", "sink_grid", "pause", "variant", "compare", "compare_tab"});
  CaptionView v;
  if (j.contains("workspace")) {
    const std::string w = r.string(j["workspace"], at + ".workspace", true);
    if (w != "pool" && w != "prefix" && w != "attention" && w != "compare" && w != "live" &&
        w != "kernel" && w != "serving")
      r.fail_text(at + ".workspace", "pool, prefix, attention, compare, live, kernel or serving",
                  "\"" + w + "\"");
    v.workspace = w;
  }
  if (j.contains("layer")) v.layer = r.int32(j["layer"], at + ".layer", 0, kMaxInt);
  if (j.contains("head")) v.head = r.int32(j["head"], at + ".head", 0, kMaxInt);
  if (j.contains("sink_grid")) v.sink_grid = r.boolean(j["sink_grid"], at + ".sink_grid");
  if (j.contains("pause")) v.pause = r.boolean(j["pause"], at + ".pause");
  // Variant names are checked against `compare` once the whole file is read
  // (check_caption_variants).
  if (j.contains("variant")) v.variant = r.string(j["variant"], at + ".variant", true);
  if (j.contains("compare")) v.compare = r.string(j["compare"], at + ".compare", true);
  if (j.contains("compare_tab")) {
    const std::string t = r.string(j["compare_tab"], at + ".compare_tab", true);
    if (t != "memory" && t != "text")
      r.fail_text(at + ".compare_tab", "memory or text", "\"" + t + "\"");
    v.compare_tab = t;
  }
  return v;
}

std::vector<Caption> parse_captions(const JsonReader& r, const json& j) {
  if (!j.is_array()) r.fail("captions", "an array of {\"step\", \"caption\"}", j);
  std::vector<Caption> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string at = json_path("captions", i);
    r.only_keys(j[i], at, {"step", "caption", "view"});
    r.require(j[i], at, "step", "an integer >= 0");
    r.require(j[i], at, "caption", "a non-empty string");
    Caption c;
    c.step = r.int32(j[i]["step"], json_path(at, "step"), 0, kMaxInt);
    c.text = r.string(j[i]["caption"], json_path(at, "caption"), true);
    if (j[i].contains("view")) c.view = parse_caption_view(r, j[i]["view"], json_path(at, "view"));
    if (!out.empty() && c.step < out.back().step) {
      r.fail_text(json_path(at, "step"),
                  "steps in ascending order (at least " + std::to_string(out.back().step) + ")",
                  std::to_string(c.step));
    }
    out.push_back(std::move(c));
  }
  return out;
}

bool is_variant_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

const CacheSettings& Scenario::variant(const std::string& name) const {
  if (name.empty() || name == "base") return cache;
  for (const auto& [n, c] : compare) {
    if (n == name) return c;
  }
  std::string names;
  for (const auto& n : variant_names()) names += (names.empty() ? "" : ", ") + n;
  const std::string near = did_you_mean(name, variant_names());
  fail_expected(path + ": compare", "a variant name (" + names + ")",
                "\"" + name + "\"" + (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
}

std::vector<std::string> Scenario::variant_names() const {
  std::vector<std::string> out = {"base"};
  for (const auto& [n, c] : compare) out.push_back(n);
  return out;
}

namespace {

// A caption's view names variants of this file: "base" or one of `compare`'s.
void check_caption_variants(const JsonReader& r, const Scenario& s) {
  const std::vector<std::string> names = s.variant_names();
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  for (std::size_t i = 0; i < s.captions.size(); ++i) {
    const CaptionView& v = s.captions[i].view;
    for (const auto& [key, value] : {std::pair{"variant", v.variant}, {"compare", v.compare}}) {
      if (!value || std::find(names.begin(), names.end(), *value) != names.end()) continue;
      const std::string near = did_you_mean(*value, names);
      r.fail_text(json_path(json_path(json_path("captions", i), "view"), key),
                  "a variant of this scenario (" + list + ")",
                  "\"" + *value + "\"" + (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
    }
  }
}

}  // namespace

Scenario parse_scenario_text(const std::string& text, const std::string& path) {
  const json doc = parse_json_document(text, path);
  const JsonReader r(path);
  r.only_keys(doc, "", scenario_top_level_keys());
  Scenario s;
  s.path = path;
  r.require(doc, "", "format_version", "1");
  s.format_version = r.int32(doc["format_version"], "format_version", kScenarioFormatVersion,
                             kScenarioFormatVersion);
  if (doc.contains("$schema")) r.string(doc["$schema"], "$schema");  // for editors only
  if (doc.contains("title")) s.title = r.string(doc["title"], "title");
  if (doc.contains("description")) s.description = r.string(doc["description"], "description");
  if (doc.contains("model")) s.model = parse_model(r, doc["model"]);
  r.require(doc, "", "cache", "an object");
  apply_cache(r, doc["cache"], "cache", /*is_base=*/true, s.cache);
  if (doc.contains("scheduler")) {
    const json& j = doc["scheduler"];
    r.only_keys(j, "scheduler", {"max_tokens_per_step", "max_running"});
    if (j.contains("max_tokens_per_step")) {
      s.max_tokens_per_step =
          r.int32(j["max_tokens_per_step"], "scheduler.max_tokens_per_step", 0, kMaxInt);
    }
    if (j.contains("max_running")) {
      s.max_running = r.int32(j["max_running"], "scheduler.max_running", 0, kMaxInt);
    }
  }
  if (doc.contains("sampler")) parse_sampler(r, doc["sampler"], s.sampler);
  r.require(doc, "", "workload", "an object");
  s.workload = scenario_detail::parse_workload(r, doc["workload"]);
  if (doc.contains("steps")) s.steps = r.int32(doc["steps"], "steps", 1, kMaxInt);
  if (doc.contains("captions")) s.captions = parse_captions(r, doc["captions"]);
  if (doc.contains("compare")) {
    const json& j = doc["compare"];
    if (!j.is_object() || j.empty()) r.fail("compare", "an object of name: {cache overrides}", j);
    for (const auto& [name, overrides] : j.items()) {
      const std::string at = "compare." + name;
      if (!is_variant_name(name) || name == "base") {
        r.fail_text(at, "a variant name of letters, digits, '-', '_' or '.' other than \"base\"",
                    json(name).dump(-1, ' ', false, json::error_handler_t::replace));
      }
      CacheSettings c = s.cache;
      apply_cache(r, overrides, at, /*is_base=*/false, c);
      s.compare.emplace_back(name, std::move(c));
    }
  }
  check_caption_variants(r, s);
  return s;
}

Scenario parse_scenario(const std::string& path) {
  return parse_scenario_text(read_text_file(path, "cannot open scenario file"), path);
}

}  // namespace kvscope
