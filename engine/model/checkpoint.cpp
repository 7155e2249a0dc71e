// Checkpoint parsing and validation for the llama2.c formats.
//
// Legacy v0: 7 x int32 header (dim, hidden, layers, heads, kv_heads, vocab, seq_len; a negative
// vocab means a separate classifier), then fp32 tensors in the order of Weights, then the RoPE
// tables freq_cis_real/imag [seq_len][head_dim/2], then wcls if separate.
// v1 "ak42": uint32 magic 0x616b3432, int32 version 1, the 7 ints, uint8 shared flag, zero padding
// to 256 bytes; then rms_att (all layers), rms_ffn, rms_final, token_embedding, wq, wk, wv, wo,
// w1, w2, w3, and wcls if not shared. No RoPE tables.
#include "engine/model/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/model/gguf_model.h"

namespace kvscope {
namespace {

constexpr std::uint32_t kAk42Magic = 0x616b3432;
constexpr std::size_t kV1HeaderBytes = 256;

struct Header {
  ModelConfig config;
  CheckpointFormat format = CheckpointFormat::kLegacyV0;
  std::size_t header_bytes = 0;
};

std::int32_t read_i32(const std::byte* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The header's integers and their plausible ranges, in file order.
struct HeaderRange {
  const char* field;
  std::int64_t value, lo, hi;
};

std::vector<HeaderRange> header_ranges(const ModelConfig& c) {
  return {{"dim", c.dim, 1, 1 << 16},
          {"hidden_dim", c.hidden_dim, 1, 1 << 18},
          {"n_layers", c.n_layers, 1, 1024},
          {"n_heads", c.n_heads, 1, 1024},
          {"n_kv_heads", c.n_kv_heads, 1, c.n_heads},
          {"vocab_size", c.vocab_size, 1, 1 << 22},
          {"seq_len", c.seq_len, 1, 1 << 24}};
}

// What the start of a file that is no model looks like: its first bytes as text when they are
// printable (a text file), else in hex (some other binary).
std::string describe_start(std::span<const std::byte> bytes) {
  const std::size_t n = std::min<std::size_t>(bytes.size(), 64);
  bool text = n > 0;
  for (std::size_t i = 0; i < n && text; ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    text = (b >= 0x20 && b != 0x7f) || b == '\n' || b == '\r' || b == '\t';
  }
  std::string shown;
  if (text) {
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 16); ++i) {
      const char ch = static_cast<char>(bytes[i]);
      shown += ch == '\n'   ? std::string("\\n")
               : ch == '\r' ? std::string("\\r")
               : ch == '\t' ? std::string("\\t")
                            : std::string(1, ch);
    }
    return "its first bytes are '" + shown + "', a text file";
  }
  char hex[4];
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(bytes[i]));
    shown += (i ? " " : "") + std::string(hex);
  }
  return "its first bytes are " + shown + " (hex), not text";
}

// The one-line refusal of a file that is neither format (no GGUF or ak42 magic, and no plausible
// llama2.c v0 header), instead of a field-level error about a header it never had.
[[noreturn]] void fail_not_a_model(const std::string& path, std::span<const std::byte> bytes,
                                   const std::string& why) {
  throw Error(path,
              "not a GGUF or llama2.c checkpoint (" + describe_start(bytes) + "; " + why + ")");
}

void validate_config(const std::string& path, const ModelConfig& c) {
  for (const HeaderRange& r : header_ranges(c)) {
    if (r.value < r.lo || r.value > r.hi) {
      fail_expected(path + ": header." + r.field,
                    "an integer in [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]",
                    std::to_string(r.value));
    }
  }
  if (c.head_dim_override == 0 && c.dim % c.n_heads != 0) {
    fail_expected(path + ": header.dim",
                  "a multiple of n_heads (" + std::to_string(c.n_heads) + ")",
                  std::to_string(c.dim));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    fail_expected(path + ": header.n_kv_heads",
                  "a divisor of n_heads (" + std::to_string(c.n_heads) + ")",
                  std::to_string(c.n_kv_heads));
  }
  if (c.head_dim() % 2 != 0) {
    fail_expected(path + ": header.dim", "an even head size (dim / n_heads) for RoPE",
                  "head size " + std::to_string(c.head_dim()));
  }
}

