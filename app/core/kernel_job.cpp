// KernelJob: the background trace.
#include "app/core/kernel_job.h"

#include <exception>

#include "app/core/run_session.h"
#include "engine/common/error.h"
#include "engine/sched/simulator.h"

namespace kvscope::ui {

namespace {

// The view's fields that say what was asked for.
std::shared_ptr<KernelTraceView> new_view(const KernelJob::Request& r) {
  auto view = std::make_shared<KernelTraceView>();
  view->generation = r.generation;
  view->ui_step = r.ui_step;
  view->layer = r.layer;
  view->format_choice = r.format ? r.format->name() : "";
  view->block_choice = r.block_size.value_or(0);
  const SimConfig& run = r.info->config;
  view->same_pool = (!r.format || (*r.format == run.k_format && *r.format == run.v_format)) &&
                    (!r.block_size || *r.block_size == run.block_size);
  return view;
}

}  // namespace

bool KernelJob::start(Request r) {
  if (busy() || !r.info || r.info->scenario_path.empty()) return false;
  steps_done_ = 0;
  steps_needed_ = r.ui_step + 1;
#ifdef __EMSCRIPTEN__
  return launch([r = std::move(r)]() -> std::shared_ptr<KernelTraceView> {
    auto view = new_view(r);
    view->error =
        "the kernel trace runs the CUDA kernels on the SIMT emulator, which the browser build "
        "does not have: use the desktop build (kvscope-ui, or kvscope trace kernel)";
    return view;
  });
#else
  return launch([this, r = std::move(r)]() -> std::shared_ptr<KernelTraceView> {
    auto view = new_view(r);
    try {
      PolicyOverride policy = r.info->override;
      policy.backend = "cuda-sim";
      if (r.format) policy.k_format = policy.v_format = *r.format;
      if (r.block_size) policy.block_size = *r.block_size;
      ScenarioRun built =
          build_scenario_run(r.info->scenario_path, false, policy, r.info->model_override);
      Simulator& sim = *built.sim;
      while (sim.current_step() < r.ui_step) {
        if (cancelled()) return nullptr;
        if (!sim.step()) {
          throw Error(r.info->scenario_path, "the re-run on the emulated device ended at step " +
                                                 std::to_string(sim.current_step() - 1) +
                                                 ", before the step shown");
        }
        steps_done_ = sim.current_step();
      }
      if (cancelled()) return nullptr;
      view->trace =
          std::make_unique<StepKernelTrace>(trace_next_step(sim, r.layer, r.info->scenario_path));
      steps_done_ = sim.current_step();
      view->shape = launch_shape(*view->trace);
      const auto n = static_cast<std::uint32_t>(view->trace->summary.blocks.size());
      view->first_k_load.resize(n);
      for (std::uint32_t b = 0; b < n; ++b) {
        if (cancelled()) return nullptr;
        for (sim::WarpLoad& w : sim::warp_loads(view->trace->launch, b, 64)) {
          if (w.what == sim::kTraceKCodes) {
            view->first_k_load[b] = std::move(w);
            break;
          }
        }
      }
      // The recorded loads themselves are not needed past here (the summary holds the counts).
      view->trace->launch.accesses.clear();
      view->trace->launch.accesses.shrink_to_fit();
    } catch (const std::exception& e) {
      view->trace.reset();
      view->error = e.what();
    }
    return view;
  });
#endif
}

}  // namespace kvscope::ui
