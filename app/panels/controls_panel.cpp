// Controls panel: one widget per policy knob, each turning into a PolicyOverride.
#include "app/panels/controls_panel.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/core/theme.h"
#include "app/widgets/widgets.h"
#include "engine/common/error.h"
#include "engine/evict/policy.h"
#include "engine/kv/kv_format.h"
#include "engine/model/locate.h"
#include "engine/model/synthetic.h"
#include "engine/quant/kv_format_registry.h"

namespace kvscope::ui {

namespace {

// The K/V format combos list every named format (quant::kv_formats(), in ladder order), the
// ones `kvscope eval format-sweep` and the Quality panel measure.
std::span<const char* const> format_names() {
  static const std::vector<const char*> names = [] {
    std::vector<const char*> out;
    for (const quant::KvLadderEntry& f : quant::kv_formats()) out.push_back(f.k.c_str());
    return out;
  }();
  return names;
}

// A combo over `names`; returns the chosen index when the user picked a different one.
std::optional<int> pick(const char* label, std::span<const char* const> names, int current,
                        const char* tip) {
  std::optional<int> out;
  const char* preview = current >= 0 ? names[static_cast<std::size_t>(current)] : "(other)";
  if (ImGui::BeginCombo(label, preview)) {
    for (int i = 0; i < static_cast<int>(names.size()); ++i) {
      if (ImGui::Selectable(names[static_cast<std::size_t>(i)], i == current) && i != current)
        out = i;
    }
    ImGui::EndCombo();
  }
  item_tooltip(tip);
  return out;
}

// Looks `c.arg` (or the scenario's `arg` for the first entry) up on disk: sets c.found or
// c.missing ("not found: <how to get it>").
void check_on_disk(ModelChoice& c, const std::string& arg, const std::string& how_to_get) {
  if (is_synthetic_model_arg(arg)) return;  // generated, nothing to find
  try {
    c.found = locate_model(arg);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(c.found, ec)) {  // a path is returned as given
      c.missing = "not found: " + c.found;
      c.found.clear();
    }
  } catch (const Error& e) {
    c.missing = "not found: " + (how_to_get.empty() ? std::string(e.what()) : how_to_get);
  }
}

int format_index(const KvFormat& f) {
  const std::string n = f.name();
  const std::span<const char* const> names = format_names();
  for (int i = 0; i < static_cast<int>(names.size()); ++i)
    if (n == names[static_cast<std::size_t>(i)]) return i;
  return -1;
}

}  // namespace

std::string ControlsPanel::help() const {
  return "Every control re-runs the same scenario from step 0 with one policy changed, so any "
         "difference you see comes from that policy alone (same requests, same seed). Switch the "
         "target to the compare variant to run the change beside the current run instead; the "
         "model picker runs the scenario on another model.";
}

std::vector<ModelChoice> ControlsPanel::model_choices(const RunInfo& info) {
  std::vector<ModelChoice> out;
  ModelChoice own;
  own.label = "scenario default: " + model_display_name(info.scenario_model);
  const std::string own_name =
      info.scenario_model.empty() ? std::string(kDefaultModelFile) : info.scenario_model;
  std::string own_how;
  for (const NamedModel& m : named_models())
    if (own_name == m.name || own_name == m.file) own_how = m.how_to_get;
  check_on_disk(own, info.scenario_model, own_how);
  out.push_back(std::move(own));
  for (const NamedModel& m : named_models()) {
    ModelChoice c;
    c.arg = m.name;
    const std::string shown = model_display_name(m.name);
    c.label = shown == m.name ? std::string(m.name) : std::string(m.name) + " (" + shown + ")";
    check_on_disk(c, m.name, m.how_to_get);
    out.push_back(std::move(c));
  }
  return out;
}

bool ControlsPanel::choose_model(AppState& state, const std::string& arg) {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (!info) return false;
  const std::string want = arg == info->scenario_model ? std::string() : arg;
  const std::string& now = state.model_request ? *state.model_request : info->model_override;
  if (want == now) return false;
  state.model_request = want;
  return true;
}

