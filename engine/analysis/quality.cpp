// Quality evaluation of KV cache variants against the exact fp32 cache.
#include "engine/analysis/quality.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "engine/common/error.h"
#include "engine/infer/generate.h"
#include "engine/infer/step_runner.h"
#include "engine/kv/cache_manager.h"
#include "engine/mla/mla_codec.h"

namespace kvscope {

std::string default_eval_text_path() {
  return std::string(KVSCOPE_SOURCE_DIR) + "/assets/text/eval_stories.txt";
}

namespace {

// kl + p * d with one rounding where the CPU has fused multiply-adds (what the compiler makes of
// `kl += p * d` there), two where it has not: spelled out, so that both KL loops below give the
// same bits however the compiler vectorizes them.
inline double add_product(double kl, double p, double d) {
#if defined(__FMA__)
  return std::fma(p, d, kl);
#else
  return kl + p * d;
#endif
}

// kl[j] = KL(ref_j || var_j) given ref_j's probabilities, and top[j] = var_j's top-1 token, for M
// positions at once, their chains side by side, each as kl_divergence and top_token compute it.
template <std::size_t M>
void kl_and_top(const double* const* ref_log_p, const double* const* ref_p,
                const double* const* var_log_p, std::size_t vocab, double* kl, long* top) {
  double sum[M];
  std::size_t best[M];
  for (std::size_t j = 0; j < M; ++j) {
    sum[j] = 0.0;
    best[j] = 0;
  }
  for (std::size_t i = 0; i < vocab; ++i) {
    for (std::size_t j = 0; j < M; ++j) {
      const double p = ref_p[j][i];
      if (p > 0.0) sum[j] = add_product(sum[j], p, ref_log_p[j][i] - var_log_p[j][i]);
      if (var_log_p[j][best[j]] < var_log_p[j][i]) best[j] = i;  // the first of equals stays
    }
  }
  for (std::size_t j = 0; j < M; ++j) {
    kl[j] = std::max(0.0, sum[j]);
    top[j] = static_cast<long>(best[j]);
  }
}

template <std::size_t... M>
void kl_and_top_n(std::size_t m, const double* const* ref_log_p, const double* const* ref_p,
                  const double* const* var_log_p, std::size_t vocab, double* kl, long* top,
                  std::index_sequence<M...>) {
  ((m == M + 1 ? kl_and_top<M + 1>(ref_log_p, ref_p, var_log_p, vocab, kl, top) : void()), ...);
}

}  // namespace

double kl_divergence(std::span<const double> log_p, std::span<const double> log_q) {
  double kl = 0.0;
  for (std::size_t i = 0; i < log_p.size(); ++i) {
    const double p = std::exp(log_p[i]);
    if (p > 0.0) kl = add_product(kl, p, log_p[i] - log_q[i]);
  }
  return std::max(0.0, kl);  // rounding can leave -1e-17 for identical distributions
}

double kl_divergence(std::span<const double> log_p, std::span<const double> p,
                     std::span<const double> log_q) {
  const double* lp = log_p.data();
  const double* pp = p.data();
  const double* lq = log_q.data();
  double kl = 0.0;
  long top = 0;
  kl_and_top<1>(&lp, &pp, &lq, log_p.size(), &kl, &top);
  return kl;
}

long top_token(std::span<const double> log_p) {
  return std::max_element(log_p.begin(), log_p.end()) - log_p.begin();
}

double perplexity(double sum_nll, long count) {
  return count > 0 ? std::exp(sum_nll / count) : 0.0;
}

void QualityAccumulator::add(std::span<const double> ref_log_p, std::span<const double> var_log_p,
                             int target) {
  const auto t = static_cast<std::size_t>(target);
  add_scored(ref_log_p[t], var_log_p[t], kl_divergence(ref_log_p, var_log_p),
             top_token(ref_log_p) == top_token(var_log_p));
}

void QualityAccumulator::add(std::span<const double> ref_log_p, std::span<const double> ref_p,
                             long ref_top, std::span<const double> var_log_p, int target) {
  const auto t = static_cast<std::size_t>(target);
  add_scored(ref_log_p[t], var_log_p[t], kl_divergence(ref_log_p, ref_p, var_log_p),
             ref_top == top_token(var_log_p));
}

void QualityAccumulator::add_scored(double ref_log_p_target, double var_log_p_target, double kl,
                                    bool same_top) {
  nll_ref_ -= ref_log_p_target;
  nll_var_ -= var_log_p_target;
  kl_sum_ += kl;
  kl_max_ = std::max(kl_max_, kl);
  if (same_top) ++top1_same_;
  ++positions_;
}

void run_stepper(VariantStepper& stepper, Transformer& t, const std::vector<int>& window,
                 const std::function<void(int, std::span<const float>)>& on_logits) {
  for (int pos = 0; pos < static_cast<int>(window.size()); ++pos) {
    const StepToken token = stepper.prepare(pos);
    on_logits(pos, t.forward_step(std::span<const StepToken>(&token, 1)));
    stepper.after(pos);
  }
  stepper.finish();
}

namespace {

class KvFormatVariant final : public CacheVariant {
 public:
  KvFormatVariant(const KvFormat& k, const KvFormat& v, int block_size)
      : k_(k), v_(v), block_size_(block_size) {}
  bool is_fp32_cache(int block_size) const override {
    return k_.dtype == KvDtype::kF32 && v_.dtype == KvDtype::kF32 && block_size == block_size_;
  }
  std::string name() const override {
    return k_ == v_ ? k_.name() : "K " + k_.name() + " + V " + v_.name();
  }
  CacheFootprint footprint(const ModelConfig& c) const override {
    const KvLayout L = layout(c);
    return {L.bytes_per_token(), static_cast<double>(L.staging_bytes_per_sequence())};
  }
  void run(Transformer& t, const std::vector<int>& window,
           const std::function<void(int, std::span<const float>)>& on_logits) override {
    // Each slot dequantized once, not once per query that reads it; with it a KIVI window runs
    // in chunks too (each query reads its own moment's open group from the rows as written).
    SoloSequence seq(layout(t.config()), static_cast<int>(window.size()));
    seq.keep_decoded();
    seq.run(t, window, on_logits);
  }

