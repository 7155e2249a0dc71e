// libFuzzer target: GGUF parsing (GgufFile on arbitrary bytes), then the Llama config and, for
// small models, load_gguf_model. Bad files must end in kvscope::Error; parsed ones must keep every
// tensor inside the file, aligned and apart, and loaded ones must hold every weight.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_model.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using kvscope::fuzz::check;

// Reads the first and last float of a weight tensor of n floats (ASan checks the bounds).
void touch(const float* p, std::int64_t n, const char* what) {
  check(p != nullptr && n > 0, what);
  volatile float first = p[0];
  volatile float last = p[n - 1];
  (void)first;
  (void)last;
}

// Every metadata value: described, and read with every typed getter (wrong types must throw
// kvscope::Error, nothing else).
void read_metadata(const kvscope::GgufFile& f) {
  for (const auto& [key, value] : f.metadata()) {
    check(!value.describe().empty(), "describe() says something");
    try {
      (void)f.get_uint(key);
    } catch (const kvscope::Error&) {
    }
    try {
      (void)f.get_float(key);
    } catch (const kvscope::Error&) {
    }
    try {
      (void)f.get_string(key);
    } catch (const kvscope::Error&) {
    }
    try {
      (void)f.get_bool(key);
    } catch (const kvscope::Error&) {
    }
    try {
      (void)f.get_string_array(key);
    } catch (const kvscope::Error&) {
    }
    try {
      (void)f.get_int_array(key);
    } catch (const kvscope::Error&) {
    }
  }
}

// The tensors lie inside the data section, at aligned offsets, without overlapping.
void check_tensors(const kvscope::GgufFile& f, std::size_t size) {
  const std::uint64_t a = f.alignment();
  check(a != 0 && (a & (a - 1)) == 0, "alignment is a power of two");
  if (f.tensors().empty()) return;
  check(f.data_offset() % a == 0 && f.data_offset() <= size, "data section aligned, in file");
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const kvscope::GgufTensorInfo& t : f.tensors()) {
    check(!t.dims.empty() && t.dims.size() <= 4, "1 to 4 dims");
    for (std::int64_t d : t.dims) check(d > 0, "positive dims");
    check(t.num_elements() > 0, "positive element count");
    check(t.num_bytes > 0, "tensor has bytes");
    check(t.offset >= f.data_offset() && (t.offset - f.data_offset()) % a == 0, "offset aligned");
    check(t.offset <= size && t.num_bytes <= size - t.offset, "tensor inside the file");
    check(f.find_tensor(t.name) == &t, "tensor index");
    const auto bytes = f.tensor_bytes(t);
    check(bytes.size() == t.num_bytes, "tensor_bytes size");
    volatile std::byte last = bytes[bytes.size() - 1];
    (void)last;
    ranges.emplace_back(t.offset, t.offset + t.num_bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    check(ranges[i - 1].second <= ranges[i].first, "tensors do not overlap");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  std::optional<kvscope::GgufFile> file;
  try {
    file.emplace(bytes, "fuzz.gguf");
  } catch (const kvscope::Error&) {
    return 0;  // every malformed file must land here
  }
  read_metadata(*file);
  check_tensors(*file, size);

  kvscope::ModelConfig c;
  try {
    c = kvscope::gguf_model_config(*file);
  } catch (const kvscope::Error&) {
    return 0;
  }
  check(c.dim > 0 && c.hidden_dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 &&
            c.vocab_size > 0 && c.seq_len > 0,
        "config shape positive");
  check(c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0, "heads divide");
  // Loading allocates the fp32 weights: small models only.
  if (c.num_params() > 2'000'000) return 0;
  try {
    auto model = kvscope::load_gguf_model(*file);
    const kvscope::ModelConfig& m = model->config();
    const kvscope::Weights& w = model->weights();
    const std::int64_t d = m.dim, L = m.n_layers, kv = m.kv_dim(), hd = m.hidden_dim;
    touch(w.token_embedding, m.vocab_size * d, "token_embedding");
    touch(w.rms_att, L * d, "rms_att");
    touch(w.wq, L * m.q_dim() * d, "wq");
    touch(w.wk, L * kv * d, "wk");
    touch(w.wv, L * kv * d, "wv");
    touch(w.wo, L * d * m.q_dim(), "wo");
    touch(w.rms_ffn, L * d, "rms_ffn");
    touch(w.w1, L * hd * d, "w1");
    touch(w.w2, L * d * hd, "w2");
    touch(w.w3, L * hd * d, "w3");
    touch(w.rms_final, d, "rms_final");
    touch(w.wcls, m.vocab_size * d, "wcls");
    check(m.shared_classifier == (w.wcls == w.token_embedding), "shared classifier aliasing");
    check(m.shared_classifier == (file->find_tensor("output.weight") == nullptr),
          "separate classifier iff output.weight");
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}