void ControlsPanel::draw_model_picker(AppState& state, const RunInfo& info) {
  const std::string key = info.scenario_path + '\n' + info.scenario_model;
  if (choices_for_ != key) {  // a new scenario: check the disk once (again each time it opens)
    choices_ = model_choices(info);
    choices_for_ = key;
  }
  const bool pending = state.model_request.has_value();
  const std::string& current = pending ? *state.model_request : info.model_override;
  int cur = -1;
  for (std::size_t i = 0; i < choices_.size(); ++i)
    if (choices_[i].arg == current) cur = static_cast<int>(i);
  const std::string preview =
      cur >= 0 ? choices_[static_cast<std::size_t>(cur)].label : model_display_name(current);
  ImGui::SetNextItemWidth(
      std::max(ImGui::GetFontSize() * 4.0f,
               std::min(ImGui::GetFontSize() * 16.0f,
                        ImGui::GetContentRegionAvail().x - labeled_width(0.0f, "model"))));
  ImGui::BeginDisabled(pending);
  if (ImGui::BeginCombo("model", preview.c_str())) {
    if (ImGui::IsWindowAppearing()) choices_ = model_choices(info);  // files come and go
    for (std::size_t i = 0; i < choices_.size(); ++i) {
      const ModelChoice& c = choices_[i];
      const bool selected = static_cast<int>(i) == cur;
      const ImGuiSelectableFlags flags =
          c.missing.empty() ? ImGuiSelectableFlags_None : ImGuiSelectableFlags_Disabled;
      ImGui::PushID(static_cast<int>(i));
      if (ImGui::Selectable(c.label.c_str(), selected, flags) && !selected)
        choose_model(state, c.arg);
      if (selected) ImGui::SetItemDefaultFocus();
      const std::string tip = !c.missing.empty() ? c.missing
                              : c.found.empty()  ? "synthetic: random weights of that shape"
                                                 : c.found;
      item_tooltip(tip.c_str());
      ImGui::PopID();
    }
    ImGui::EndCombo();
  }
  ImGui::EndDisabled();
  const std::string tip =
      "The model the scenario runs on: its own, or another the engine knows (greyed: not on "
      "disk). Choosing one restarts the scenario from step 0 on it with the same requests, seed "
      "and policy (text prompts are tokenized by its tokenizer); the compare variant, the "
      "attention capture and the quality sweep use it too. It loads on the UI thread: the "
      "window pauses meanwhile (about 2 s for SmolLM2-135M). A model "
      "that fails to load, or a scenario it cannot run, is a one-line error and this run "
      "stays.\n\nRunning: " +
      info.model_name + ", " + std::to_string(info.shape.n_layers) + " layers, vocabulary " +
      std::to_string(info.shape.vocab_size) +
      (info.weights_text.empty() ? std::string() : "\nWeights: " + info.weights_text);
  item_tooltip(tip.c_str());
  if (!info.weights_text.empty()) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextDisabled("weights: %s", info.weights_text.c_str());
    ImGui::PopTextWrapPos();
    item_tooltip(
        "native: the matmuls multiply the file's quantized blocks (Q4_0/Q4_1/Q8_0) with "
        "activations rounded to 8 bits per 32 values, as llama.cpp does; f32: the weights "
        "dequantized at load (the accuracy reference; kvscope generate/eval --weight-format "
        "f32). The instruction set is the fastest this CPU runs.");
  }
  if (pending)
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(palette(state.presenter).accent),
                       "loading %s: the window pauses while the weights load",
                       model_display_name(current.empty() ? info.scenario_model : current).c_str());
}

