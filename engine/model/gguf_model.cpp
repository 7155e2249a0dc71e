// GGUF Llama models: metadata to ModelConfig, tensors (checked by name, type and shape) to the
// fp32 layout of llama2.c's legacy checkpoints, and with --weight-format native the matrices that
// have quantized kernels kept as stored instead (their fp32 places are filled only when
// Model::weights() is asked for).
//
// RoPE: llama.cpp's converter permutes the Q and K projections of Llama models so that RoPE
// rotates consecutive pairs (llama.cpp's "NORM" rope type), which is the rotation llama2.c and
// the engine apply, so the weights are used as stored.
#include "engine/model/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "engine/common/error.h"
#include "engine/model/ggml_types.h"
#include "engine/model/quant_panels.h"

namespace kvscope {
namespace {

int config_int(const GgufFile& f, const std::string& key, std::int64_t lo, std::int64_t hi,
               std::optional<std::int64_t> fallback = std::nullopt) {
  std::optional<std::uint64_t> v = f.get_uint(key);
  const bool derived = !v && fallback;  // the fallback is range-checked too (e.g. 0 tokens)
  if (derived) v = static_cast<std::uint64_t>(*fallback);
  if (!v) throw Error(f.path(), key + ": expected an integer metadata key, got none (missing)");
  if (*v < static_cast<std::uint64_t>(lo) || *v > static_cast<std::uint64_t>(hi)) {
    fail_expected(f.path() + ": " + key + (derived ? " (missing; derived from the file)" : ""),
                  "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                  std::to_string(*v));
  }
  return static_cast<int>(*v);
}

// One weight tensor: its GGUF name, where it goes in the fp32 buffer, its [rows][cols] shape.
struct TensorSlot {
  std::string name;
  std::int64_t offset = 0;  // in floats
  std::int64_t rows = 0;    // ne[1] (1 for vectors)
  std::int64_t cols = 0;    // ne[0]
};

// The tensors of a Llama model in the order of the legacy llama2.c layout without its RoPE tables
// (checkpoint.cpp's map_legacy), with their offsets.
std::vector<TensorSlot> legacy_slots(const ModelConfig& c) {
  const std::int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
  std::vector<TensorSlot> slots;
  std::int64_t off = 0;
  auto add = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
    slots.push_back({name, off, rows, cols});
    off += rows * cols;
  };
  auto per_layer = [&](const char* suffix, std::int64_t rows, std::int64_t cols) {
    for (int l = 0; l < c.n_layers; ++l) add("blk." + std::to_string(l) + "." + suffix, rows, cols);
  };
  add("token_embd.weight", c.vocab_size, d);
  per_layer("attn_norm.weight", 1, d);
  per_layer("attn_q.weight", q, d);
  per_layer("attn_k.weight", kv, d);
  per_layer("attn_v.weight", kv, d);
  per_layer("attn_output.weight", d, q);
  per_layer("ffn_norm.weight", 1, d);
  per_layer("ffn_gate.weight", h, d);
  per_layer("ffn_down.weight", d, h);
  per_layer("ffn_up.weight", h, d);
  add("output_norm.weight", 1, d);
  if (!c.shared_classifier) add("output.weight", c.vocab_size, d);
  return slots;
}

std::string shape_text(std::int64_t rows, std::int64_t cols) {
  std::string s = "[";
  s += std::to_string(cols);
  if (rows != 1) s += ", " + std::to_string(rows);
  return s + "]";
}

std::string dims_text(const GgufTensorInfo& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(t.dims[i]);
  return s + "]";
}

const GgufTensorInfo& checked_tensor(const GgufFile& f, const TensorSlot& slot) {
  const GgufTensorInfo* t = f.find_tensor(slot.name);
  if (t == nullptr) {
    throw Error(f.path(), "tensor \"" + slot.name + "\": expected a tensor of shape " +
                              shape_text(slot.rows, slot.cols) + ", got none (missing)");
  }
  const bool vector_ok = slot.rows == 1 && t->dims.size() == 1 && t->dims[0] == slot.cols;
  const bool matrix_ok = t->dims.size() == 2 && t->dims[0] == slot.cols && t->dims[1] == slot.rows;
  if (!vector_ok && !matrix_ok) {
    fail_expected(f.path() + ": tensor \"" + slot.name + "\" shape",
                  shape_text(slot.rows, slot.cols) + " (ggml order, from the metadata)",
                  dims_text(*t));
  }
  const auto traits = ggml_type_traits(t->type);
  if (!traits->supported) {
    fail_expected(f.path() + ": tensor \"" + slot.name + "\" type",
                  "F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K or Q6_K", traits->name);
  }
  return *t;
}

// The quantized matrices of `slots`, copied into one buffer (each 64-byte aligned, on huge pages
// where the kernel gives them) and pointed at from a NativeWeights; `kept[i]`: whether slot i is
// one of them. On x86 builds, whose quantized kernels read panels (quant_panels.h), the buffer
// holds each matrix repacked into them instead, and the blocks (read only for a token's embedding
// row and the lazy fp32 copy) stay in the file's mapping, which `mapping` keeps; a file parsed
// from the caller's bytes has no mapping to keep, and gets both.
struct NativeSet {
  NativeWeights weights;
  ZeroedBuffer buf;
  std::vector<bool> kept;
  std::shared_ptr<const MappedFile> mapping;
};
NativeSet native_weights(const GgufFile& f, const ModelConfig& c,
                         const std::vector<TensorSlot>& slots,
                         const std::vector<const GgufTensorInfo*>& infos) {
  NativeWeights nw;
  for (auto* v : {&nw.wq, &nw.wk, &nw.wv, &nw.wo, &nw.w1, &nw.w2, &nw.w3})
    v->resize(static_cast<std::size_t>(c.n_layers));
  // Which NativeWeights entry a tensor name fills (nullptr: none, e.g. norms).
  const std::map<std::string, std::vector<QuantMatrix>*> per_layer = {
      {"attn_q.weight", &nw.wq},      {"attn_k.weight", &nw.wk},   {"attn_v.weight", &nw.wv},
      {"attn_output.weight", &nw.wo}, {"ffn_gate.weight", &nw.w1}, {"ffn_down.weight", &nw.w2},
      {"ffn_up.weight", &nw.w3}};
  const std::string classifier = c.shared_classifier ? "token_embd.weight" : "output.weight";
  auto target = [&](const std::string& name) -> QuantMatrix* {
    if (name == classifier) return &nw.wcls;
    if (name.rfind("blk.", 0) != 0) return nullptr;
    const std::size_t dot = name.find('.', 4);
    const auto it = per_layer.find(name.substr(dot + 1));
    if (it == per_layer.end()) return nullptr;
    return &(*it->second)[std::stoul(name.substr(4, dot - 4))];
  };
  auto aligned = [](std::size_t n) { return (n + 63) / 64 * 64; };
  const bool panels = quant_panels_made();
  const bool in_place = panels && f.mapping() != nullptr;
  auto panel_bytes = [&](std::size_t i) {
    return panels ? aligned(quant_panel_bytes(static_cast<GgmlType>(infos[i]->type), slots[i].rows,
                                              slots[i].cols))
                  : 0;
  };
  std::size_t total = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (target(slots[i].name) && has_native_matmul(static_cast<GgmlType>(infos[i]->type)))
      total += (in_place ? 0 : aligned(f.tensor_bytes(*infos[i]).size())) + panel_bytes(i);
  }
  ZeroedBuffer buf(std::max<std::size_t>(total, 1));
  std::vector<bool> kept(slots.size(), false);
  std::size_t off = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    QuantMatrix* m = target(slots[i].name);
    const auto type = static_cast<GgmlType>(infos[i]->type);
    if (m == nullptr || !has_native_matmul(type)) continue;
    const std::span<const std::byte> bytes = f.tensor_bytes(*infos[i]);
    const std::int64_t row_bytes = ggml_row_bytes(infos[i]->type, slots[i].cols);
    if (in_place) {
      *m = QuantMatrix{type, bytes.data(), row_bytes};
    } else {
      std::memcpy(buf.data() + off, bytes.data(), bytes.size());
      *m = QuantMatrix{type, buf.data() + off, row_bytes};
      off += aligned(bytes.size());
    }
    if (panels) {
      make_quant_panels(type, m->data, m->row_bytes, slots[i].rows, slots[i].cols,
                        buf.data() + off);
      m->panels = buf.data() + off;
      off += panel_bytes(i);
    }
    kept[i] = true;
  }
  return {std::move(nw), std::move(buf), std::move(kept), in_place ? f.mapping() : nullptr};
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string arch = f.require_string("general.architecture");
  if (arch != "llama") {
    fail_expected(f.path() + ": general.architecture",
                  "\"llama\" (kvscope runs Llama-architecture models)", "\"" + arch + "\"");
  }
  const std::string p = arch + ".";
  ModelConfig c;
  c.dim = config_int(f, p + "embedding_length", 1, 1 << 16);
  c.n_layers = config_int(f, p + "block_count", 1, 1024);
  c.hidden_dim = config_int(f, p + "feed_forward_length", 1, 1 << 18);
  c.n_heads = config_int(f, p + "attention.head_count", 1, 1024);
  c.n_kv_heads = config_int(f, p + "attention.head_count_kv", 1, c.n_heads, c.n_heads);
  c.seq_len = config_int(f, p + "context_length", 1, 1 << 24);
  if (c.dim % c.n_heads != 0) {
    fail_expected(f.path() + ": " + p + "embedding_length",
                  "a multiple of the head count " + std::to_string(c.n_heads),
                  std::to_string(c.dim));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    fail_expected(f.path() + ": " + p + "attention.head_count_kv",
                  "a divisor of the head count " + std::to_string(c.n_heads),
                  std::to_string(c.n_kv_heads));
  }
  for (const char* key :
       {"attention.key_length", "attention.value_length", "rope.dimension_count"}) {
    if (auto v = f.get_uint(p + key); v && *v != static_cast<std::uint64_t>(c.head_dim())) {
      fail_expected(f.path() + ": " + p + key,
                    std::to_string(c.head_dim()) +
                        " (embedding_length / head_count: kvscope rotates and attends over whole "
                        "heads)",
                    std::to_string(*v));
    }
  }
  if (auto type = f.get_string(p + "rope.scaling.type"); type && *type != "none") {
    fail_expected(f.path() + ": " + p + "rope.scaling.type", "none (plain RoPE)",
                  "\"" + *type + "\"");
  }
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    throw Error(f.path(),
                "tensor \"rope_freqs.weight\": expected none (plain RoPE), got "
                "per-dimension RoPE frequency factors (Llama 3.1 style), which kvscope "
                "does not run");
  }
  const double theta = f.get_float(p + "rope.freq_base").value_or(10000.0);
  const double eps = f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  if (!(theta > 1.0 && theta < 1e12)) {
    fail_expected(f.path() + ": " + p + "rope.freq_base", "a number in (1, 1e12)",
                  std::to_string(theta));
  }
  if (!(eps > 0.0 && eps < 1.0)) {
    fail_expected(f.path() + ": " + p + "attention.layer_norm_rms_epsilon", "a number in (0, 1)",
                  std::to_string(eps));
  }
  c.rope_theta = static_cast<float>(theta);
  c.rms_eps = static_cast<float>(eps);
  // The vocabulary: the key, else the token list, else the embedding's rows.
  std::optional<std::int64_t> vocab;
  if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens"); tokens && tokens->is_array()) {
    vocab = static_cast<std::int64_t>(tokens->items().size());
  } else if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
             emb && emb->dims.size() == 2) {
    vocab = emb->dims[1];
  }
  c.vocab_size = config_int(f, p + "vocab_size", 1, 1 << 22, vocab);
  c.shared_classifier = f.find_tensor("output.weight") == nullptr;
  return c;
}