 private:
  // The shape and formats (one block: SoloSequence sizes the pool).
  KvLayout layout(const ModelConfig& c) const { return kv_layout_for(c, block_size_, 1, k_, v_); }
  KvFormat k_, v_;
  int block_size_;
};

class MlaVariant final : public CacheVariant {
 public:
  MlaVariant(std::shared_ptr<const MlaCodec> codec, const KvFormat& format, int block_size)
      : codec_(std::move(codec)), format_(format), block_size_(block_size) {}
  std::string name() const override {
    std::string n = codec_->name();
    if (format_.dtype != KvDtype::kF32) n.append(1, ' ').append(format_.name());
    return n;
  }
  CacheFootprint footprint(const ModelConfig& c) const override {
    const KvLayout L = mla_layout_for(c, *codec_, block_size_, 1, format_);
    return {L.bytes_per_token(), static_cast<double>(L.staging_bytes_per_sequence())};
  }
  void run(Transformer& t, const std::vector<int>& window,
           const std::function<void(int, std::span<const float>)>& on_logits) override {
    SoloSequence(mla_layout_for(t.config(), *codec_, block_size_, 1, format_),
                 static_cast<int>(window.size()), codec_.get())
        .run(t, window, on_logits);
  }

 private:
  std::shared_ptr<const MlaCodec> codec_;
  KvFormat format_;
  int block_size_;
};

}  // namespace

std::unique_ptr<CacheVariant> make_mla_variant(std::shared_ptr<const MlaCodec> codec,
                                               const KvFormat& format, int block_size) {
  return std::make_unique<MlaVariant>(std::move(codec), format, block_size);
}

std::unique_ptr<CacheVariant> make_kv_format_variant(const KvFormat& k, const KvFormat& v,
                                                     int block_size) {
  return std::make_unique<KvFormatVariant>(k, v, block_size);
}

QualityEvaluator::QualityEvaluator(Transformer& transformer, std::vector<std::vector<int>> windows,
                                   int block_size, const ProgressFn& progress, int max_window)
    : transformer_(transformer), windows_(std::move(windows)), block_size_(block_size) {
  const ModelConfig& c = transformer_.config();
  const int max_len = max_window > 0 ? max_window : c.seq_len;
  for (std::size_t w = 0; w < windows_.size(); ++w) {
    const auto& win = windows_[w];
    if (win.size() < 2 || win.size() > static_cast<std::size_t>(max_len)) {
      fail_expected("eval window " + std::to_string(w),
                    "2 to " + std::to_string(max_len) + " tokens", std::to_string(win.size()));
    }
    num_positions_ += static_cast<long>(win.size()) - 1;
  }
  if (num_positions_ == 0) throw Error("eval", "no token windows to evaluate");
  const auto vocab = static_cast<std::size_t>(c.vocab_size);
  reference_.resize(static_cast<std::size_t>(num_positions_) * vocab);
  auto fp32 = make_kv_format_variant(KvFormat{}, KvFormat{}, block_size);
  reference_bytes_per_token_ = fp32->footprint(c).bytes_per_token;
  std::size_t row = 0;
  long done = 0;
  for (const auto& win : windows_) {
    fp32->run(transformer_, win, [&](int pos, std::span<const float> logits) {
      if (pos + 1 >= static_cast<int>(win.size())) return;  // no next token to score
      const std::span<double> log_p(reference_.data() + row * vocab, vocab);
      log_softmax(logits, log_p);
      reference_top_.push_back(top_token(log_p));
      ++row;
      if (progress) progress(++done, num_positions_);
    });
  }
}

// The reference at one position, as every variant's score there reads it.
struct QualityEvaluator::RefRow {
  const double* log_p = nullptr;  // [vocab]
  const double* p = nullptr;      // [vocab] exp(log_p)
  long top = 0;                   // top-1 token
};

namespace {

// Positions a Scorer takes at a time: their KL sums and top-1 searches run side by side, eight
// independent chains of the same operations (each position's figures the bits it gets alone)
// where one position's sum waited on each of its 49,152 additions in turn.
constexpr std::size_t kScoreBatch = 8;

}  // namespace

// The reference's rows for the positions a Scorer holds until it scores them: kScoreBatch slots,
// the next one filled for each scored position (every Scorer fed from one ring takes the same
// positions, so a slot is reused only once they all scored it).
class QualityEvaluator::RefRing {
 public:
  RefRing(const QualityEvaluator& e, std::size_t vocab)
      : e_(e), vocab_(vocab), p_(kScoreBatch * vocab) {}
  // Reference row `row` with its probabilities in the next slot.
  RefRow next(std::size_t row) {
    double* p = p_.data() + (used_++ % kScoreBatch) * vocab_;
    RefRow r;
    r.log_p = e_.reference_.data() + row * vocab_;
    for (std::size_t i = 0; i < vocab_; ++i) p[i] = std::exp(r.log_p[i]);
    r.p = p;
    r.top = e_.reference_top_[row];
    return r;
  }

