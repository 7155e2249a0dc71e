// The model, text and format flags shared by the eval subverbs.
#include "cli/eval_input.h"

#include <algorithm>

#include "cli/backend_flag.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "engine/common/error.h"
#include "engine/common/text_lines.h"

namespace kvscope::cli {

std::set<std::string> eval_value_flags(std::initializer_list<const char*> more) {
  std::set<std::string> flags = {"--model",   "--tokenizer",     "--text",    "--sample",
                                 "--seed",    "--long",          "--threads", "--weight-format",
                                 "--backend", "--device-weights"};
  flags.insert(more.begin(), more.end());
  return flags;
}

std::string eval_help(const char* usage_and_flags) {
  std::string help = usage_and_flags;
  help += R"(
input (every eval subverb):
  --model PATH|NAME          model (default stories260K.bin; random-weight models are refused)
  --tokenizer PATH           tokenizer (default: found beside the model)
  --text FILE                stories separated by blank lines (default assets/text/eval_stories.txt)
  --sample N                 instead of a text: N tokens sampled from the model (temperature 1)
  --seed S                   seed for --sample (default 1234)
  --long N                   concatenate the stories (BOS between them) into windows of N tokens
                             (N may exceed the model's seq_len: the reference there is dense
                             attention past the trained context)
  --threads N                CPU threads (default: all cores)
  --weight-format native|f32 GGUF weights: native = matmuls on the quantized blocks (default),
                             f32 = dequantized at load (the accuracy reference)
%BACKEND%
)";
  return with_backend_help(help.c_str());
}

void check_eval_input_flags(const Args& args) {
  if (args.has("--sample") && args.has("--text"))
    throw Error("--sample", "give either --text or --sample, not both");
  if (args.has("--long") && args.has("--sample"))
    throw Error("--long", "applies to --text windows, not --sample");
  const int threads = args.get_int("--threads", 0);
  if (threads < 0) fail_expected("--threads", "a non-negative integer", std::to_string(threads));
}

int eval_block_size(const Args& args) {
  const int block_size = args.get_int("--block-size", 16);
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0) {
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(block_size));
  }
  return block_size;
}

KvFormatPair eval_kv_formats(const Args& args, const std::string& fallback) {
  if (args.has("--kv-dtype") && (args.has("--k-dtype") || args.has("--v-dtype")))
    throw Error("--kv-dtype", "give either --kv-dtype or --k-dtype/--v-dtype, not both");
  const std::string both = args.get("--kv-dtype", fallback);
  return {parse_kv_format(args.get("--k-dtype", both),
                          args.has("--k-dtype") ? "--k-dtype" : "--kv-dtype"),
          parse_kv_format(args.get("--v-dtype", both),
                          args.has("--v-dtype") ? "--v-dtype" : "--kv-dtype")};
}

void validate_kv_formats(const Args& args, const KvFormatPair& f, int block_size,
                         const ModelConfig& c) {
  f.k.validate(block_size, c.n_kv_heads, c.head_dim(),
               args.has("--k-dtype") ? "--k-dtype" : "--kv-dtype");
  f.v.validate(block_size, c.n_kv_heads, c.head_dim(),
               args.has("--v-dtype") ? "--v-dtype" : "--kv-dtype");
}

EvalModel load_eval_model(const Args& args) {
  EvalModel m;
  m.loaded = load_model_flags(
      args, WeightStorage::kMapped,
      parse_weight_format(args.get("--weight-format", "native"), "--weight-format"));
  if (m.loaded.model->is_random_weights()) {
    throw Error(m.loaded.model->source(),
                "random weights: no quality figure is meaningful; use a trained model");
  }
  RunNeeds needs;
  needs.model = m.loaded.model.get();
  m.backend = make_backend(args.get("--backend", "auto"), args.get_int("--threads", 0),
                           args.get("--device-weights", "f16"), needs);
  m.transformer = std::make_unique<Transformer>(m.loaded.model, *m.backend);
  return m;
}

EvalText read_eval_text(const Args& args, EvalModel& m) {
  EvalText t;
  if (args.has("--sample")) {
    const long n = args.get_i64("--sample", 0);
    if (n < 2 || n > 10'000'000)
      fail_expected("--sample", "a token count in [2, 10000000]", std::to_string(n));
    const auto seed = static_cast<std::uint64_t>(args.get_i64("--seed", 1234));
    t.windows = sample_windows(*m.transformer, n, seed);
    t.source =
        "sampled " + std::to_string(n) + " tokens, temperature 1, seed " + std::to_string(seed);
  } else {
    if (!m.loaded.tokenizer)
      throw Error(m.loaded.model->source(), "no tokenizer found; pass --tokenizer PATH");
    const std::string path = args.get("--text", default_eval_text_path());
    const int len = args.get_int("--long", 0);
    if (args.has("--long") && (len < 2 || len > 1'000'000))
      fail_expected("--long", "a window length in [2, 1000000] tokens", std::to_string(len));
    const std::string text = read_text_file(path, "cannot open the text file (--text)");
    if (args.has("--long")) {
      t.windows = long_text_windows(*m.loaded.tokenizer, text, len, path);
    } else {
      t.windows = text_windows(*m.loaded.tokenizer, text, m.config().seq_len, path);
    }
    t.source = path;
  }
  for (const auto& w : t.windows) t.max_window = std::max(t.max_window, static_cast<int>(w.size()));
  return t;
}

std::unique_ptr<QualityEvaluator> run_reference(EvalModel& m, EvalText& text, int block_size) {
  Progress progress("eval", 1, "positions");
  progress.step("fp32 reference");
  return std::make_unique<QualityEvaluator>(*m.transformer, std::move(text.windows), block_size,
                                            progress.callback(),
                                            std::max(text.max_window, m.config().seq_len));
}

}  // namespace kvscope::cli
