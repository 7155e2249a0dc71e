// Live attach: a running vLLM / SGLang engine's prefix cache as its KV-event stream reports it
// (File > Attach): connection state per rank, cached blocks per rank and medium over time, stores,
// removals and churn per second, LoRA namespaces, the deepest shared prefixes, live blocks per
// medium and KV cache group, and a prefix lookup ("why did my prefix miss?") whose matched blocks
// the prefix tree outlines. The block map, the prefix tree and the scrubber show the same stream
// step by step (one step per batch).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/core/attach_feed.h"
#include "app/panels/panel.h"
#include "app/widgets/plot.h"

namespace kvscope::ui {

class AttachPanel final : public Panel {
 public:
  const char* title() const override { return "Live attach"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/attach.md"; }
  void draw(AppState& state) override;

  // The plotted series for `snap` (tests): live blocks per rank and medium, and the rates.
  static std::vector<PlotSeries> live_series(const AttachSnapshot& snap);
  static std::vector<PlotSeries> rate_series(const AttachSnapshot& snap);

 private:
  void draw_ranks(const AttachSnapshot& snap);
  void draw_tables(const AttachSnapshot& snap);
  void draw_lookup(AttachFeed& feed, const AttachSnapshot& snap, bool presenter);

  std::shared_ptr<const AttachSnapshot> plotted_;  // the snapshot the series below came from
  std::vector<PlotSeries> live_, rates_;
  std::string export_message_;
  // The lookup box: the prompt (token ids, @FILE, or text with the tokenizer), and its error.
  char lookup_prompt_[4096] = "";
  char lookup_tokenizer_[512] = "";
  char lookup_lora_[128] = "";
  std::string lookup_error_;
};

// One line for the status bar: connection per rank, batches, live blocks, lag, gaps.
std::string attach_status_text(const AttachSnapshot& snap);
// The plots' x (seconds since attach) of the timeline's `step`, and back (tests too).
double seconds_at_step(const AttachSnapshot& snap, int step);
int step_at_seconds(const AttachSnapshot& snap, double seconds);
// Whether batches are flowing: one came in the last 10 s and no rank is down or still listening.
bool attach_flowing(const AttachSnapshot& snap);

}  // namespace kvscope::ui