 private:
  const QualityEvaluator& e_;
  std::size_t vocab_;
  std::vector<double> p_;
  std::size_t used_ = 0;
};

// One variant's positions scored against the reference: overall and per bucket, kScoreBatch
// positions at a time (flush() scores what is held).
class QualityEvaluator::Scorer {
 public:
  Scorer(const EvalScope& scope, std::size_t vocab)
      : scope_(scope), vocab_(vocab), log_p_(kScoreBatch * vocab) {}
  // Whether position pos is scored (the last position has no next token: not passed here).
  bool scores(int pos) const { return pos >= scope_.score_from; }
  // Position pos of `win` (scores(pos)), whose reference row is `ref` (from a RefRing).
  void add(const std::vector<int>& win, int pos, const RefRow& ref, std::span<const float> logits) {
    double* log_p = log_p_.data() + held_.size() * vocab_;
    log_softmax(logits, std::span<double>(log_p, vocab_));
    hold(win, pos, ref, log_p);
  }
  // The variant's log-probs given (the reference's own, for a variant that is the reference;
  // they must outlive the next flush).
  void add_log_p(const std::vector<int>& win, int pos, const RefRow& ref, const double* log_p) {
    hold(win, pos, ref, log_p);
  }
  void flush() {
    const std::size_t m = held_.size();
    if (m == 0) return;
    const double* ref_log_p[kScoreBatch];
    const double* ref_p[kScoreBatch];
    const double* var_log_p[kScoreBatch];
    for (std::size_t j = 0; j < m; ++j) {
      ref_log_p[j] = held_[j].ref.log_p;
      ref_p[j] = held_[j].ref.p;
      var_log_p[j] = held_[j].log_p;
    }
    double kl[kScoreBatch];
    long top[kScoreBatch];
    kl_and_top_n(m, ref_log_p, ref_p, var_log_p, vocab_, kl, top,
                 std::make_index_sequence<kScoreBatch>{});
    for (std::size_t j = 0; j < m; ++j) {
      const Held& h = held_[j];
      const auto t = static_cast<std::size_t>(h.target);
      const bool same_top = h.ref.top == top[j];
      acc.add_scored(h.ref.log_p[t], h.log_p[t], kl[j], same_top);
      if (scope_.bucket_size > 0) {
        const auto b = static_cast<std::size_t>(h.pos / scope_.bucket_size);
        if (buckets.size() <= b) buckets.resize(b + 1);
        buckets[b].add_scored(h.ref.log_p[t], h.log_p[t], kl[j], same_top);
      }
    }
    held_.clear();
  }
  QualityAccumulator acc;
  std::vector<QualityAccumulator> buckets;  // [position / bucket_size]
  int bucket_size() const { return scope_.bucket_size; }

