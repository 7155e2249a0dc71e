// Llama-architecture models from GGUF files: the shape from `llama.*` metadata, the weights in the
// engine's fp32 layout (or kept as stored, --weight-format native), and the tokenizer from
// `tokenizer.ggml.*` metadata.
#pragma once

#include <memory>
#include <string>

#include "engine/model/checkpoint.h"
#include "engine/model/gguf.h"
#include "engine/model/tokenizer.h"

namespace kvscope {

// The model's shape. Throws kvscope::Error naming the key for another architecture, a missing or
// out-of-range key, or a RoPE variant the engine does not run (partial rotary, scaled RoPE).
ModelConfig gguf_model_config(const GgufFile& file);

// Loads the weights, tensors checked by name, type and shape first. kF32 dequantizes every one;
// kNative keeps the matrices whose type has a quantized matmul (has_native_matmul) as stored and
// dequantizes the rest (their fp32 copy comes only when Model::weights() asks for it).
std::shared_ptr<const Model> load_gguf_model(const GgufFile& file,
                                             WeightFormat format = WeightFormat::kNative);

// The tokenizer stored in the file: byte-level BPE ("gpt2") or SentencePiece-style ("llama", run
// with the llama2.c tokenizer). Throws kvscope::Error for other tokenizer models, or when its
// vocabulary size is not `expected_vocab_size`.
std::shared_ptr<const Tokenizer> load_gguf_tokenizer(const GgufFile& file, int expected_vocab_size);

// The chat template of the file (tokenizer.chat_template), or empty.
std::string gguf_chat_template(const GgufFile& file);

}  // namespace kvscope