namespace {

// One frame's edit of a policy: what is shown, what the scenario says, and the override the
// widgets build. set() records a knob's new value, or drops the override when it equals the
// scenario's own.
struct PolicyEdit {
  PolicyOverride current, next;
  SimConfig base, shown;
  bool changed = false;
  template <typename Field, typename Value>
  void set(Field& field, Value value, Value scenario_value) {
    if (value == scenario_value)
      field.reset();
    else
      field = value;
    changed = true;
  }
};

// The scenario file's own compare variants, as the starting point of the policy.
void draw_variant_picker(const RunInfo& info, PolicyEdit& e) {
  if (info.variants.size() <= 1) return;
  std::vector<const char*> names;
  int cur = 0;
  for (std::size_t i = 0; i < info.variants.size(); ++i) {
    names.push_back(info.variants[i].c_str());
    if (info.variants[i] == e.current.variant) cur = static_cast<int>(i);
  }
  if (ImGui::Combo("variant", &cur, names.data(), static_cast<int>(names.size()))) {
    e.next.variant = cur == 0 ? std::string() : info.variants[static_cast<std::size_t>(cur)];
    e.changed = true;
  }
  item_tooltip(
      "The variants the scenario file defines under \"compare\" (base = its own cache "
      "settings); the knobs below change settings on top of it.");
}

// Block size, K and V formats, prefix caching and its index, allocator, preemption.
void draw_cache_knobs(PolicyEdit& e) {
  const SimConfig& shown = e.shown;
  const SimConfig& base = e.base;
  static constexpr const char* kSizes[] = {"1", "2", "4", "8", "16", "32", "64", "128", "256"};
  int size_index = -1;
  for (int i = 0; i < static_cast<int>(std::size(kSizes)); ++i)
    if ((1 << i) == shown.block_size) size_index = i;
  if (auto i = pick("block size", kSizes, size_index,
                    "Tokens per KV block. Small blocks waste less in the last, partly filled "
                    "block; large blocks mean fewer table entries and longer shared prefixes to "
                    "match."))
    e.set(e.next.block_size, 1 << *i, base.block_size);
  if (auto i = pick("K format", format_names(), format_index(shown.k_format),
                    "How keys are stored in the cache. Fewer bits per value: more tokens fit in "
                    "the same pool, at some cost in attention accuracy (see Quality vs memory)."))
    e.set(e.next.k_format,
          parse_kv_format(format_names()[static_cast<std::size_t>(*i)], "K format"), base.k_format);
  if (auto i = pick("V format", format_names(), format_index(shown.v_format),
                    "How values are stored in the cache; values usually tolerate fewer bits "
                    "than keys."))
    e.set(e.next.v_format,
          parse_kv_format(format_names()[static_cast<std::size_t>(*i)], "V format"), base.v_format);
  bool prefix = shown.prefix_caching;
  if (ImGui::Checkbox("prefix caching", &prefix))
    e.set(e.next.prefix_caching, prefix, base.prefix_caching);
  item_tooltip(
      "Keep full prompt blocks indexed by their tokens and map them into later requests "
      "with the same prefix (paged allocator only).");
  static constexpr const char* kIndex[] = {"hash", "radix"};
  if (auto i = pick("prefix index", kIndex, shown.prefix_index == IndexKind::kRadix ? 1 : 0,
                    "hash: vLLM-style chain of block hashes. radix: SGLang-style radix tree "
                    "over tokens. Both map whole blocks; they differ in how misses are found."))
    e.set(e.next.prefix_index, *i == 1 ? IndexKind::kRadix : IndexKind::kHashChain,
          base.prefix_index);
  static constexpr const char* kAlloc[] = {"paged", "contiguous"};
  if (auto i = pick("allocator", kAlloc, shown.allocator == AllocatorKind::kContiguous ? 1 : 0,
                    "paged: blocks on demand from a shared pool. contiguous: each request "
                    "reserves max_seq_len tokens up front (the baseline paging replaced)."))
    e.set(e.next.allocator, *i == 1 ? AllocatorKind::kContiguous : AllocatorKind::kPaged,
          base.allocator);
  static constexpr const char* kPre[] = {"recompute", "swap"};
  if (auto i = pick("preemption", kPre, shown.preemption == PreemptionMode::kSwap ? 1 : 0,
                    "When the pool is full a running request is preempted. recompute: drop its "
                    "blocks and prefill again later. swap: copy its K/V to a host tier (as large "
                    "as the device pool when the scenario has none) and copy it back."))
    e.set(e.next.preemption, *i == 1 ? PreemptionMode::kSwap : PreemptionMode::kRecompute,
          base.preemption);
  if (!shown.prefix_caching) return;
  // KV tiers behind the prefix cache, in blocks (0 = none).
  const auto tier = [&](const char* label, TierMedium medium, std::optional<int>& field,
                        const char* tip) {
    int blocks = tier_blocks(shown, medium);
    ImGui::InputInt(label, &blocks, 8, 64);
    // A negative count is not applied: the field shows the tier's size again.
    if (ImGui::IsItemDeactivatedAfterEdit() && blocks >= 0)
      e.set(field, blocks, tier_blocks(base, medium));
    item_tooltip(tip);
  };
  tier("host tier", TierMedium::kHost, e.next.host_tier_blocks,
       "Blocks of a KV tier in host RAM behind the prefix cache: a cached block the pool evicts "
       "is written here, and a later prompt that needs it reloads it instead of recomputing it. "
       "0: none.");
  tier("disk tier", TierMedium::kDisk, e.next.disk_tier_blocks,
       "Blocks of a KV tier on disk behind the host tier (a file of checksummed records, in the "
       "system's temp directory unless the scenario names one): blocks the host tier passes "
       "down. 0: none.");
}

// Token eviction: the engine's policy names, "none" first (EvictionKind order), and its budget.
void draw_eviction_knobs(PolicyEdit& e) {
  const std::vector<std::string> names = eviction_kind_names();
  std::vector<const char*> items;
  for (const std::string& n : names) items.push_back(n.c_str());
  const EvictionConfig& ev = e.shown.token_eviction.policy;
  if (auto i = pick("token eviction", items, static_cast<int>(ev.kind),
                    "Drop cached tokens so each query attends to at most `budget` of them. "
                    "window: the most recent. sinks: the first few plus the most recent "
                    "(StreamingLLM). h2o: the most attended plus recent ones. snapkv: the "
                    "prompt tokens the last queries vote for. tova: drop the least attended. "
                    "random: a baseline. Needs the paged allocator, recompute preemption, no "
                    "prefix caching and non-KIVI formats (the run says which is wrong).")) {
    const auto kind = static_cast<EvictionKind>(*i);
    e.set(e.next.eviction, kind, e.base.token_eviction.policy.kind);
    // Turning eviction on where the scenario has no budget: start from 64 tokens.
    if (kind != EvictionKind::kNone && ev.budget <= 0) e.next.eviction_budget = 64;
  }
  if (ev.kind == EvictionKind::kNone) return;
  int budget = std::max(ev.budget, 1);
  ImGui::SliderInt("budget (tokens)", &budget, 8, 512, "%d", ImGuiSliderFlags_Logarithmic);
  if (ImGui::IsItemDeactivatedAfterEdit())
    e.set(e.next.eviction_budget, budget, e.base.token_eviction.policy.budget);
  item_tooltip(
      "Live tokens each query attends to, itself included. Smaller budgets free more "
      "blocks and cost more quality (Quality vs memory shows how much).");
}

// What runs the forward pass: the CPU (the reference), the CUDA backend on the emulated device,
// or on a GPU. Only the last needs hardware; choosing it without one is the runtime's one-line
// reason in the error modal, and the run stays.
void draw_backend_knob(const RunInfo& info, PolicyEdit& e) {
  static constexpr const char* kBackends[] = {"CPU", "CUDA emulated", "CUDA GPU"};
  static constexpr const char* kValues[] = {"", "cuda-sim", "cuda"};
  const std::string now = e.next.backend.value_or("");
  int cur = 0;
  for (int i = 0; i < 3; ++i)
    if (now == kValues[i]) cur = i;
  if (auto i = pick("backend", kBackends, cur,
                    "What runs the model's forward pass. CPU: the reference backend. CUDA "
                    "emulated (--backend cuda-sim): the CUDA backend's real kernels and "
                    "cuBLAS calls on the project's SIMT emulator, fp16 GEMM weights, each engine "
                    "step run whole on the device (embeddings up, greedy tokens back): slow, for "
                    "watching the GPU path give the CPU's tokens. CUDA GPU (--backend cuda): "
                    "the same code on the first GPU, untested on hardware. Every K/V format, "
                    "MLA and token eviction run on both; a quantized model is read "
                    "dequantized to fp32 for them.")) {
    if (*i == 0)
      e.next.backend.reset();
    else
      e.next.backend = kValues[*i];
    e.changed = true;
  }
  if (!info.backend_name.empty()) {
    const std::string running = "= " + info.backend_name;
    flow_same_line(ImGui::CalcTextSize(running.c_str()).x, ImGui::GetStyle().ItemSpacing.x);
    ImGui::TextDisabled("%s", running.c_str());
  }
}

// The device pool in bytes; the block count follows from it and the bytes per block.
void draw_pool_slider(const RunInfo& info, long long blocks_now, PolicyEdit& e) {
  const std::int64_t bb = block_bytes(info.shape, e.shown);
  std::int64_t kib = std::max<std::int64_t>(1, blocks_now * bb / 1024);
  const std::int64_t lo = std::max<std::int64_t>(1, bb / 1024);
  const std::int64_t hi = std::max<std::int64_t>(lo + 1, 16 * info.scenario_pool_bytes / 1024);
  ImGui::SliderScalar("pool (KiB)", ImGuiDataType_S64, &kib, &lo, &hi, "%lld KiB",
                      ImGuiSliderFlags_Logarithmic);
  if (ImGui::IsItemDeactivatedAfterEdit()) {
    e.next.pool_bytes = kib * 1024;
    e.changed = true;
  }
  item_tooltip(
      "The device KV pool in bytes. The number of blocks follows from it and the "
      "bytes per block, so a smaller format fits more blocks in the same memory.");
  char blocks_text[48];
  std::snprintf(blocks_text, sizeof blocks_text, "= %lld blocks", blocks_now);
  flow_same_line(ImGui::CalcTextSize(blocks_text).x, ImGui::GetStyle().ItemSpacing.x);
  ImGui::TextDisabled("%s", blocks_text);
}

// Reset and copy buttons, and the one-line summary of the policy being edited.
void draw_footer(AppState& state, const RunInfo& info, bool edit_variant, long long blocks_now,
                 PolicyEdit& e) {
  const PolicyOverride& current = e.current;
  const SimConfig& shown = e.shown;
  if (ImGui::Button("Reset to scenario")) {
    e.next = PolicyOverride{};
    e.changed = !current.empty();
  }
  item_tooltip("Drop every override: the scenario file's own settings");
  if (!edit_variant) {
    flow_same_line(
        ImGui::CalcTextSize("Copy to variant").x + ImGui::GetStyle().FramePadding.x * 2.0f,
        ImGui::GetStyle().ItemSpacing.x);
    if (ImGui::Button("Copy to variant")) {
      state.compare_variant = info.override;
      ++state.compare_variant_version;
    }
    item_tooltip("Make the compare variant this run's policy (then change it)");
  }
  ImGui::Spacing();
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(palette(state.presenter).accent),
                     "%s:", edit_variant ? "variant" : "running");
  ImGui::SameLine();
  ImGui::TextUnformatted(current.describe().c_str());
  ImGui::TextDisabled(
      "%lld blocks x %d tokens, %s per token (K %s, V %s)", blocks_now, shown.block_size,
      format_bytes(static_cast<double>(block_bytes(info.shape, shown)) / shown.block_size).c_str(),
      shown.k_format.name().c_str(), shown.v_format.name().c_str());
  ImGui::PopTextWrapPos();
}

}  // namespace

