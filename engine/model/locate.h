// Finding model and tokenizer files: the command-line path, $KVSCOPE_MODELS, assets/models/ in
// the checkout, then ../shared/models beside the checkout (design.md, "Models").
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/checkpoint.h"
#include "engine/model/tokenizer.h"

namespace kvscope {

inline constexpr const char* kDefaultModelFile = "stories260K.bin";

// The directories searched for model files, in order (existing or not).
std::vector<std::string> model_search_dirs();

// Resolves a model argument (empty = the default model; a bare file name is searched for; a path
// with a '/' is used as given). Throws kvscope::Error listing every place looked at.
std::string locate_model(const std::string& model_arg);

// Resolves the tokenizer: the given path, else tok<vocab>.bin or tokenizer.bin beside the model,
// else the same names in the search directories.
std::string locate_tokenizer(const std::string& tokenizer_arg, const std::string& model_path,
                             int vocab_size);

// A loaded model and its tokenizer (the tokenizer is absent for synthetic models whose vocabulary
// matches no tokenizer file).
struct LoadedModel {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
};

// Loads a model argument: a checkpoint (found as above) or "synthetic:<spec>".
// `storage` applies to checkpoints (synthetic weights are always owned).
LoadedModel load_model(const std::string& model_arg, const std::string& tokenizer_arg,
                       WeightStorage storage = WeightStorage::kMapped);

// Reads just the shape for a model argument (does not allocate synthetic weights).
ModelConfig model_config_for(const std::string& model_arg, std::string* source = nullptr);

}  // namespace kvscope
