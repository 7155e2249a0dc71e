// RunSession: scenario/recording loading and the Simulator worker thread.
#include "app/core/run_session.h"

#include <cstdio>
#include <filesystem>

#include "app/core/timeline_source.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"
#include "engine/scenario/scenario.h"
#include "engine/sched/simulator.h"
#include "kernels/backend/backend_select.h"

namespace kvscope::ui {

namespace {

constexpr int kMaxSteps = 100000;  // same default cap as `kvscope run` when the scenario sets none

bool is_scenario_path(const std::string& path) {
  return std::filesystem::path(path).extension() == ".json";
}

void apply_override(Scenario& s, const PolicyOverride& o) {
  s.cache.sim = with_override(s.cache.sim, o);
  if (o.pool_bytes) s.cache.pool_bytes = *o.pool_bytes;
  // Token eviction lives beside the SimConfig in a scenario (resolve copies it in).
  EvictionConfig& ev = s.cache.token_eviction.policy;
  if (o.eviction) ev.kind = *o.eviction;
  if (o.eviction_budget) ev.budget = *o.eviction_budget;
  if ((o.eviction || o.eviction_budget) && s.cache.token_eviction_at.empty())
    s.cache.token_eviction_at = "cache.token_eviction (Controls panel)";
}

// The run's description for the panels as the scenario states it (its base, before overrides).
std::shared_ptr<RunInfo> scenario_info(const std::string& path, const Scenario& scenario,
                                       const PolicyOverride& policy,
                                       const ScenarioModelLoad& loaded) {
  auto info = std::make_shared<RunInfo>();
  info->scenario_path = path;
  info->title = scenario.title;
  info->description = scenario.description;
  info->captions = scenario.captions;
  info->variants = scenario.variant_names();
  info->scenario_config =
      resolve_scenario(scenario, "base", loaded.shape, loaded.tokenizer.get()).config;
  info->override = policy;
  info->pool_bytes_field = scenario_pool_bytes(scenario, "base", loaded.shape);
  return info;
}

void use_variant(Scenario& scenario, const std::string& variant, const ModelConfig& shape) {
  // The variant becomes the base; its budget stays the bytes the scenario's base pool_tokens
  // come to (counted again in the variant's own format they would be another size).
  const auto budget = scenario_pool_bytes(scenario, variant, shape);
  scenario.cache = scenario.variant(variant);
  if (scenario.cache.pool_tokens) {
    scenario.cache.pool_bytes = budget;
    scenario.cache.pool_tokens.reset();
  }
}

// The run as configured and its model as loaded, in the run's description.
void describe_model(RunInfo& info, const Scenario& scenario, const ScenarioModelLoad& loaded,
                    const SimConfig& config, const std::string& model) {
  info.config = config;
  info.shape = loaded.shape;
  info.pool_bytes = static_cast<std::int64_t>(config.num_blocks) * block_bytes(info.shape, config);
  info.scenario_pool_bytes = static_cast<std::int64_t>(info.scenario_config.num_blocks) *
                             block_bytes(info.shape, info.scenario_config);
  info.model_source = loaded.source;
  info.model_name = model_display_name(loaded.source.empty() ? model : loaded.source);
  if (loaded.weights) info.weights_text = cpu::describe_weight_format(*loaded.weights);
  info.scenario_model = scenario.model.arg;
  info.model_override = model;
  info.random_weights = loaded.random_weights;
  if (loaded.weights) info.model = loaded.weights;
  info.tokenizer = loaded.tokenizer;
}

// The backend the run's steps go through: the CPU, or the one the policy names (made here, so
// that a backend which cannot start is an error opening the run).
void choose_backend(const std::string& path, const PolicyOverride& policy,
                    const ScenarioModelLoad& loaded, SimConfig& config, RunInfo& info) {
  info.backend_name = "CPU";
  if (policy.backend) {
    const RunNeeds needs{loaded.weights.get()};
    std::shared_ptr<std::unique_ptr<Backend>> chosen;
    try {
      chosen = std::make_shared<std::unique_ptr<Backend>>(make_backend(
          *policy.backend, config.threads, "f16", needs, "choose CPU in Controls > backend"));
    } catch (const Error& e) {
      throw Error(path + ": backend", e.detail());
    }
    info.backend_name = (*chosen)->name();
    config.make_backend = [chosen] { return std::move(*chosen); };
  }
}

}  // namespace

ScenarioRun build_scenario_run(const std::string& path, bool bookkeeping,
                               const PolicyOverride& policy, const std::string& model) {
  ScenarioRun run;
  Scenario scenario = parse_scenario(path);
  // The CUDA backends multiply fp32 weights (converted to 16 bits on the device): a quantized
  // GGUF is read dequantized for them, as `--weight-format f32` does in the CLI.
  const bool on_cuda = policy.backend.has_value();
  const ScenarioModelLoad loaded = load_scenario_model(
      scenario, model, bookkeeping, on_cuda ? WeightFormat::kF32 : WeightFormat::kNative);
  std::shared_ptr<RunInfo> info = scenario_info(path, scenario, policy, loaded);
  // A swap override on a scenario without a host tier gets one as large as the device pool, so
  // swapping happens (documented in docs/ui/compare.md and in the control's tooltip).
  const bool host_from_pool =
      policy.preemption == PreemptionMode::kSwap && scenario.cache.sim.host_blocks == 0;
  if (!policy.variant.empty()) use_variant(scenario, policy.variant, loaded.shape);
  apply_override(scenario, policy);
  ResolvedRun resolved = resolve_scenario(scenario, "base", loaded.shape, loaded.tokenizer.get());
  attach_mla(resolved, loaded.weights, path);
  SimConfig config = resolved.config;
  run.max_steps = scenario.steps.value_or(kMaxSteps);
  if (host_from_pool) config.host_blocks = config.num_blocks;
  config.threads = 1;  // the UI thread and the worker share the machine
  std::vector<SimRequest> requests = std::move(resolved.requests);
  if (requests.empty()) throw Error(path + ": requests", "expected at least one request, got none");
  run.prompts = sequence_prompts(requests);
  // The Timeline's header carries the token text, so File > Save recording keeps it.
  config.tokenizer = loaded.tokenizer;
  describe_model(*info, scenario, loaded, config, model);
  info->prompts = run.prompts;
  if (policy.backend && !loaded.weights)
    throw Error(path, "a backend choice needs the model's weights (a bookkeeping run has none)");
  if (loaded.weights) choose_backend(path, policy, loaded, config, *info);
  SimModel sim_model{loaded.shape, loaded.weights};
  try {
    run.sim = std::make_unique<Simulator>(config, sim_model, std::move(requests));
  } catch (const Error& e) {
    throw Error(path + ": " + e.where(), e.detail());
  }
  run.info = std::move(info);
  return run;
}

std::unique_ptr<RunSession> RunSession::open(const std::string& path, bool bookkeeping,
                                             const PolicyOverride& policy, const std::string& model,
                                             FirstStep first) {
  std::unique_ptr<RunSession> s(new RunSession());
  s->path_ = path;
  if (!is_scenario_path(path)) {
    if (!policy.empty())
      throw Error(path, "policy controls need a scenario (.json), got a recording");
    if (!model.empty())
      throw Error(path, "a model choice needs a scenario (.json), got a recording");
    s->timeline_ = std::make_shared<const Timeline>(Timeline::load(path));
    if (s->timeline_->num_steps() < 1) throw Error(path, "the recording holds no steps");
    return s;
  }
  s->is_scenario_ = true;
  ScenarioRun built = build_scenario_run(path, bookkeeping, policy, model);
  s->sim_ = std::move(built.sim);
  s->info_ = std::move(built.info);
  s->prompts_ = std::move(built.prompts);
  s->max_steps_ = built.max_steps;
  if (s->info_->model) s->tokenizer_ = s->info_->tokenizer;  // bookkeeping tokens are all 0
  s->timeline_ = s->sim_->timeline();
  // The first step runs here so the UI always has a step to show (unless the caller waits for
  // it: kOnWorker); the rest on the worker.
  if (first == FirstStep::kHere) {
    s->sim_->step();
    if (s->timeline_->num_steps() < 1) throw Error(path, "the scenario ran no step");
  }
  *s->running_ = true;
  s->worker_ = std::thread([raw = s.get()] { raw->work(); });
  return s;
}

std::unique_ptr<RunSession> RunSession::attach(const AttachRequest& request) {
  std::unique_ptr<RunSession> s(new RunSession());
  s->path_ = (request.bind ? "listening at " : "attached to ") + request.endpoint;
  s->feed_ = std::make_shared<AttachFeed>(request, s->running_);
  s->timeline_ = s->feed_->timeline();
  return s;
}

void RunSession::work() {
  try {
    while (!stop_.load(std::memory_order_relaxed) && sim_->current_step() < max_steps_ &&
           sim_->step()) {
    }
    if (timeline_->num_steps() < 1 && !stop_.load()) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      error_ = path_ + ": the scenario ran no step";
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    error_ = path_ + ": the simulation stopped at step " + std::to_string(sim_->current_step()) +
             ": " + e.what();
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    error_ = path_ + ": the simulation stopped with an unknown error";
  }
  *running_ = false;
}

std::string RunSession::first_step_line(double seconds) const {
  char count[32] = "";
  if (seconds >= 1.0) std::snprintf(count, sizeof count, " %.0f s", seconds);
  return "opening " + std::filesystem::path(path_).filename().string() +
         ": computing its first step..." + count;
}

std::string RunSession::first_step_error() {
  return take_error().value_or(path_ + ": the scenario ran no step");
}

RunSession::~RunSession() {
  stop();
}

void RunSession::stop() {
  stop_ = true;
  if (feed_) feed_->stop();
  wait();
}

void RunSession::wait() {
  if (worker_.joinable()) worker_.join();
}

std::optional<std::string> RunSession::take_error() {
  if (feed_) return feed_->take_error();
  std::lock_guard<std::mutex> lock(error_mutex_);
  std::optional<std::string> e = std::move(error_);
  error_.reset();
  return e;
}

std::unique_ptr<DataSource> RunSession::make_source() const {
  auto source = std::make_unique<TimelineSource>(timeline_, path_, running_);
  source->set_text_info(tokenizer_, prompts_);
  source->set_run_info(info_);
  source->set_attach_feed(feed_);
  return source;
}

}  // namespace kvscope::ui
