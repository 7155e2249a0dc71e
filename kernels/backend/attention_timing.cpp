// See attention_timing.h.
#include "kernels/backend/attention_timing.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "engine/common/error.h"
#include "engine/common/json_depth.h"

namespace kvscope {
namespace {

thread_local AttentionTiming* g_timing = nullptr;

constexpr int kFormatVersion = 1;

// The value of `key` in object `o`, which must be of `kind` (checked by `ok`).
template <typename Ok>
const nlohmann::json& field(const nlohmann::json& o, const std::string& key, const std::string& at,
                            const char* kind, Ok ok) {
  const auto it = o.find(key);
  if (it == o.end()) throw Error(at + "." + key, std::string("missing (expected ") + kind + ")");
  if (!ok(*it)) fail_expected(at + "." + key, kind, it->dump());
  return *it;
}
double number(const nlohmann::json& o, const std::string& key, const std::string& at) {
  const double v = field(o, key, at, "a number >= 0", [](const nlohmann::json& x) {
                     return x.is_number() && x.get<double>() >= 0.0;
                   }).get<double>();
  return v;
}
long integer(const nlohmann::json& o, const std::string& key, const std::string& at) {
  return field(o, key, at, "an integer >= 0",
               [](const nlohmann::json& x) { return x.is_number_integer() && x.get<long>() >= 0; })
      .get<long>();
}
int small_int(const nlohmann::json& o, const std::string& key, const std::string& at) {
  const long v = integer(o, key, at);
  if (v > 1L << 30) fail_expected(at + "." + key, "an integer up to 2^30", std::to_string(v));
  return static_cast<int>(v);
}
std::string text(const nlohmann::json& o, const std::string& key, const std::string& at) {
  return field(o, key, at, "a string", [](const nlohmann::json& x) { return x.is_string(); })
      .get<std::string>();
}

}  // namespace

void install_attention_timing(AttentionTiming* t) {
  g_timing = t;
}
AttentionTiming* attention_timing() {
  return g_timing;
}

const MeasuredLaunch* KernelTimings::find(const LaunchShape& s) const {
  for (auto it = launches.rbegin(); it != launches.rend(); ++it)
    if (it->shape == s) return &*it;
  return nullptr;
}

void KernelTimings::add(MeasuredLaunch m) {
  std::erase_if(launches, [&](const MeasuredLaunch& x) { return x.shape == m.shape; });
  launches.push_back(std::move(m));
}

MeasuredLaunch measured_launch(const AttentionTiming& t, int step) {
  if (!t.timed || t.round_ms.empty())
    throw InternalError("measured_launch", "the timing holds no timed round");
  std::vector<double> r = t.round_ms;
  std::sort(r.begin(), r.end());
  MeasuredLaunch m;
  m.shape = t.shape;
  m.step = step;
  m.layer = t.layer;
  m.kv_bytes = t.kv_bytes;
  m.ms = r[r.size() / 2];
  m.ms_min = r.front();
  m.repeats = t.repeats;
  m.rounds = static_cast<int>(r.size());
  return m;
}

nlohmann::json kernel_timings_json(const KernelTimings& t) {
  nlohmann::json launches = nlohmann::json::array();
  for (const MeasuredLaunch& m : t.launches) {
    launches.push_back({{"k_format", m.shape.k_format},
                        {"v_format", m.shape.v_format},
                        {"block_size", m.shape.block_size},
                        {"n_heads", m.shape.n_heads},
                        {"kv_heads", m.shape.kv_heads},
                        {"head_dim", m.shape.head_dim},
                        {"contexts", m.shape.contexts},
                        {"step", m.step},
                        {"layer", m.layer},
                        {"kv_bytes", m.kv_bytes},
                        {"ms", m.ms},
                        {"ms_min", m.ms_min},
                        {"repeats", m.repeats},
                        {"rounds", m.rounds}});
  }
  return {{"kvscope_kernel_timings", kFormatVersion},
          {"device", t.device},
          {"emulated", t.emulated},
          {"date", t.date},
          {"commit", t.commit},
          {"scenario", t.scenario},
          {"copy_gb_per_s", t.copy_gb_per_s},
          {"launches", std::move(launches)}};
}

void write_kernel_timings(std::ostream& o, const KernelTimings& t) {
  nlohmann::json j = kernel_timings_json(t);
  nlohmann::json launches = std::move(j["launches"]);
  j.erase("launches");
  o << "{\n";
  for (const auto& [key, value] : j.items())
    o << " " << nlohmann::json(key).dump() << ": " << value.dump() << ",\n";
  o << " \"launches\": [";
  for (std::size_t i = 0; i < launches.size(); ++i)
    o << (i > 0 ? ",\n  " : "\n  ") << launches[i].dump();
  o << (launches.empty() ? "]\n}\n" : "\n ]\n}\n");
}

KernelTimings parse_kernel_timings(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail_expected(where, "a JSON object (kernel timings)", j.type_name());
  const auto version = j.find("kvscope_kernel_timings");
  if (version == j.end() || *version != kFormatVersion) {
    fail_expected(where + ": kvscope_kernel_timings",
                  "format version " + std::to_string(kFormatVersion),
                  version == j.end() ? "no such field" : version->dump());
  }
  KernelTimings t;
  t.device = text(j, "device", where);
  t.emulated = field(j, "emulated", where, "true or false", [](const nlohmann::json& x) {
                 return x.is_boolean();
               }).get<bool>();
  t.date = text(j, "date", where);
  t.commit = text(j, "commit", where);
  t.scenario = text(j, "scenario", where);
  t.copy_gb_per_s = number(j, "copy_gb_per_s", where);
  const nlohmann::json& ls =
      field(j, "launches", where, "an array", [](const nlohmann::json& x) { return x.is_array(); });
  for (std::size_t i = 0; i < ls.size(); ++i) {
    const std::string at = where + ": launches[" + std::to_string(i) + "]";
    const nlohmann::json& o = ls[i];
    if (!o.is_object()) fail_expected(at, "an object", o.type_name());
    MeasuredLaunch m;
    m.shape.k_format = text(o, "k_format", at);
    m.shape.v_format = text(o, "v_format", at);
    m.shape.block_size = small_int(o, "block_size", at);
    m.shape.n_heads = small_int(o, "n_heads", at);
    m.shape.kv_heads = small_int(o, "kv_heads", at);
    m.shape.head_dim = small_int(o, "head_dim", at);
    const nlohmann::json& cs = field(o, "contexts", at, "an array of slot counts",
                                     [](const nlohmann::json& x) { return x.is_array(); });
    for (std::size_t c = 0; c < cs.size(); ++c) {
      if (!cs[c].is_number_integer() || cs[c].get<long>() < 1 || cs[c].get<long>() > 1L << 30)
        fail_expected(at + ".contexts[" + std::to_string(c) + "]", "a slot count >= 1",
                      cs[c].dump());
      m.shape.contexts.push_back(cs[c].get<int>());
    }
    m.step = small_int(o, "step", at);
    m.layer = small_int(o, "layer", at);
    m.kv_bytes = integer(o, "kv_bytes", at);
    m.ms = number(o, "ms", at);
    m.ms_min = number(o, "ms_min", at);
    if (m.ms_min > m.ms)
      fail_expected(at + ".ms_min", "at most ms (" + std::to_string(m.ms) + ")",
                    std::to_string(m.ms_min));
    m.repeats = small_int(o, "repeats", at);
    m.rounds = small_int(o, "rounds", at);
    t.launches.push_back(std::move(m));
  }
  return t;
}

KernelTimings load_kernel_timings(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open the kernel timings file");
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t at = 0;
  if (!json_nesting_within(body, kMaxJsonDepth, &at))
    throw Error(path, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels at byte " + std::to_string(at));
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) throw Error(path, "not valid JSON (expected kernel timings)");
  return parse_kernel_timings(j, path);
}

}  // namespace kvscope
