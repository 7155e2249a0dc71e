// libFuzzer target: llama2.c checkpoint loading (Model::load, read_checkpoint_config) on arbitrary
// bytes. Bad files must end in kvscope::Error; loaded ones must map every tensor inside the file.
#include <cstdint>

#include "engine/common/error.h"
#include "engine/model/checkpoint.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using kvscope::fuzz::check;

// Checks that tensor [p, p + n) lies inside [lo, hi) and reads its first and last float.
void check_tensor(const float* p, std::int64_t n, const char* lo, const char* hi,
                  const char* what) {
  check(p != nullptr && n > 0, what);
  const char* begin = reinterpret_cast<const char*>(p);
  check(begin >= lo && begin + n * 4 <= hi, what);
  volatile float first = p[0];
  volatile float last = p[n - 1];
  (void)first;
  (void)last;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static kvscope::fuzz::ScratchFile file("checkpoint");
  const std::string& path = file.write(data, size);
  try {
    kvscope::ModelConfig header = kvscope::read_checkpoint_config(path);
    check(header.dim > 0 && header.n_heads > 0 && header.n_kv_heads > 0, "header shape positive");
  } catch (const kvscope::Error&) {
    return 0;  // every malformed header must land here
  }
  try {
    auto model = kvscope::Model::load(path);
    const kvscope::ModelConfig& c = model->config();
    const kvscope::Weights& w = model->weights();
    // The mapping's start, recovered from the first tensor of either layout; `size` bytes long.
    const char* base = reinterpret_cast<const char*>(
        model->format() == kvscope::CheckpointFormat::kLegacyV0 ? w.token_embedding : w.rms_att);
    const std::size_t header_bytes =
        model->format() == kvscope::CheckpointFormat::kLegacyV0 ? 28 : 256;
    const char* begin = base - header_bytes;
    const char* end = begin + size;
    const std::int64_t d = c.dim, L = c.n_layers, kv = c.kv_dim(), hd = c.hidden_dim;
    check_tensor(w.token_embedding, c.vocab_size * d, begin, end, "token_embedding in file");
    check_tensor(w.rms_att, L * d, begin, end, "rms_att in file");
    check_tensor(w.wq, L * c.q_dim() * d, begin, end, "wq in file");
    check_tensor(w.wk, L * kv * d, begin, end, "wk in file");
    check_tensor(w.wv, L * kv * d, begin, end, "wv in file");
    check_tensor(w.wo, L * d * c.q_dim(), begin, end, "wo in file");
    check_tensor(w.rms_ffn, L * d, begin, end, "rms_ffn in file");
    check_tensor(w.w1, L * hd * d, begin, end, "w1 in file");
    check_tensor(w.w2, L * d * hd, begin, end, "w2 in file");
    check_tensor(w.w3, L * hd * d, begin, end, "w3 in file");
    check_tensor(w.rms_final, d, begin, end, "rms_final in file");
    check_tensor(w.wcls, c.vocab_size * d, begin, end, "wcls in file");
    check(c.shared_classifier == (w.wcls == w.token_embedding), "shared classifier aliasing");
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}
