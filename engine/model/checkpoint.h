// Loading llama2.c checkpoints (legacy v0 and "ak42" v1 fp32), validated, mmapped, zero copy; and
// writing them (used by `kvscope synth`).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/mapped_file.h"
#include "engine/model/config.h"

namespace kvscope {

// Pointers into the weights of one model. Row-major, each matrix [out][in] as in llama2.c.
struct Weights {
  const float* token_embedding = nullptr;  // [vocab][dim]
  const float* rms_att = nullptr;          // [layers][dim]
  const float* wq = nullptr;               // [layers][dim][dim]
  const float* wk = nullptr;               // [layers][kv_dim][dim]
  const float* wv = nullptr;               // [layers][kv_dim][dim]
  const float* wo = nullptr;               // [layers][dim][dim]
  const float* rms_ffn = nullptr;          // [layers][dim]
  const float* w1 = nullptr;               // [layers][hidden][dim]
  const float* w2 = nullptr;               // [layers][dim][hidden]
  const float* w3 = nullptr;               // [layers][hidden][dim]
  const float* rms_final = nullptr;        // [dim]
  const float* wcls = nullptr;             // [vocab][dim] (== token_embedding when shared)
};

enum class CheckpointFormat { kLegacyV0, kAk42V1, kSynthetic };

// A loaded model: its shape, where it came from, and its weights (mmapped or owned).
class Model {
 public:
  const ModelConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  const std::string& source() const { return source_; }
  CheckpointFormat format() const { return format_; }
  bool is_random_weights() const { return format_ == CheckpointFormat::kSynthetic; }

  // Loads and validates a checkpoint. Throws kvscope::Error naming the file and field.
  static std::shared_ptr<const Model> load(const std::string& path);
  // Wraps owned float storage laid out in legacy order (see write_checkpoint).
  static std::shared_ptr<const Model> from_owned(ModelConfig config, std::vector<float> data,
                                                 std::string source);

 private:
  ModelConfig config_;
  Weights weights_;
  std::string source_;
  CheckpointFormat format_ = CheckpointFormat::kLegacyV0;
  MappedFile file_;            // set when mmapped
  std::vector<float> owned_;   // set when synthetic
};

// Reads only the header of a checkpoint (cheap; used by `kvscope info`).
ModelConfig read_checkpoint_config(const std::string& path);

// Writes `model` as a legacy (v0) llama2.c checkpoint, atomically.
void write_checkpoint(const Model& model, const std::string& path);

}  // namespace kvscope
