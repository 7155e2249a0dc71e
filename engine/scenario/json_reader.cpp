// JsonReader and the pre-parse nesting check.
#include "engine/scenario/json_reader.h"

#include "engine/common/json_depth.h"

#include <algorithm>

#include "engine/common/error.h"

namespace kvscope {

using json = Json;

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string fmt_number(double v) {
  std::string s = json(v).dump();
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

}  // namespace

json parse_json_document(const std::string& text, const std::string& file) {
  std::size_t deep_at = 0;
  if (!json_nesting_within(text, kMaxJsonDepth, &deep_at)) {
    fail_expected(file + ": byte " + std::to_string(deep_at),
                  "JSON nested at most " + std::to_string(kMaxJsonDepth) + " arrays/objects deep",
                  "deeper nesting");
  }
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    fail_expected(file + ": byte " + std::to_string(e.byte), "valid JSON", std::string(e.what()));
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number too large for a double
    fail_expected(file, "valid JSON", std::string(e.what()));
  }
}

std::string shown_json(const json& v) {
  // Containers are shown by their first elements only, so a huge value costs little.
  std::string s;
  if (v.is_array() && v.size() > 8) {
    s = "[";
    for (std::size_t i = 0; i < 8; ++i) s += v[i].dump() + ",";
    s += "...]";
  } else {
    s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& n : names) {
    const std::size_t d = edit_distance(word, n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

void JsonReader::fail(const std::string& at, const std::string& expected, const json& got) const {
  fail_text(at, expected, shown_json(got));
}

void JsonReader::fail_text(const std::string& at, const std::string& expected,
                           const std::string& got) const {
  fail_expected(file_ + ": " + (at.empty() ? "(top level)" : at), expected, got);
}

void JsonReader::only_keys(const json& obj, const std::string& at,
                           const std::vector<std::string>& keys) const {
  if (!obj.is_object()) fail(at, "an object", obj);
  for (const auto& [k, v] : obj.items()) {
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    std::vector<std::string> sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    std::string names;
    for (const auto& n : sorted) names += (names.empty() ? "" : ", ") + n;
    const std::string near = did_you_mean(k, keys);
    fail_text(json_path(at, k), "one of the keys " + names,
              "unknown key " + json(k).dump(-1, ' ', false, json::error_handler_t::replace) +
                  (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
  }
}

void JsonReader::require(const json& obj, const std::string& at, const std::string& key,
                         const std::string& expected) const {
  if (!obj.contains(key)) fail_text(json_path(at, key), expected, "nothing (missing)");
}

std::int64_t JsonReader::integer(const json& v, const std::string& at, std::int64_t lo,
                                 std::int64_t hi) const {
  bool ok = false;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    ok = u <= static_cast<std::uint64_t>(hi) && (lo <= 0 || u >= static_cast<std::uint64_t>(lo));
  } else if (v.is_number_integer()) {
    ok = v.get<std::int64_t>() >= lo && v.get<std::int64_t>() <= hi;
  }
  if (!ok) {
    fail(at, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", v);
  }
  return v.get<std::int64_t>();
}

double JsonReader::number(const json& v, const std::string& at, double lo, double hi,
                          bool lo_open) const {
  if (!v.is_number() || (lo_open ? v.get<double>() <= lo : v.get<double>() < lo) ||
      v.get<double>() > hi) {
    fail(at,
         "a number in " + std::string(lo_open ? "(" : "[") + fmt_number(lo) + ", " +
             fmt_number(hi) + "]",
         v);
  }
  return v.get<double>();
}

std::string JsonReader::string(const json& v, const std::string& at, bool non_empty) const {
  if (!v.is_string() || (non_empty && v.get<std::string>().empty())) {
    fail(at, non_empty ? "a non-empty string" : "a string", v);
  }
  return v.get<std::string>();
}

bool JsonReader::boolean(const json& v, const std::string& at) const {
  if (!v.is_boolean()) fail(at, "true or false", v);
  return v.get<bool>();
}

}  // namespace kvscope
