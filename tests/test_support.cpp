// Test helpers.
#include "tests/test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/common/error.h"

namespace kvscope::test {

const LoadedModel& real_model() {
  static const LoadedModel model = load_model("", "");
  return model;
}

const LoadedModel& smollm2() {
  static const LoadedModel model =
      load_model("smollm2", "", WeightStorage::kMapped, WeightFormat::kF32);
  return model;
}

const LoadedModel& smollm2_native() {
  static const LoadedModel model =
      load_model("smollm2", "", WeightStorage::kMapped, WeightFormat::kNative);
  return model;
}

namespace {
// A per-process scratch directory, removed when the test binary exits.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir()
      : path(std::filesystem::temp_directory_path() /
             ("kvscope-test-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    if (std::getenv("KVSCOPE_KEEP_TEST_FILES") == nullptr) std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

std::string temp_path(const std::string& name) {
  static const ScratchDir dir;
  return (dir.path / name).string();
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string shared_models_dir() {
  // $KVSCOPE_SHARED_MODELS where no ../shared is beside the checkout (the GPU check's device).
  if (const char* dir = std::getenv("KVSCOPE_SHARED_MODELS"); dir != nullptr && *dir != '\0')
    return dir;
  return (std::filesystem::path(KVSCOPE_SOURCE_DIR).parent_path() / "shared" / "models").string();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a kvscope::Error";
  return "";
}

float PortableNormal::operator()() {
  if (has_spare_) {
    has_spare_ = false;
    return static_cast<float>(spare_);
  }
  // u1 in (0, 1], u2 in [0, 1): mt19937's 32-bit outputs are the same everywhere.
  const double u1 = (static_cast<double>(rng_()) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(rng_()) / 4294967296.0;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * 3.14159265358979323846 * u2;
  spare_ = r * std::sin(a);
  has_spare_ = true;
  return static_cast<float>(r * std::cos(a));
}

}  // namespace kvscope::test
