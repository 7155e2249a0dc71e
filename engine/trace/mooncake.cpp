// Mooncake trace loading (strict, line-numbered errors), synthetic prompt tokens, reuse figure.
#include "engine/trace/mooncake.h"

#include "engine/common/json_depth.h"

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "engine/common/error.h"
#include "engine/common/text_lines.h"

namespace kvscope {
namespace {

std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 60) {
    s.resize(57);
    s.append("...");
  }
  return s;
}

std::int64_t non_negative_int(const nlohmann::json& obj, const char* field,
                              const std::string& where) {
  if (!obj.contains(field))
    throw Error(where + ": " + field, "missing (expected a non-negative integer)");
  const nlohmann::json& v = obj.at(field);
  // Unsigned values above INT64_MAX would wrap negative in get<int64_t>().
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                              : v.get<std::int64_t>() < 0)) {
    fail_expected(where + ": " + field, "a non-negative integer", shown(v));
  }
  return v.get<std::int64_t>();
}

MooncakeRequest parse_line(std::string_view line, const std::string& where, std::int32_t line_no) {
  std::size_t deep_at = 0;
  if (!json_nesting_within(line, kMaxJsonDepth, &deep_at)) {
    fail_expected(where, "a JSON object nested at most " + std::to_string(kMaxJsonDepth) + " deep",
                  "deeper nesting at byte " + std::to_string(deep_at));
  }
  nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) {
    std::string got(1, '\'');
    got.append(line.substr(0, 40));
    got.push_back('\'');
    fail_expected(where, "a JSON object", got);
  }
  if (!obj.is_object()) fail_expected(where, "a JSON object", shown(obj));
  MooncakeRequest r;
  r.line = line_no;
  if (!obj.contains("timestamp"))
    throw Error(where + ": timestamp", "missing (expected a non-negative number of ms)");
  const nlohmann::json& ts = obj.at("timestamp");
  if (!ts.is_number() || ts.get<double>() < 0 || !std::isfinite(ts.get<double>())) {
    fail_expected(where + ": timestamp", "a non-negative number of ms", shown(ts));
  }
  r.timestamp_ms = ts.get<double>();
  r.input_length = non_negative_int(obj, "input_length", where);
  r.output_length = non_negative_int(obj, "output_length", where);
  if (!obj.contains("hash_ids"))
    throw Error(where + ": hash_ids", "missing (expected an array of integers)");
  const nlohmann::json& ids = obj.at("hash_ids");
  if (!ids.is_array()) fail_expected(where + ": hash_ids", "an array of integers", shown(ids));
  r.hash_ids.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer()) {
      fail_expected(where + ": hash_ids[" + std::to_string(i) + "]", "an integer", shown(ids[i]));
    }
    r.hash_ids.push_back(ids[i].get<std::int64_t>());
  }
  const std::int64_t expected =  // ceil without overflowing near INT64_MAX
      r.input_length / kMooncakeBlockTokens + (r.input_length % kMooncakeBlockTokens != 0);
  if (static_cast<std::int64_t>(r.hash_ids.size()) != expected) {
    fail_expected(where + ": hash_ids",
                  std::to_string(expected) + " ids (ceil(input_length " +
                      std::to_string(r.input_length) + " / " +
                      std::to_string(kMooncakeBlockTokens) + "))",
                  std::to_string(r.hash_ids.size()) + " ids");
  }
  return r;
}

inline std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

MooncakeTrace parse_mooncake_trace(std::string_view text, const std::string& source,
                                   const MooncakeLoadOptions& options) {
  MooncakeTrace trace;
  trace.source = source;
  for_each_nonblank_line(text, [&](std::int64_t line_no, std::string_view line) {
    const std::string where = source + ":" + std::to_string(line_no);
    try {
      trace.requests.push_back(parse_line(line, where, static_cast<std::int32_t>(line_no)));
    } catch (const Error& e) {
      if (!options.skip_bad) throw;
      ++trace.skipped_lines;
      if (trace.skipped_errors.size() < 5) trace.skipped_errors.push_back(e.what());
    }
  });
  return trace;
}

MooncakeTrace load_mooncake_trace(const std::string& path, const MooncakeLoadOptions& options) {
  return parse_mooncake_trace(
      read_text_file(path, "cannot open the trace file (expected a Mooncake JSONL trace)"), path,
      options);
}

void mooncake_prompt_tokens(const MooncakeRequest& request, std::vector<TokenId>& out, int vocab) {
  out.resize(static_cast<std::size_t>(request.input_length));
  const auto range = static_cast<std::uint64_t>(vocab > 1 ? vocab - 1 : 1);
  std::size_t t = 0;
  for (std::int64_t id : request.hash_ids) {
    std::uint64_t state =
        static_cast<std::uint64_t>(id) * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL;
    for (int j = 0; j < kMooncakeBlockTokens && t < out.size(); ++j, ++t) {
      out[t] = static_cast<TokenId>(1 + splitmix(state) % range);
    }
  }
}

double mooncake_hash_id_reuse_ratio(std::span<const MooncakeRequest> requests) {
  std::unordered_set<std::int64_t> seen;
  std::int64_t reused = 0, total = 0;
  for (const MooncakeRequest& r : requests) {
    std::size_t k = 0;
    while (k < r.hash_ids.size() && seen.count(r.hash_ids[k])) ++k;
    reused +=
        std::min<std::int64_t>(static_cast<std::int64_t>(k) * kMooncakeBlockTokens, r.input_length);
    total += r.input_length;
    seen.insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  return total ? static_cast<double>(reused) / static_cast<double>(total) : 0.0;
}

}  // namespace kvscope
