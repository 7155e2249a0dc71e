// Pieces of the scenario parser shared between its source files (not a public interface).
#pragma once

#include <nlohmann/json.hpp>

#include "engine/scenario/json_reader.h"
#include "engine/scenario/scenario.h"

namespace kvscope::scenario_detail {

// Applies the keys present in `j` (the cache section, or a compare variant's overrides at `at`)
// onto `c`, then checks the fields that depend on each other. `is_base`: the section must give
// the pool size (num_blocks or pool_bytes); a variant may leave it.
void apply_cache(const JsonReader& r, const Json& j, const std::string& at, bool is_base,
                 CacheSettings& c);

Workload parse_workload(const JsonReader& r, const Json& j);

}  // namespace kvscope::scenario_detail
