// Loading models: llama2.c checkpoints (legacy v0 and "ak42" v1 fp32), validated, mmapped, zero
// copy, and GGUF files (engine/model/gguf_model.h: quantized blocks kept, or dequantized to fp32);
// writing llama2.c checkpoints (used by `kvscope synth`).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/config.h"
#include "engine/common/mapped_file.h"
#include "engine/common/zeroed_buffer.h"
#include "engine/model/ggml_types.h"

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

// The matrices a GGUF model keeps in their quantized blocks (--weight-format native), one entry
// per layer; an entry whose data is null (a type without a quantized kernel: F32, F16, BF16,
// Q4_K, Q6_K) is read from the fp32 Weights instead. A matrix with blocks has no fp32 copy until
// Model::weights() asks for one.
struct NativeWeights {
  std::vector<QuantMatrix> wq, wk, wv, wo, w1, w2, w3;
  QuantMatrix wcls;
};

// How the forward pass reads GGUF weights: as stored (quantized matmuls) or dequantized to fp32
// at load (the accuracy reference). llama2.c checkpoints are fp32 either way.
enum class WeightFormat { kNative, kF32 };
// "native" / "f32" (the --weight-format flag's values); parse throws kvscope::Error naming `flag`.
const char* weight_format_name(WeightFormat f);
WeightFormat parse_weight_format(const std::string& text, const std::string& flag);

enum class CheckpointFormat { kLegacyV0, kAk42V1, kGguf, kSynthetic };

// Where a checkpoint's weights live once loaded.
enum class WeightStorage {
  kMapped,  // the file's pages, mmapped read-only: zero copy, instant start (the default)
  kCopied,  // copied into anonymous memory that asks for transparent huge pages: costs a copy
            // and model-size RAM, but decode streams the weights with far fewer TLB misses when
            // the page cache holds the file in 4 KiB pages (docs/performance.md, "Speed (CPU
            // decode)")
};
// "mmap" / "copy" (the --weights flag's values); parse throws kvscope::Error naming `flag`.
const char* weight_storage_name(WeightStorage s);
WeightStorage parse_weight_storage(const std::string& text, const std::string& flag);

// A loaded model: its shape, where it came from, and its weights (mmapped or owned).
class Model {
 public:
  const ModelConfig& config() const { return config_; }
  // Every weight as fp32, each pointer filled. On a model with native() blocks the first call
  // dequantizes those matrices (once, thread-safe; dequantize_row's values, the bits
  // --weight-format f32 holds) and keeps them for the model's life: 513 MiB on SmolLM2. For the
  // readers that need floats: the MLA conversion, the CUDA backend's device weights,
  // write_checkpoint, tests. The forward pass reads forward_weights() instead.
  const Weights& weights() const;
  // The same pointers, nothing dequantized: the norms and the matrices without native() blocks
  // are filled; a matrix with blocks is read through them (its fp32 rows hold no values until
  // weights() is called), and the token embedding through embedding_row().
  const Weights& forward_weights() const { return weights_; }
  // Token `token`'s embedding (dim floats) into `out`: dequantized from its row of blocks when the
  // embedding is a native() matrix (the tied classifier), else copied; the same bits either way.
  void embedding_row(int token, float* out) const;
  // Whether every fp32 pointer of forward_weights() is filled: true without native() blocks, and
  // once weights() has dequantized them.
  bool f32_complete() const { return lazy_f32_bytes_ == 0 || lazy_done_.load(); }
  const std::string& source() const { return source_; }
  CheckpointFormat format() const { return format_; }
  bool is_random_weights() const { return format_ == CheckpointFormat::kSynthetic; }
  WeightStorage storage() const { return storage_; }
  // The quantized matrices the forward pass reads (--weight-format native on a GGUF file whose
  // matrices have quantized kernels), or null: every matmul reads the fp32 weights.
  const NativeWeights* native() const { return native_ ? &*native_ : nullptr; }
  // kNative when native() is set, else kF32.
  WeightFormat weight_format() const {
    return native_ ? WeightFormat::kNative : WeightFormat::kF32;
  }
  // Bytes the engine holds for the quantized matrices of native() (0 without them): their panels
  // for the x86 kernels, and their blocks unless those are read in place from the file's mapping
  // (native_blocks_in_file()).
  std::int64_t native_bytes() const { return static_cast<std::int64_t>(native_buf_.size()); }
  bool native_blocks_in_file() const { return native_file_ != nullptr; }
  // How the file stores its weights: "fp32" for llama2.c files, e.g. "Q4_1 x210, F32 x61,
  // Q8_0 x1" for GGUF (tensor type counts).
  const std::string& weight_types() const { return weight_types_; }
  // Bytes of fp32 weights the engine holds in memory now (the mapping, the copy or the owned
  // floats; on a native GGUF model only the tensors without blocks until weights() dequantizes
  // the rest); the quantized matrices of native() come on top (native_bytes()).
  std::int64_t weight_bytes() const;
  // Bytes of fp32 the first weights() call adds (the native() matrices as fp32), 0 once it has.
  std::int64_t lazy_f32_bytes() const { return f32_complete() ? 0 : lazy_f32_bytes_; }
  // Copied weights: the share of their bytes on huge pages now, in [0, 1] (-1: unknown); 0 for
  // mapped or synthetic weights.
  double huge_page_fraction() const;

