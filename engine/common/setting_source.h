// Engine errors about a setting, located again by a caller at the flag or JSON key that carried
// the value: the engine names its settings in its own words, the CLI and the scenario loader in
// theirs.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "engine/common/error.h"

namespace kvscope {

// A setting as the engine's errors name it (their where(), in the engine's words: "eviction
// budget") and what one caller calls the thing that carried its value: a CLI flag ("--budget"), a
// file and JSON path ("s.json: cache.token_eviction.budget").
struct SettingSource {
  std::string_view setting;
  std::string source;
};

// Runs `f`. An Error it throws about one of `sources`' settings is thrown again located at that
// source, its message unchanged ("--budget: expected an integer >= 2, got 1"): the engine checks
// each rule once and names its settings in its own words, and each caller says where the value
// came from. Any other exception passes through as it is.
template <class F>
decltype(auto) with_setting_sources(std::initializer_list<SettingSource> sources, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    for (const SettingSource& s : sources)
      if (e.where() == s.setting) throw Error(s.source, e.detail());
    throw;
  }
}

}  // namespace kvscope
