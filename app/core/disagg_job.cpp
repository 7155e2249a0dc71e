// DisaggJob: the background colocated and disaggregated runs.
#include "app/core/disagg_job.h"

#include <algorithm>
#include <exception>

#include "engine/common/error.h"
#include "engine/scenario/scenario.h"

namespace kvscope::ui {

bool DisaggJob::start(Request r) {
  if (busy() || !r.info || r.info->scenario_path.empty()) return false;
  steps_done_ = 0;
  return launch([this, r = std::move(r)]() -> std::shared_ptr<DisaggView> {
    auto view = std::make_shared<DisaggView>();
    view->generation = r.generation;
    view->link_choice = r.link;
    view->transfer_choice = r.transfer;
    try {
      const RunInfo& info = *r.info;
      const Scenario s = parse_scenario(info.scenario_path);
      const std::string variant = info.override.variant.empty() ? "base" : info.override.variant;
      const ResolvedRun resolved = resolve_scenario(s, variant, info.shape, info.tokenizer.get());
      view->from_scenario = resolved.disaggregation.has_value();
      DisaggOptions o = resolved.disaggregation.value_or(DisaggOptions{});
      if (!r.link.empty()) o.link = parse_link(r.link, "link");
      if (!r.transfer.empty()) o.transfer = parse_transfer_mode(r.transfer, "transfer");
      o.record_blocks = true;  // the panel draws each pool's blocks
      view->options = o;
      SimConfig config = info.config;  // the run's, with the Controls panel's changes
      config.make_backend = nullptr;   // the CPU: it writes the decode pool's bytes itself
      const SimModel model{info.shape, info.model};
      std::optional<DisaggComparison> both =
          run_both(config, o, model, resolved.requests, [this](Serving) {
            ++steps_done_;
            return !cancelled();
          });
      if (!both) return nullptr;  // cancelled
      view->colocated = std::move(both->colocated);
      view->disaggregated = std::move(both->disaggregated);
      view->co = summarize(view->colocated);
      view->di = summarize(view->disaggregated);
      for (const DisaggReport* rep : {&view->colocated, &view->disaggregated})
        for (const StepRecord& st : rep->steps) view->end = std::max(view->end, st.end);
    } catch (const std::exception& e) {
      view->error = e.what();
    }
    return view;
  });
}

}  // namespace kvscope::ui
