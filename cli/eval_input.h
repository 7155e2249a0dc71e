// What every `kvscope eval` subverb reads the same way: the model and backend flags, the text the
// windows come from (--text, --sample, --long), the KV formats and block size, and the fp32
// reference run that every quality figure is measured against.
#pragma once

#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/analysis/quality.h"
#include "engine/backend/backend.h"
#include "engine/infer/transformer.h"
#include "engine/kv/kv_format.h"
#include "engine/model/locate.h"

namespace kvscope::cli {

// The value flags every eval subverb reads (model, tokenizer, text, sample, seed, long, threads,
// weight format, backend) and `more`.
std::set<std::string> eval_value_flags(std::initializer_list<const char*> more);

// A subverb's --help: `usage_and_flags` (its usage line and own flags), then the input flags
// every eval subverb shares, with the backend lines.
std::string eval_help(const char* usage_and_flags);

// Checks made before any model loads: --text with --sample, --long with --sample, --threads.
void check_eval_input_flags(const Args& args);

// --block-size B (default 16): a power of two in [1, 256].
int eval_block_size(const Args& args);

// --kv-dtype (default `fallback`), or --k-dtype and --v-dtype; both spellings at once is an error.
struct KvFormatPair {
  KvFormat k, v;
};
KvFormatPair eval_kv_formats(const Args& args, const std::string& fallback);
// The pair checked against the model's K/V shape, each error naming the flag that set it.
void validate_kv_formats(const Args& args, const KvFormatPair& f, int block_size,
                         const ModelConfig& c);

// The model (random weights refused: no quality figure means anything there), its backend and
// the transformer on them.
struct EvalModel {
  LoadedModel loaded;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> transformer;
  const ModelConfig& config() const { return transformer->config(); }
};
EvalModel load_eval_model(const Args& args);

// The windows evaluated and where they came from.
struct EvalText {
  std::vector<std::vector<int>> windows;
  std::string source;  // the text file, or how the tokens were sampled
  int max_window = 0;  // the longest window (tokens)
};
EvalText read_eval_text(const Args& args, EvalModel& m);

// The fp32 reference run over `text` (a progress line while it runs).
std::unique_ptr<QualityEvaluator> run_reference(EvalModel& m, EvalText& text, int block_size);

}  // namespace kvscope::cli
