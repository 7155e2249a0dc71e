// Synthetic models: seeded random weights at any published shape, for memory, allocator and kernel
// studies at real sizes. Everything computed on them is labelled "random weights".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/checkpoint.h"

namespace kvscope {

struct SyntheticSpec {
  std::string name;  // preset name ("smollm2-135m"; with its overrides: "smollm2-135m,kv_heads=9")
                     // or "custom"
  ModelConfig config;
  std::uint64_t seed = 1;
};

// Names of the built-in presets (llama-3-8b, llama-3-70b, ...).
std::vector<std::string> synthetic_preset_names();

// Parses the part after "synthetic:": a preset name, explicit key=value numbers, or a preset
// followed by overrides ("stories110m,vocab=512"). Keys: dim, hidden, layers, heads, kv_heads,
// head_dim, vocab, seq_len, seed. Throws kvscope::Error on unknown names, keys or bad values.
SyntheticSpec parse_synthetic_spec(const std::string& spec);

// Whether a --model argument names a synthetic model ("synthetic:...").
bool is_synthetic_model_arg(const std::string& model_arg);

// Allocates and fills the weights: norms 1, matrices uniform in +-sqrt(3/fan_in), seeded.
std::shared_ptr<const Model> make_synthetic_model(const SyntheticSpec& spec);

}  // namespace kvscope
