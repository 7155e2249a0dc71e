// Strict, precise reading of a JSON document for the scenario parser: a nesting limit checked
// before parsing (nothing downstream recurses deeper than it), typed getters whose errors name
// the file, the JSON path, the bad value and what was expected, and unknown keys with a
// did-you-mean.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/common/json_depth.h"

namespace kvscope {

// Objects keep their keys in file order (compare variants run in the order written).
using Json = nlohmann::ordered_json;

// Parses `text`; throws kvscope::Error "file: byte N: expected ..., got ..." on invalid JSON or
// nesting deeper than kMaxJsonDepth (checked first, without recursion).
Json parse_json_document(const std::string& text, const std::string& file);

// A JSON value shown in an error: compact, at most ~60 characters.
std::string shown_json(const Json& v);

// The closest name within a small edit distance, or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& names);

class JsonReader {
 public:
  explicit JsonReader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(const std::string& at, const std::string& expected, const Json& got) const;
  [[noreturn]] void fail_text(const std::string& at, const std::string& expected,
                              const std::string& got) const;
  // `obj` must be an object whose keys are all in `keys`.
  void only_keys(const Json& obj, const std::string& at,
                 const std::vector<std::string>& keys) const;
  void require(const Json& obj, const std::string& at, const std::string& key,
               const std::string& expected) const;
  std::int64_t integer(const Json& v, const std::string& at, std::int64_t lo,
                       std::int64_t hi) const;
  int int32(const Json& v, const std::string& at, int lo, int hi) const {
    return static_cast<int>(integer(v, at, lo, hi));
  }
  double number(const Json& v, const std::string& at, double lo, double hi,
                bool lo_open = false) const;
  std::string string(const Json& v, const std::string& at, bool non_empty = false) const;
  bool boolean(const Json& v, const std::string& at) const;

 private:
  std::string file_;
};

// "a.b" from ("a", "b"); "b" from ("", "b").
inline std::string json_path(const std::string& at, const std::string& key) {
  return at.empty() ? key : at + "." + key;
}
inline std::string json_path(const std::string& at, std::size_t index) {
  return at + "[" + std::to_string(index) + "]";
}

}  // namespace kvscope
