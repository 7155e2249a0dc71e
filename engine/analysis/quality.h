// Quality of a KV cache variant measured on the real model: the same token windows are run with
// the exact fp32 cache and with the variant (a KV format, a token eviction policy, or an MLA latent
// cache), and next-token distributions are compared position by position: perplexity of
// each, KL(reference || variant) mean and max, top-1 agreement, and the variant's exact bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/common/log_softmax.h"
#include "engine/infer/transformer.h"
#include "engine/kv/kv_format.h"
#include "engine/model/tokenizer.h"

namespace kvscope {

// ---- metric math (pure functions, unit-tested on hand-made distributions) ----

// log_softmax(logits, out) comes from engine/common/log_softmax.h (double out for stable
// differences).
// KL(p || q) = sum_i p_i (log p_i - log q_i) from log-probabilities; >= 0.
double kl_divergence(std::span<const double> log_p, std::span<const double> log_q);
// The same, given p = exp(log_p) as well (the same bits as computing it here).
double kl_divergence(std::span<const double> log_p, std::span<const double> p,
                     std::span<const double> log_q);
// The index of the largest log-prob (the first of equals): the top-1 token.
long top_token(std::span<const double> log_p);
// exp(mean negative log-likelihood).
double perplexity(double sum_nll, long count);

// Sums per-position statistics; result() turns them into the report's figures.
class QualityAccumulator {
 public:
  // One position: reference and variant log-probs [vocab] and the true next token.
  void add(std::span<const double> ref_log_p, std::span<const double> var_log_p, int target);
  // add() given what depends on the reference alone, computed once for all the variants scored at
  // the position: its probabilities exp(ref_log_p) and its top-1 token. The same figures, bit for
  // bit.
  void add(std::span<const double> ref_log_p, std::span<const double> ref_p, long ref_top,
           std::span<const double> var_log_p, int target);
  // One position from its parts: the two log-probs of the true next token, the KL and whether the
  // two top-1 tokens agree (what add() computes them as).
  void add_scored(double ref_log_p_target, double var_log_p_target, double kl, bool same_top);
  long positions() const { return positions_; }
  double ppl_reference() const { return perplexity(nll_ref_, positions_); }
  double ppl_variant() const { return perplexity(nll_var_, positions_); }
  double kl_mean() const { return positions_ ? kl_sum_ / positions_ : 0.0; }
  double kl_max() const { return kl_max_; }
  double top1_agreement() const {
    return positions_ ? static_cast<double>(top1_same_) / positions_ : 0.0;
  }