Header parse_header(const std::string& path, std::span<const std::byte> bytes) {
  Header h;
  if (bytes.size() < 7 * sizeof(std::int32_t)) {
    fail_not_a_model(path, bytes,
                     std::to_string(bytes.size()) +
                         " bytes, shorter than a GGUF header or a 28-byte llama2.c header");
  }
  std::uint32_t magic;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  std::size_t off = 0;
  if (magic == kAk42Magic) {
    if (bytes.size() < kV1HeaderBytes) {
      fail_expected(path, "a 256-byte ak42 header", std::to_string(bytes.size()) + " bytes");
    }
    std::int32_t version = read_i32(bytes.data() + 4);
    if (version != 1) {
      fail_expected(path + ": header.version",
                    "1 (fp32; versions 2+ hold quantized weights kvscope does not load)",
                    std::to_string(version));
    }
    off = 8;
    h.format = CheckpointFormat::kAk42V1;
    h.header_bytes = kV1HeaderBytes;
  } else {
    h.format = CheckpointFormat::kLegacyV0;
    h.header_bytes = 7 * sizeof(std::int32_t);
  }
  ModelConfig& c = h.config;
  c.dim = read_i32(bytes.data() + off + 0);
  c.hidden_dim = read_i32(bytes.data() + off + 4);
  c.n_layers = read_i32(bytes.data() + off + 8);
  c.n_heads = read_i32(bytes.data() + off + 12);
  c.n_kv_heads = read_i32(bytes.data() + off + 16);
  std::int32_t vocab = read_i32(bytes.data() + off + 20);
  c.seq_len = read_i32(bytes.data() + off + 24);
  if (h.format == CheckpointFormat::kLegacyV0) {
    c.shared_classifier = vocab > 0;
    c.vocab_size =
        vocab == std::numeric_limits<std::int32_t>::min() ? 0 : (vocab < 0 ? -vocab : vocab);
  } else {
    c.vocab_size = vocab;
    std::uint8_t shared = static_cast<std::uint8_t>(bytes[off + 28]);
    if (shared > 1)
      fail_expected(path + ": header.shared_classifier", "0 or 1", std::to_string(shared));
    c.shared_classifier = shared == 1;
  }
  // A v0 header has no magic: when two or more of its seven numbers are outside any model's
  // shape, the file is no checkpoint at all (a text file, an image, a tokenizer); one bad field
  // is a damaged checkpoint, named below.
  if (h.format == CheckpointFormat::kLegacyV0) {
    const std::vector<HeaderRange> ranges = header_ranges(c);
    int bad = 0;
    const HeaderRange* first = nullptr;
    for (const HeaderRange& r : ranges) {
      if (r.value >= r.lo && r.value <= r.hi) continue;
      ++bad;
      if (first == nullptr) first = &r;
    }
    if (bad >= 2) {
      fail_not_a_model(path, bytes,
                       "no \"GGUF\" or \"ak42\" magic, and as a llama2.c v0 header " +
                           std::to_string(bad) + " of its " + std::to_string(ranges.size()) +
                           " numbers are outside any model's shape, e.g. " + first->field + " = " +
                           std::to_string(first->value));
    }
  }
  validate_config(path, c);
  return h;
}

// Float counts of the file body for a given header.
std::int64_t expected_floats(const Header& h) {
  const ModelConfig& c = h.config;
  std::int64_t n = c.num_params();
  if (h.format == CheckpointFormat::kLegacyV0) n += std::int64_t{c.seq_len} * c.head_dim();  // RoPE
  return n;
}