 private:
  struct Held {
    RefRow ref;
    const double* log_p;
    int target;
    int pos;
  };
  void hold(const std::vector<int>& win, int pos, const RefRow& ref, const double* log_p) {
    held_.push_back({ref, log_p, win[static_cast<std::size_t>(pos) + 1], pos});
    if (held_.size() == kScoreBatch) flush();
  }
  EvalScope scope_;
  std::size_t vocab_;
  std::vector<double> log_p_;  // [kScoreBatch][vocab] the variant's log-probs of the held positions
  std::vector<Held> held_;
};

QualityReport QualityEvaluator::report_of(const Scorer& s, CacheVariant& variant) const {
  const ModelConfig& c = transformer_.config();
  long tokens = 0;
  for (const auto& win : windows_) tokens += static_cast<long>(win.size());
  const QualityAccumulator& acc = s.acc;
  QualityReport r;
  r.variant = variant.name();
  r.positions = acc.positions();
  r.windows = static_cast<int>(windows_.size());
  r.ppl_reference = acc.ppl_reference();
  r.ppl_variant = acc.ppl_variant();
  r.kl_mean = acc.kl_mean();
  r.kl_max = acc.kl_max();
  r.top1_agreement = acc.top1_agreement();
  r.footprint = variant.footprint(c);
  r.mean_window_tokens = static_cast<double>(tokens) / static_cast<double>(windows_.size());
  r.effective_bytes_per_token = r.footprint.effective_bytes_per_token(r.mean_window_tokens);
  r.reference_bytes_per_token = reference_bytes_per_token_;
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    const QualityAccumulator& a = s.buckets[b];
    if (a.positions() == 0) continue;
    r.buckets.push_back({static_cast<int>(b) * s.bucket_size(), a.positions(), a.ppl_reference(),
                         a.ppl_variant(), a.kl_mean(), a.top1_agreement()});
  }
  return r;
}