 private:
  long positions_ = 0;
  long top1_same_ = 0;
  double nll_ref_ = 0.0, nll_var_ = 0.0, kl_sum_ = 0.0, kl_max_ = 0.0;
};

// ---- cache variants ----

// What a variant's cache costs: exact bytes per token held in blocks (all layers, K and V) plus
// bytes every sequence holds regardless of length (KIVI's full-precision open group).
struct CacheFootprint {
  double bytes_per_token = 0.0;
  double bytes_per_sequence = 0.0;
  // Average cost per token for sequences of `tokens` tokens.
  double effective_bytes_per_token(double tokens) const {
    return bytes_per_token + (tokens > 0 ? bytes_per_sequence / tokens : 0.0);
  }
};

// A way of caching K/V to compare against the exact fp32 cache. Implementations own their cache;
// eviction and MLA variants implement the same two calls.
// One variant's run over one window a position at a time, so that several variants can share
// each engine step (QualityEvaluator::evaluate_all): each position's token goes into a step with
// the other variants' tokens, each with its own cache.
class VariantStepper {
 public:
  virtual ~VariantStepper() = default;
  // Position pos's token for the step (its own view, RoPE position and observer; logits wanted).
  // Its view stays valid until after(pos).
  virtual StepToken prepare(int pos) = 0;
  // After position pos's logits were taken (a policy may now act on them).
  virtual void after(int pos) = 0;
  // After the window's last position: the variant's statistics include the window.
  virtual void finish() = 0;
};

// Runs `window` through `stepper` alone, one position per engine step: what a stepper variant's
// run() does (the lockstep of evaluate_all runs the same calls with other variants beside it).
void run_stepper(VariantStepper& stepper, Transformer& t, const std::vector<int>& window,
                 const std::function<void(int, std::span<const float>)>& on_logits);

class CacheVariant {
 public:
  virtual ~CacheVariant() = default;
  virtual std::string name() const = 0;
  virtual CacheFootprint footprint(const ModelConfig& c) const = 0;
  // Runs `window` (window[0] = BOS) teacher-forced from position 0 with a fresh cache, calling
  // on_logits(pos, logits[vocab]) after each position.
  virtual void run(Transformer& t, const std::vector<int>& window,
                   const std::function<void(int, std::span<const float>)>& on_logits) = 0;
  // Whether the variant is the exact fp32 cache in blocks of `block_size`: what the evaluator's
  // reference already ran (its figures are the reference's own; nothing is run again).
  virtual bool is_fp32_cache(int block_size) const {
    (void)block_size;
    return false;
  }
  // Whether the variant runs one position per step (token eviction, whose policy acts between
  // positions) and so has a stepper; the others run a window their own way (the KV formats and MLA
  // run a window in chunks of tokens).
  virtual bool has_stepper() const { return false; }
  // A stepper over `window` with a fresh cache (only when has_stepper()).
  virtual std::unique_ptr<VariantStepper> stepper(Transformer& t, const std::vector<int>& window) {
    (void)t;
    (void)window;
    return nullptr;
  }
};

// K and V stored in the given formats in a paged cache of `block_size`.
std::unique_ptr<CacheVariant> make_kv_format_variant(const KvFormat& k, const KvFormat& v,
                                                     int block_size);

struct MlaCodec;  // engine/mla/mla_codec.h
// An MLA latent cache (mode A or B, engine/mla) holding latents and RoPE keys in `format`, paged.
std::unique_ptr<CacheVariant> make_mla_variant(std::shared_ptr<const MlaCodec> codec,
                                               const KvFormat& format, int block_size);

// ---- the evaluator ----

// Figures over the scored positions of one position bucket [first, first + size).
struct BucketQuality {
  int first = 0;
  long positions = 0;
  double ppl_reference = 0.0;
  double ppl_variant = 0.0;
  double kl_mean = 0.0;
  double top1_agreement = 0.0;
};

// Which positions evaluate() scores, and how it groups them.
struct EvalScope {
  int score_from = 0;   // positions < score_from are run but not scored (a prompt)
  int bucket_size = 0;  // > 0: also report figures per bucket of positions
};

struct QualityReport {
  std::string variant;
  long positions = 0;  // scored next-token predictions
  int windows = 0;
  double ppl_reference = 0.0;
  double ppl_variant = 0.0;
  double kl_mean = 0.0;  // nats
  double kl_max = 0.0;   // nats
  double top1_agreement = 0.0;
  CacheFootprint footprint;
  double mean_window_tokens = 0.0;
  double effective_bytes_per_token = 0.0;  // footprint at the mean window length
  double reference_bytes_per_token = 0.0;  // fp32 cache, same model
  std::vector<BucketQuality> buckets;      // when EvalScope::bucket_size > 0
};

using ProgressFn = std::function<void(long done, long total)>;

class QualityEvaluator {
 public:
  // `windows`: token sequences each starting with BOS and at most `max_window` long (0: the
  // model's seq_len; longer windows run past the trained context with dense attention).
  // Runs the fp32 reference once, now, keeping its log-probs for every variant evaluated later.
  QualityEvaluator(Transformer& transformer, std::vector<std::vector<int>> windows, int block_size,
                   const ProgressFn& progress = {}, int max_window = 0);
  QualityReport evaluate(CacheVariant& variant, const ProgressFn& progress = {},
                         const EvalScope& scope = {}) const;
  // evaluate() of every variant, reports in their order. Variants with a stepper run in lockstep,
  // each position of a window one engine step holding every one of them (the weights are read
  // once per step, not once per variant); the others run one after another. Each report equals
  // what evaluate() gives (a batched step is bit-identical to its tokens run alone). Progress
  // counts positions of all variants. `on_report(i, report)`, when given, hears each variant's
  // report as soon as it is final (the ones run alone one by one, the lockstep ones at the end),
  // so a caller can show results before the whole call returns.
  using ReportFn = std::function<void(std::size_t index, const QualityReport& report)>;
  std::vector<QualityReport> evaluate_all(std::span<CacheVariant* const> variants,
                                          const ProgressFn& progress = {},
                                          const EvalScope& scope = {},
                                          const ReportFn& on_report = {}) const;
  long num_positions() const { return num_positions_; }
  const std::vector<std::vector<int>>& windows() const { return windows_; }

 private:
  Transformer& transformer_;
  std::vector<std::vector<int>> windows_;
  // Scores one variant's positions into its figures (overall and per bucket).
  class Scorer;
  struct RefRow;
  class RefRing;
  QualityReport report_of(const Scorer& s, CacheVariant& variant) const;
  int block_size_;
  std::vector<double> reference_;    // [num_positions][vocab] fp32-cache reference log-probs
  std::vector<long> reference_top_;  // [num_positions] their top-1 tokens
  long num_positions_ = 0;
  double reference_bytes_per_token_ = 0.0;
};

// ---- eval inputs ----

// The shipped evaluation text (assets/text/eval_stories.txt): eval's, the UI's quality sweep's and
// the memory measurement's default.
std::string default_eval_text_path();

// Splits text into stories at blank lines, encodes each with BOS, and cuts stories longer than
// `max_len` tokens into windows (each restarting with BOS). A tokenizer whose model puts no BOS
// between documents (adds_bos() false: SmolLM2) reads the whole text as one document, blank
// lines included, and only each window starts with its BOS. Throws if nothing remains.
std::vector<std::vector<int>> text_windows(const Tokenizer& tokenizer, const std::string& text,
                                           int max_len, const std::string& where);
// Stories concatenated into one token stream (each story starting with BOS, as in training) and
// cut into windows of `len` tokens, each BOS + the next len - 1 tokens (the last may be shorter).
std::vector<std::vector<int>> long_text_windows(const Tokenizer& tokenizer, const std::string& text,
                                                int len, const std::string& where);
// Text sampled from the model itself at temperature 1 (no top-p) with `seed`: stories from BOS
// until at least `num_tokens` tokens are collected, each at most seq_len long.
std::vector<std::vector<int>> sample_windows(Transformer& transformer, long num_tokens,
                                             std::uint64_t seed);

}  // namespace kvscope