// Assigns Weights pointers for the legacy layout starting at `p` (with llama2.c's RoPE tables
// between rms_final and wcls, or without them for weights that never had any).
Weights map_legacy(const ModelConfig& c, const float* p, bool rope_tables = true) {
  const std::int64_t d = c.dim, L = c.n_layers, kv = c.kv_dim(), hd = c.hidden_dim;
  Weights w;
  w.token_embedding = p;
  p += c.vocab_size * d;
  w.rms_att = p;
  p += L * d;
  w.wq = p;
  p += L * c.q_dim() * d;
  w.wk = p;
  p += L * kv * d;
  w.wv = p;
  p += L * kv * d;
  w.wo = p;
  p += L * d * c.q_dim();
  w.rms_ffn = p;
  p += L * d;
  w.w1 = p;
  p += L * hd * d;
  w.w2 = p;
  p += L * d * hd;
  w.w3 = p;
  p += L * hd * d;
  w.rms_final = p;
  p += d;
  if (rope_tables) p += std::int64_t{c.seq_len} * c.head_dim();  // recomputed, not used
  w.wcls = c.shared_classifier ? w.token_embedding : p;
  return w;
}

Weights map_v1(const ModelConfig& c, const float* p) {
  const std::int64_t d = c.dim, L = c.n_layers, kv = c.kv_dim(), hd = c.hidden_dim;
  Weights w;
  w.rms_att = p;
  p += L * d;
  w.rms_ffn = p;
  p += L * d;
  w.rms_final = p;
  p += d;
  w.token_embedding = p;
  p += c.vocab_size * d;
  w.wq = p;
  p += L * c.q_dim() * d;
  w.wk = p;
  p += L * kv * d;
  w.wv = p;
  p += L * kv * d;
  w.wo = p;
  p += L * d * c.q_dim();
  w.w1 = p;
  p += L * hd * d;
  w.w2 = p;
  p += L * d * hd;
  w.w3 = p;
  p += L * hd * d;
  w.wcls = c.shared_classifier ? w.token_embedding : p;
  return w;
}

// Calls f(blocks, fp32 place, rows, cols) for each matrix `nw` keeps blocks of, its fp32 place
// being where `w` (the legacy layout) holds it.
template <class F>
void for_each_native(const ModelConfig& c, const NativeWeights& nw, const Weights& w, F&& f) {
  const std::int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
  struct Kind {
    const std::vector<QuantMatrix>* layers;
    const float* base;
    std::int64_t rows, cols;
  };
  const Kind kinds[] = {{&nw.wq, w.wq, q, d}, {&nw.wk, w.wk, kv, d}, {&nw.wv, w.wv, kv, d},
                        {&nw.wo, w.wo, d, q}, {&nw.w1, w.w1, h, d},  {&nw.w2, w.w2, d, h},
                        {&nw.w3, w.w3, h, d}};
  for (const Kind& k : kinds) {
    for (std::size_t l = 0; l < k.layers->size(); ++l) {
      const QuantMatrix& m = (*k.layers)[l];
      const auto at = static_cast<std::int64_t>(l) * k.rows * k.cols;
      if (m.data != nullptr) f(m, k.base + at, k.rows, k.cols);
    }
  }
  if (nw.wcls.data != nullptr) f(nw.wcls, w.wcls, std::int64_t{c.vocab_size}, d);
}

}  // namespace

ModelConfig read_checkpoint_config(const std::string& path) {
  if (is_gguf_file(path)) return gguf_model_config(GgufFile(path));
  MappedFile file(path);
  return parse_header(path, file.bytes()).config;
}

const char* weight_storage_name(WeightStorage s) {
  return s == WeightStorage::kCopied ? "copy" : "mmap";
}

WeightStorage parse_weight_storage(const std::string& text, const std::string& flag) {
  if (text == "mmap") return WeightStorage::kMapped;
  if (text == "copy") return WeightStorage::kCopied;
  throw Error(flag, "expected mmap or copy, got \"" + text + "\"");
}

const char* weight_format_name(WeightFormat f) {
  return f == WeightFormat::kF32 ? "f32" : "native";
}