QualityReport QualityEvaluator::evaluate(CacheVariant& variant, const ProgressFn& progress,
                                         const EvalScope& scope) const {
  const auto vocab = static_cast<std::size_t>(transformer_.config().vocab_size);
  Scorer scorer(scope, vocab);
  RefRing ring(*this, vocab);
  std::size_t row = 0;
  long done = 0;
  if (variant.is_fp32_cache(block_size_)) {
    // The reference run again would give its logits again, bit for bit: its own log-probs are
    // scored, without running the windows a second time.
    for (const auto& win : windows_) {
      for (int pos = 0; pos + 1 < static_cast<int>(win.size()); ++pos, ++row) {
        if (scorer.scores(pos)) {
          const RefRow ref = ring.next(row);
          scorer.add_log_p(win, pos, ref, ref.log_p);
        }
        if (progress) progress(++done, num_positions_);
      }
    }
    scorer.flush();
    return report_of(scorer, variant);
  }
  for (const auto& win : windows_) {
    variant.run(transformer_, win, [&](int pos, std::span<const float> logits) {
      if (pos + 1 >= static_cast<int>(win.size())) return;
      if (scorer.scores(pos)) scorer.add(win, pos, ring.next(row), logits);
      ++row;
      if (progress) progress(++done, num_positions_);
    });
  }
  scorer.flush();
  return report_of(scorer, variant);
}

std::vector<QualityReport> QualityEvaluator::evaluate_all(std::span<CacheVariant* const> variants,
                                                          const ProgressFn& progress,
                                                          const EvalScope& scope,
                                                          const ReportFn& on_report) const {
  const auto vocab = static_cast<std::size_t>(transformer_.config().vocab_size);
  const long total = num_positions_ * static_cast<long>(variants.size());
  long done = 0;
  // Progress of the whole call from a single evaluate()'s.
  const auto one = [&](long d, long) {
    if (progress) progress(done + d, total);
  };
  std::vector<QualityReport> reports(variants.size());
  std::vector<std::size_t> stepped;  // variants run in lockstep
  for (std::size_t i = 0; i < variants.size(); ++i) {
    if (variants[i]->has_stepper()) {
      stepped.push_back(i);
      continue;
    }
    reports[i] = evaluate(*variants[i], one, scope);
    done += num_positions_;
    if (on_report) on_report(i, reports[i]);
  }
  if (stepped.empty()) return reports;
  std::vector<Scorer> scorers(stepped.size(), Scorer(scope, vocab));
  std::vector<std::unique_ptr<VariantStepper>> steppers(stepped.size());
  std::vector<StepToken> step(stepped.size());
  RefRing ring(*this, vocab);  // the reference's probabilities at a position, for all of them
  std::size_t row = 0;         // the window's first reference row
  for (const auto& win : windows_) {
    for (std::size_t k = 0; k < stepped.size(); ++k) {
      steppers[k] = variants[stepped[k]]->stepper(transformer_, win);
      if (steppers[k] == nullptr) {
        throw InternalError("eval",
                            variants[stepped[k]]->name() + " says it steps but has no stepper");
      }
    }
    const int n = static_cast<int>(win.size());
    for (int pos = 0; pos < n; ++pos) {
      for (std::size_t k = 0; k < stepped.size(); ++k) step[k] = steppers[k]->prepare(pos);
      const std::span<const float> logits = transformer_.forward_step(step);
      const bool scored = pos + 1 < n && scorers.front().scores(pos);
      RefRow ref;
      if (scored) ref = ring.next(row + static_cast<std::size_t>(pos));
      for (std::size_t k = 0; k < stepped.size(); ++k) {
        if (scored) scorers[k].add(win, pos, ref, logits.subspan(k * vocab, vocab));
        steppers[k]->after(pos);
      }
      if (progress && pos + 1 < n) {
        done += static_cast<long>(stepped.size());
        progress(done, total);
      }
    }
    for (auto& s : steppers) s->finish();
    row += win.size() - 1;
  }
  for (Scorer& s : scorers) s.flush();
  for (std::size_t k = 0; k < stepped.size(); ++k) {
    reports[stepped[k]] = report_of(scorers[k], *variants[stepped[k]]);
    if (on_report) on_report(stepped[k], reports[stepped[k]]);
  }
  return reports;
}

