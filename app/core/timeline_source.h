// Adapter from the engine's Timeline to the UI's DataSource: the whole wiring to real runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "app/core/data_source.h"
#include "app/core/run_info.h"
#include "engine/model/tokenizer_text.h"
#include "engine/trace/timeline.h"

namespace kvscope::ui {

class TimelineSource final : public DataSource {
 public:
  // `live` (optional) is true while a worker still appends steps to the timeline.
  TimelineSource(std::shared_ptr<const Timeline> timeline, std::string origin,
                 std::shared_ptr<const std::atomic<bool>> live = nullptr)
      : timeline_(std::move(timeline)), origin_(std::move(origin)), live_(std::move(live)) {}
  const TimelineHeader& header() const override { return timeline_->header(); }
  int num_steps() const override { return timeline_->num_steps(); }
  std::span<const StepMetrics> all_metrics() const override { return timeline_->all_metrics(); }
  void state_at(int step, PoolState& out) const override { timeline_->state_at(step, out); }
  bool is_demo() const override { return false; }
  bool is_live() const override { return live_ && live_->load(); }
  std::string describe() const override { return origin_; }
  std::span<const Event> events_at(int step) const override { return timeline_->events_at(step); }
  const Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  // The tokenizer's text (set_text_info), else the Timeline header's: a scenario run's tokenizer
  // or the pieces a recording carries.
  const TokenText* token_text() const override {
    return text_ ? text_.get() : timeline_->header().text.get();
  }
  // set_text_info's prompts, else those the Timeline header's text holds (recordings).
  std::span<const int> prompt_tokens(int request) const override {
    if (prompts_.empty() && timeline_->header().text)
      return timeline_->header().text->prompt(request);
    if (request < 0 || static_cast<std::size_t>(request) >= prompts_.size()) return {};
    return prompts_[static_cast<std::size_t>(request)];
  }
  // The tokenizer and prompts of the scenario's requests (by request id), for the text panel.
  void set_text_info(std::shared_ptr<const Tokenizer> tokenizer,
                     std::vector<std::vector<int>> prompts) {
    text_ = tokenizer ? std::make_shared<TokenizerText>(tokenizer, prompts) : nullptr;
    tokenizer_ = std::move(tokenizer);
    prompts_ = std::move(prompts);
  }
  void set_run_info(std::shared_ptr<const RunInfo> info) { info_ = std::move(info); }
  std::shared_ptr<const RunInfo> run_info() const override { return info_; }
  void set_attach_feed(std::shared_ptr<AttachFeed> feed) { feed_ = std::move(feed); }
  std::shared_ptr<AttachFeed> attach_feed() const override { return feed_; }
  const Timeline& timeline() const { return *timeline_; }
  // Token eviction, from the EvictedPosition events (a recompute preemption makes every token live
  // again: the request's tokens are replayed from scratch and evicted anew).
  std::vector<std::uint8_t> slot_live(int request, int step) const override;

 private:
  struct EvictionMark {
    std::int32_t step;
    std::int32_t token;  // the evicted token, or -1: every token live again (recompute)
  };
  void scan_evictions() const;
  std::shared_ptr<const Timeline> timeline_;
  std::string origin_;  // the scenario or recording path
  std::shared_ptr<const std::atomic<bool>> live_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const TokenText> text_;  // tokenizer_'s text, null without one
  std::vector<std::vector<int>> prompts_;  // [request id] prompt token ids
  std::shared_ptr<const RunInfo> info_;
  std::shared_ptr<AttachFeed> feed_;
  // Eviction marks by request, indexed incrementally as the timeline grows (render thread only).
  mutable std::unordered_map<int, std::vector<EvictionMark>> evictions_;
  mutable std::size_t events_scanned_ = 0;
};

}  // namespace kvscope::ui
