// Finding model and tokenizer files: the command-line path, $KVSCOPE_MODELS, assets/models/ in
// the checkout, then ../shared/models beside the checkout (design.md, "Models").
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/checkpoint.h"
#include "engine/model/tokenizer.h"

namespace kvscope {

inline constexpr const char* kDefaultModelFile = "stories260K.bin";

// Models known by a short name (`--model smollm2`, `"model": "smollm2"`): the file searched for,
// and how to get it when it is missing.
struct NamedModel {
  const char* name;
  const char* file;
  const char* how_to_get;
};
std::span<const NamedModel> named_models();

// The directories searched for model files, in order (existing or not).
std::vector<std::string> model_search_dirs();

// Resolves a model argument (empty = the default model; a short name from named_models() or a bare
// file name is searched for; a path with a '/' is used as given). Throws kvscope::Error listing
// every place looked at and how to get the model.
std::string locate_model(const std::string& model_arg);

// Resolves the tokenizer: the given path, else tok<vocab>.bin or tokenizer.bin beside the model,
// else the same names in the search directories.
std::string locate_tokenizer(const std::string& tokenizer_arg, const std::string& model_path,
                             int vocab_size);

// Loads a tokenizer file for a model with `vocab_size` tokens: a Hugging Face tokenizer.json (a
// path ending in .json; at most vocab_size tokens, as models pad their embeddings) or a llama2.c
// tokenizer.bin (exactly vocab_size tokens). Throws kvscope::Error.
std::shared_ptr<const Tokenizer> load_tokenizer_file(const std::string& path, int vocab_size);

// A loaded model and its tokenizer (the tokenizer is absent for synthetic models whose vocabulary
// matches no tokenizer file).
struct LoadedModel {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::string chat_template;  // the file's (GGUF tokenizer.chat_template); empty if none
};

// Where load_model's errors about its storage and tokenizer arguments are located, in the engine's
// words; a caller that knows which flag carried one puts that in its place (setting_source.h).
inline constexpr std::string_view kWeightStorage = "weight storage";
inline constexpr std::string_view kTokenizerPath = "tokenizer path";

// Loads a model argument: a checkpoint (found as above) or "synthetic:<spec>". A GGUF file brings
// its own tokenizer (a tokenizer path beside it is an error, located at kTokenizerPath; copied
// weight storage for it one located at kWeightStorage).
// `storage` applies to checkpoints (synthetic weights are always owned), `format` to GGUF files.
LoadedModel load_model(const std::string& model_arg, const std::string& tokenizer_arg,
                       WeightStorage storage = WeightStorage::kMapped,
                       WeightFormat format = WeightFormat::kNative);

// Reads just the shape for a model argument (does not allocate synthetic weights).
ModelConfig model_config_for(const std::string& model_arg, std::string* source = nullptr);

}  // namespace kvscope