std::vector<std::vector<int>> text_windows(const Tokenizer& tokenizer, const std::string& text,
                                           int max_len, const std::string& where) {
  std::vector<std::vector<int>> windows;
  std::size_t start = 0;
  const bool one_document = !tokenizer.adds_bos();
  while (start < text.size()) {
    std::size_t end = one_document ? std::string::npos : text.find("\n\n", start);
    if (end == std::string::npos) end = text.size();
    std::string story = text.substr(start, end - start);
    start = end + 2;
    // Trim surrounding whitespace and newlines.
    const auto first = story.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) continue;
    story = story.substr(first, story.find_last_not_of(" \t\r\n") - first + 1);
    const std::vector<int> tokens = tokenizer.encode(story, /*bos=*/false, /*eos=*/false);
    // Cut into windows of at most max_len, each starting with BOS.
    for (std::size_t i = 0; i < tokens.size(); i += static_cast<std::size_t>(max_len) - 1) {
      std::vector<int> win = {tokenizer.bos_id()};
      const std::size_t stop = std::min(tokens.size(), i + static_cast<std::size_t>(max_len) - 1);
      win.insert(win.end(), tokens.begin() + static_cast<long>(i),
                 tokens.begin() + static_cast<long>(stop));
      if (win.size() >= 2) windows.push_back(std::move(win));
    }
  }
  if (windows.empty()) throw Error(where, "expected text with at least one story, got none");
  return windows;
}

std::vector<std::vector<int>> long_text_windows(const Tokenizer& tokenizer, const std::string& text,
                                                int len, const std::string& where) {
  if (len < 2) fail_expected("long window length", "at least 2 tokens", std::to_string(len));
  std::vector<int> stream;  // BOS story BOS story ...
  for (const auto& story : text_windows(tokenizer, text, 1 << 30, where)) {
    stream.insert(stream.end(), story.begin(), story.end());
  }
  // Each window starts with BOS, then the next len - 1 tokens of the stream (BOS at story starts).
  std::vector<std::vector<int>> windows;
  const std::size_t step = static_cast<std::size_t>(len) - 1;
  for (std::size_t i = 1; i < stream.size(); i += step) {
    std::vector<int> win = {tokenizer.bos_id()};
    const std::size_t stop = std::min(stream.size(), i + step);
    win.insert(win.end(), stream.begin() + static_cast<long>(i),
               stream.begin() + static_cast<long>(stop));
    windows.push_back(std::move(win));
  }
  return windows;
}

std::vector<std::vector<int>> sample_windows(Transformer& transformer, long num_tokens,
                                             std::uint64_t seed) {
  if (num_tokens < 2)
    fail_expected("sample length", "at least 2 tokens", std::to_string(num_tokens));
  std::vector<std::vector<int>> windows;
  long have = 0;
  GenerateOptions o;
  o.allocator = AllocatorKind::kPaged;
  o.sampler.temperature = 1.0f;
  o.sampler.top_p = 1.0f;
  for (std::uint64_t i = 0; have < num_tokens; ++i) {
    o.sampler.seed = seed + i;
    // BOS plus `steps` sampled tokens: at most seq_len positions.
    const int steps =
        static_cast<int>(std::min<long>(transformer.config().seq_len - 1, num_tokens - have));
    std::vector<int> win = generate_tokens(transformer, {}, std::max(steps, 1), o, nullptr);
    if (i > 100000) break;  // a model that only ever emits BOS
    if (win.size() < 2) continue;
    have += static_cast<long>(win.size()) - 1;
    windows.push_back(std::move(win));
  }
  return windows;
}

}  // namespace kvscope