WeightFormat parse_weight_format(const std::string& text, const std::string& flag) {
  if (text == "native") return WeightFormat::kNative;
  if (text == "f32") return WeightFormat::kF32;
  throw Error(flag,
              "expected native (as the file stores them) or f32 (dequantized at load), got \"" +
                  text + "\"");
}

double Model::huge_page_fraction() const {
  if (storage_ != WeightStorage::kCopied || copy_.size() == 0) return 0.0;
  const long huge = copy_.huge_page_bytes();
  return huge < 0 ? -1.0 : static_cast<double>(huge) / static_cast<double>(copy_.size());
}

const Weights& Model::weights() const {
  if (lazy_f32_bytes_ > 0) std::call_once(lazy_once_, [this] { fill_native_f32(); });
  return weights_;
}

void Model::fill_native_f32() const {
  float* base = gguf_f32_.get();
  for_each_native(config_, *native_, weights_,
                  [&](const QuantMatrix& m, const float* at, std::int64_t rows, std::int64_t cols) {
                    dequantize_rows(m.type, m.data, m.row_bytes, rows, cols, base + (at - base));
                  });
  lazy_done_.store(true);
}

void Model::embedding_row(int token, float* out) const {
  const std::int64_t dim = config_.dim;
  if (native_ && config_.shared_classifier && native_->wcls.data != nullptr) {
    const QuantMatrix& m = native_->wcls;
    dequantize_row(m.type, m.data + token * m.row_bytes, out, dim);
    return;
  }
  std::memcpy(out, weights_.token_embedding + token * dim, static_cast<std::size_t>(dim) * 4);
}

std::int64_t Model::weight_bytes() const {
  if (gguf_f32_) return f32_bytes_ + (lazy_done_.load() ? lazy_f32_bytes_ : 0);
  if (!owned_.empty()) return static_cast<std::int64_t>(owned_.size() * sizeof(float));
  if (copy_.size() > 0) return static_cast<std::int64_t>(copy_.size());
  return static_cast<std::int64_t>(file_.size());
}

std::shared_ptr<const Model> Model::load(const std::string& path, WeightStorage storage,
                                         WeightFormat format) {
  if (is_gguf_file(path)) return load_gguf_model(GgufFile(path), format);
  MappedFile file(path);
  Header h = parse_header(path, file.bytes());
  const std::int64_t want = static_cast<std::int64_t>(h.header_bytes) + 4 * expected_floats(h);
  if (static_cast<std::int64_t>(file.size()) != want) {
    fail_expected(
        path + ": file size",
        std::to_string(want) + " bytes for a model with " + h.config.describe(),
        std::to_string(file.size()) + " bytes" +
            (static_cast<std::int64_t>(file.size()) < want ? " (truncated?)" : " (trailing data)"));
  }
  auto model = std::shared_ptr<Model>(new Model());
  model->config_ = h.config;
  model->format_ = h.format;
  model->source_ = path;
  model->storage_ = storage;
  const std::byte* bytes = file.bytes().data();
  if (storage == WeightStorage::kCopied) {
    model->copy_ = ZeroedBuffer(file.size());
    std::memcpy(model->copy_.data(), bytes, file.size());
    bytes = model->copy_.data();
  }
  const float* body = reinterpret_cast<const float*>(bytes + h.header_bytes);
  model->weights_ =
      h.format == CheckpointFormat::kLegacyV0 ? map_legacy(h.config, body) : map_v1(h.config, body);
  if (storage == WeightStorage::kMapped) model->file_ = std::move(file);  // else unmapped here
  return model;
}

std::shared_ptr<Model> Model::wrap_owned(ModelConfig config, std::vector<float> data,
                                         std::string source, CheckpointFormat format,
                                         bool rope_tables) {
  validate_config(source, config);
  const std::int64_t want = rope_tables
                                ? expected_floats(Header{config, CheckpointFormat::kLegacyV0, 0})
                                : config.num_params();
  if (static_cast<std::int64_t>(data.size()) != want) {
    fail_expected(source, std::to_string(want) + " floats", std::to_string(data.size()));
  }
  auto model = std::shared_ptr<Model>(new Model());
  model->config_ = config;
  model->format_ = format;
  model->source_ = std::move(source);
  model->owned_ = std::move(data);
  model->weights_ = map_legacy(config, model->owned_.data(), rope_tables);
  return model;
}

