// Shared helpers for the test suite: the real model, temporary files.
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/model/locate.h"

namespace kvscope::test {

// The default model (stories260K) and its tokenizer, loaded once per process.
const LoadedModel& real_model();
// SmolLM2-135M-Instruct (GGUF, fetched by scripts/models.sh), loaded once per process, with its
// weights dequantized to fp32 (--weight-format f32, the accuracy reference). A missing model
// throws (the test fails; it never skips).
const LoadedModel& smollm2();
// The same model with its matmuls on the file's quantized blocks (--weight-format native).
const LoadedModel& smollm2_native();
// A path under a fresh per-process temporary directory.
std::string temp_path(const std::string& name);
void write_bytes(const std::string& path, const std::vector<char>& bytes);
std::vector<char> read_bytes(const std::string& path);
std::string read_text(const std::string& path);
// ../shared/models beside the checkout (where the golden outputs are), or $KVSCOPE_SHARED_MODELS.
std::string shared_models_dir();
// The what() of the kvscope::Error that `fn` throws ("" and a test failure when it throws none).
std::string error_of(const std::function<void()>& fn);

// Standard normal floats drawn from std::mt19937 by Box-Muller: the same numbers with every
// standard library. std::normal_distribution's algorithm is each library's own, so libc++ (the
// browser build's, tests/web/) draws other values than libstdc++ from the same seed.
class PortableNormal {
 public:
  explicit PortableNormal(unsigned seed) : rng_(seed) {}
  float operator()();

 private:
  std::mt19937 rng_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace kvscope::test