  // Loads and validates a checkpoint (llama2.c or GGUF, told apart by the GGUF magic). Throws
  // kvscope::Error naming the file and field. GGUF weights are owned: with kF32 all dequantized;
  // with kNative the matrices that have quantized kernels are kept as stored (native()) and the
  // other tensors dequantized.
  static std::shared_ptr<const Model> load(const std::string& path,
                                           WeightStorage storage = WeightStorage::kMapped,
                                           WeightFormat format = WeightFormat::kNative);
  // Wraps owned float storage laid out in legacy order (see write_checkpoint).
  static std::shared_ptr<const Model> from_owned(ModelConfig config, std::vector<float> data,
                                                 std::string source);
  // Wraps weights dequantized from a GGUF file: num_params() floats laid out as from_owned
  // expects but without the RoPE tables, every tensor filled except the matrices `native` has
  // blocks for (weights() fills those from the blocks). `native`, when given, points into
  // `native_buf`, which the model keeps.
  static std::shared_ptr<const Model> from_gguf(ModelConfig config, std::unique_ptr<float[]> data,
                                                std::string source, std::string weight_types,
                                                std::optional<NativeWeights> native = std::nullopt,
                                                ZeroedBuffer native_buf = {},
                                                std::shared_ptr<const MappedFile> native_file = {});

 private:
  // Owned floats in the legacy layout, with or without llama2.c's RoPE tables; checks the count.
  static std::shared_ptr<Model> wrap_owned(ModelConfig config, std::vector<float> data,
                                           std::string source, CheckpointFormat format,
                                           bool rope_tables);
  // Dequantizes the native() matrices into their fp32 places (weights()' first call).
  void fill_native_f32() const;
  ModelConfig config_;
  Weights weights_;
  std::string source_;
  std::string weight_types_ = "fp32";
  CheckpointFormat format_ = CheckpointFormat::kLegacyV0;
  WeightStorage storage_ = WeightStorage::kMapped;
  MappedFile file_;                    // set when mmapped
  ZeroedBuffer copy_;                  // set when copied
  std::vector<float> owned_;           // set when synthetic
  std::unique_ptr<float[]> gguf_f32_;  // set for GGUF: the legacy layout, num_params() floats
  std::int64_t f32_bytes_ = 0;         // of gguf_f32_, filled at load
  std::int64_t lazy_f32_bytes_ = 0;    // of gguf_f32_, filled by weights() (native matrices)
  mutable std::once_flag lazy_once_;
  mutable std::atomic<bool> lazy_done_{false};
  std::optional<NativeWeights> native_;
  ZeroedBuffer native_buf_;  // the quantized matrices native_ points into (their panels)
  std::shared_ptr<const MappedFile> native_file_;  // the file native_'s blocks are read from in
                                                   // place, when they are not in native_buf_
};

// Reads only the header of a checkpoint or the metadata of a GGUF file (cheap; `kvscope info`).
ModelConfig read_checkpoint_config(const std::string& path);

// Writes `model` as a legacy (v0) llama2.c checkpoint, atomically.
void write_checkpoint(const Model& model, const std::string& path);

}  // namespace kvscope