std::shared_ptr<const Model> Model::from_owned(ModelConfig config, std::vector<float> data,
                                               std::string source) {
  return wrap_owned(config, std::move(data), std::move(source), CheckpointFormat::kSynthetic,
                    /*rope_tables=*/true);
}

std::shared_ptr<const Model> Model::from_gguf(ModelConfig config, std::unique_ptr<float[]> data,
                                              std::string source, std::string weight_types,
                                              std::optional<NativeWeights> native,
                                              ZeroedBuffer native_buf,
                                              std::shared_ptr<const MappedFile> native_file) {
  validate_config(source, config);
  auto model = std::shared_ptr<Model>(new Model());
  model->config_ = config;
  model->format_ = CheckpointFormat::kGguf;
  model->source_ = std::move(source);
  model->weight_types_ = std::move(weight_types);
  model->gguf_f32_ = std::move(data);
  model->weights_ = map_legacy(config, model->gguf_f32_.get(), /*rope_tables=*/false);
  model->native_ = std::move(native);
  model->native_buf_ = std::move(native_buf);
  model->native_file_ = std::move(native_file);
  if (model->native_) {
    for_each_native(config, *model->native_, model->weights_,
                    [&](const QuantMatrix&, const float*, std::int64_t rows, std::int64_t cols) {
                      model->lazy_f32_bytes_ += rows * cols * 4;
                    });
  }
  model->f32_bytes_ = config.num_params() * 4 - model->lazy_f32_bytes_;
  return model;
}

void write_checkpoint(const Model& model, const std::string& path) {
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const std::int64_t d = c.dim, L = c.n_layers, kv = c.kv_dim(), hd = c.hidden_dim;
  if (c.head_dim_override != 0 && c.head_dim_override * c.n_heads != c.dim) {
    throw Error(path, "cannot write a llama2.c checkpoint: its head size " +
                          std::to_string(c.head_dim()) + " is not dim / n_heads");
  }
  write_file_atomically(path, [&](std::ostream& out) {
    std::int32_t header[7] = {c.dim,        c.hidden_dim,
                              c.n_layers,   c.n_heads,
                              c.n_kv_heads, c.shared_classifier ? c.vocab_size : -c.vocab_size,
                              c.seq_len};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    auto put = [&](const float* p, std::int64_t n) {
      out.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n * 4));
    };
    put(w.token_embedding, c.vocab_size * d);
    put(w.rms_att, L * d);
    put(w.wq, L * c.q_dim() * d);
    put(w.wk, L * kv * d);
    put(w.wv, L * kv * d);
    put(w.wo, L * d * c.q_dim());
    put(w.rms_ffn, L * d);
    put(w.w1, L * hd * d);
    put(w.w2, L * d * hd);
    put(w.w3, L * hd * d);
    put(w.rms_final, d);
    // RoPE tables as llama2.c's export writes them: cos and sin of pos * theta^(-2i/head_dim).
    const int half = c.head_dim() / 2;
    std::vector<float> table(static_cast<std::size_t>(c.seq_len) * half);
    for (int which = 0; which < 2; ++which) {
      for (int pos = 0; pos < c.seq_len; ++pos) {
        for (int i = 0; i < half; ++i) {
          double freq = 1.0 / std::pow(static_cast<double>(c.rope_theta), (2.0 * i) / c.head_dim());
          double a = pos * freq;
          table[static_cast<std::size_t>(pos) * half + i] =
              static_cast<float>(which == 0 ? std::cos(a) : std::sin(a));
        }
      }
      put(table.data(), static_cast<std::int64_t>(table.size()));
    }
    if (!c.shared_classifier) put(w.wcls, c.vocab_size * d);
  });
}

}  // namespace kvscope