std::shared_ptr<const Model> load_gguf_model(const GgufFile& f, WeightFormat format) {
  const std::string& path = f.path();
  const ModelConfig c = gguf_model_config(f);
  const std::vector<TensorSlot> slots = legacy_slots(c);
  // Check every tensor before allocating, and count the types the file stores.
  std::map<std::string, int> type_counts;
  std::vector<const GgufTensorInfo*> infos;
  for (const TensorSlot& s : slots) {
    infos.push_back(&checked_tensor(f, s));
    ++type_counts[ggml_type_traits(infos.back()->type)->name];
  }
  std::set<std::string> used;
  for (const TensorSlot& s : slots) used.insert(s.name);
  for (const GgufTensorInfo& t : f.tensors()) {
    if (!used.count(t.name)) {
      throw Error(path, "tensor \"" + t.name +
                            "\": expected only the tensors of a Llama model (token_embd, "
                            "blk.N.attn_*/ffn_*, output_norm, output), got this one too");
    }
  }
  std::optional<NativeSet> native;
  if (format == WeightFormat::kNative) native = native_weights(f, c, slots, infos);
  // Uninitialized: the pages of the matrices kept native are not touched until weights() fills
  // them. (What std::make_unique_for_overwrite does; the browser build's libc++ 14 lacks it.)
  std::unique_ptr<float[]> data(new float[static_cast<std::size_t>(c.num_params())]);
  // Dequantize row by row, rows spread over the threads.
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (native && native->kept[i]) continue;
    const TensorSlot& s = slots[i];
    const GgufTensorInfo& t = *infos[i];
    dequantize_rows(static_cast<GgmlType>(t.type), f.tensor_bytes(t).data(),
                    ggml_row_bytes(t.type, s.cols), s.rows, s.cols, data.get() + s.offset);
  }
  std::string types;
  for (const auto& [name, n] : type_counts) {
    types += (types.empty() ? "" : ", ") + name + " x" + std::to_string(n);
  }
  if (!native) return Model::from_gguf(c, std::move(data), path, types);
  return Model::from_gguf(c, std::move(data), path, types, std::move(native->weights),
                          std::move(native->buf), std::move(native->mapping));
}

std::string gguf_chat_template(const GgufFile& file) {
  return file.get_string("tokenizer.chat_template").value_or("");
}

}  // namespace kvscope