void ControlsPanel::draw(AppState& state) {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (!info) {
    ImGui::TextDisabled("controls need a scenario run (this is a %s)",
                        state.is_demo() ? "demo" : "recording");
    return;
  }
  draw_model_picker(state, *info);
  const float gap = ImGui::GetStyle().ItemSpacing.x;
  ImGui::TextDisabled("target");
  flow_same_line(check_width("this run"), gap);
  if (ImGui::RadioButton("this run", !edit_variant_)) edit_variant_ = false;
  item_tooltip("Changes restart the loaded scenario with the new policy");
  flow_same_line(check_width("compare variant"), gap);
  if (ImGui::RadioButton("compare variant", edit_variant_)) edit_variant_ = true;
  item_tooltip("Changes set the policy the Compare panel runs beside this one");

  PolicyEdit e;
  e.current = edit_variant_ ? state.compare_variant : info->override;
  e.base = info->scenario_config;
  e.shown = edit_variant_ ? with_override(e.base, e.current) : info->config;
  e.next = e.current;
  const long long blocks_now =
      edit_variant_ ? pool_blocks(*info, e.shown, e.current) : info->config.num_blocks;
  // The knobs' frames leave room for their labels (the widest of them) in a narrow panel.
  float label_w = 0.0f;
  for (const char* label :
       {"variant", "block size", "K format", "V format", "prefix index", "allocator", "preemption",
        "token eviction", "budget (tokens)", "pool (KiB)", "backend", "host tier", "disk tier"})
    label_w = std::max(label_w, labeled_width(0.0f, label));
  const float fs = ImGui::GetFontSize();
  ImGui::PushItemWidth(
      std::max(fs * 4.0f, std::min(fs * 9.0f, ImGui::GetContentRegionAvail().x - label_w)));
  draw_variant_picker(*info, e);
  draw_cache_knobs(e);
  draw_eviction_knobs(e);
  draw_pool_slider(*info, blocks_now, e);
  if (!edit_variant_) draw_backend_knob(*info, e);  // the variant runs on this run's backend
  ImGui::PopItemWidth();
  draw_footer(state, *info, edit_variant_, blocks_now, e);
  if (!e.changed || e.next == e.current) return;
  if (edit_variant_) {
    state.compare_variant = e.next;
    ++state.compare_variant_version;
  } else {
    state.restart_request = e.next;
  }
}

}  // namespace kvscope::ui
