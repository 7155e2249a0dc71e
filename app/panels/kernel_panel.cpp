// Kernel panel: the attention launch's grid, a warp's loads, split-K (see kernel_panel.h).
#include "app/panels/kernel_panel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

#include "app/core/theme.h"
#include "app/widgets/widgets.h"
#include "engine/analysis/memory_math.h"
#include "engine/common/concat.h"

namespace kvscope::ui {
namespace {

// The formats offered: the ones each kernel reads (the decode kernel the byte formats, the paged
// kernel the packed ones), not KIVI's (a run's own KIVI is traced as it is).
constexpr const char* kFormats[] = {"fp32", "fp16", "bf16", "int8", "fp8-e4m3", "int4", "int2"};
constexpr int kBlockSizes[] = {1, 4, 8, 16, 32, 64};

std::string num(long v) {
  return std::to_string(v);
}

// Bytes asked for / bytes moved: green at 100%, through yellow, red at an eighth or less.
ImU32 efficiency_color(const sim::Traffic& traffic) {
  const auto e = static_cast<float>(traffic.used_share());
  const float t = std::clamp((e - 0.125f) / 0.875f, 0.0f, 1.0f);
  const ImU32 red = IM_COL32(200, 70, 60, 255), yellow = IM_COL32(225, 185, 70, 255),
              green = IM_COL32(60, 160, 95, 255);
  return t > 0.5f ? mix_color(yellow, green, (t - 0.5f) * 2.0f) : mix_color(red, yellow, t * 2.0f);
}

bool splits_columns(const std::string& kernel) {
  return kernel.find("split") != std::string::npos;
}

// "KV head 1, split 0" or "query head 4 (KV head 1)".
std::string role_text(const sim::TraceRole& r, const std::string& kernel) {
  if (splits_columns(kernel)) {
    std::string s = concat({"KV head ", num(r.kv_head), ", split ", num(r.split)});
    if (r.heads > 1)
      s.append(
          concat({" (query heads ", num(r.head_first), "-", num(r.head_first + r.heads - 1), ")"}));
    return s;
  }
  return concat({"query head ", num(r.head_first), " (KV head ", num(r.kv_head), ")"});
}

}  // namespace

std::string KernelPanel::help() const {
  return "The attention launch of the step shown, run by kvscope's CUDA kernels on its SIMT "
         "emulator: each cell is a thread block (rows: the step's queries), coloured by how close "
         "its loads come to the fewest 32-byte transactions their bytes allow. Hover one to mark "
         "the KV blocks it reads in the Block pool; below, one warp's load over the sectors it "
         "touches.";
}

bool KernelPanel::auto_trace(const RunInfo& info) {
  // About the layers' parameters: stories260K's 0.25 M re-run in well under a second a step on
  // the emulator; SmolLM2-135M's 119 M take seconds.
  const ModelConfig& c = info.shape;
  return static_cast<double>(c.dim) * c.dim * c.n_layers * 12.0 < 20e6;
}

ImVec2 KernelPanel::cell_center(int b) const {
  const unsigned col = static_cast<unsigned>(b) % grid_cols_;
  const unsigned row = static_cast<unsigned>(b) / grid_cols_;  // whole rows
  const auto c = static_cast<float>(col);
  const auto r = static_cast<float>(row);
  return ImVec2(grid_origin_.x + (c + 0.5f) * cell_size_.x,
                grid_origin_.y + (r + 0.5f) * cell_size_.y);
}

KernelPanel::Wanted KernelPanel::wanted(const AppState& state) const {
  Wanted w;
  w.generation = state.source_generation();
  w.ui_step = state.step();
  w.layer = layer_;
  w.format = format_ ? format_->name() : "";
  w.block = block_.value_or(0);
  return w;
}

void KernelPanel::draw_controls(const AppState& state, const RunInfo& info) {
  // Each combo as wide as its longest choice, plus its arrow.
  const auto width_of = [](std::initializer_list<std::string_view> texts) {
    float w = 0.0f;
    for (std::string_view t : texts)
      w = std::max(w, ImGui::CalcTextSize(t.data(), t.data() + t.size()).x);
    return w + ImGui::GetStyle().FramePadding.x * 2.0f + ImGui::GetFrameHeight();
  };
  float combo_w = width_of({"layer 00"});
  ImGui::SetNextItemWidth(combo_w);
  const std::string layer_text = concat({"layer ", num(layer_)});
  if (ImGui::BeginCombo("##layer", layer_text.c_str())) {
    for (int l = 0; l < info.shape.n_layers; ++l)
      if (ImGui::Selectable(concat({"layer ", num(l)}).c_str(), l == layer_)) layer_ = l;
    ImGui::EndCombo();
  }
  item_tooltip("Whose attention launch is traced (every layer's has the same grid)");
  const std::string run_format = concat({"run's (", info.config.k_format.name(), ")"});
  combo_w = width_of({run_format, "fp8-e4m3"});
  flow_same_line(combo_w);
  ImGui::SetNextItemWidth(combo_w);
  if (ImGui::BeginCombo("##format", format_ ? format_->name().c_str() : run_format.c_str())) {
    if (ImGui::Selectable(run_format.c_str(), !format_)) format_.reset();
    for (const char* f : kFormats) {
      if (ImGui::Selectable(f, format_ && format_->name() == f))
        format_ = parse_kv_format(f, "Kernel panel");
    }
    ImGui::EndCombo();
  }
  item_tooltip(
      "K and V format of the re-run: fp32, fp16, bf16, int8 and FP8 take the decode kernel, "
      "int4 and int2 the paged kernel");
  const std::string run_block = concat({"run's (", num(info.config.block_size), ")"});
  combo_w = width_of({run_block, "block 64"});
  flow_same_line(combo_w);
  ImGui::SetNextItemWidth(combo_w);
  const std::string block_text = block_ ? concat({"block ", num(*block_)}) : run_block;
  if (ImGui::BeginCombo("##block", block_text.c_str())) {
    if (ImGui::Selectable(run_block.c_str(), !block_)) block_.reset();
    for (int b : kBlockSizes)
      if (ImGui::Selectable(concat({"block ", num(b)}).c_str(), block_ == b)) block_ = b;
    ImGui::EndCombo();
  }
  item_tooltip("Tokens per KV block of the re-run (the pool keeps its bytes)");
  const std::string button = concat({"Trace step ", num(state.step())});
  flow_same_line(ImGui::CalcTextSize(button.c_str()).x + ImGui::GetStyle().FramePadding.x * 2);
  if (ImGui::Button(button.c_str())) {
    requested_ = wanted(state);
    failed_.reset();  // asks again after a failure
  }
  item_tooltip(auto_trace(info)
                   ? "Re-run the scenario on the emulated device to this step and trace it (a "
                     "model this small is also traced by itself when the step or a choice "
                     "changes, while not playing)"
                   : "Re-run the scenario on the emulated device to this step and trace it (this "
                     "model takes seconds a step there, so only on request)");
}

void KernelPanel::poll(AppState& state, const std::shared_ptr<const RunInfo>& info) {
  if (std::shared_ptr<KernelTraceView> done = job_.take()) {
    view_ = std::move(done);
    if (!view_->error.empty() && running_) failed_ = running_;
    running_.reset();
  }
  const Wanted w = wanted(state);
  const bool have = view_ && view_->generation == w.generation && view_->ui_step == w.ui_step &&
                    view_->layer == w.layer && view_->format_choice == w.format &&
                    view_->block_choice == w.block;
  if (have || state.playing || failed_ == w) return;
  if (!auto_trace(*info) && requested_ != w) return;
  if (job_.busy()) {
    // A stale request: asked to stop (the UI never waits on it); the new one starts once it has.
    if (running_ != w) job_.request_cancel();
    return;
  }
  running_.reset();
  KernelJob::Request r;
  r.info = info;
  r.generation = w.generation;
  r.ui_step = w.ui_step;
  r.layer = layer_;
  r.format = format_;
  r.block_size = block_;
  if (job_.start(r)) running_ = w;
}

void KernelPanel::draw_summary(const AppState& state) {
  const StepKernelTrace& t = *view_->trace;
  const sim::KernelTrace& k = t.summary;
  ImGui::Text("%s: grid %u x %u, %u threads a block", k.kernel.c_str(), k.grid.x, k.grid.y,
              k.block.x);
  item_tooltip(splits_columns(k.kernel)
                   ? "Columns: KV head x split (one block serves every query head of its KV "
                     "head); rows: the step's queries"
                   : "Columns: query heads (each reads its KV head's rows again); rows: the "
                     "step's queries");
  stat("KV read", format_bytes(static_cast<double>(k.kv.distinct_bytes)));
  stat("transactions", format_count(static_cast<double>(k.kv.sectors)), true);
  stat("ideal", format_count(static_cast<double>(k.kv.ideal_sectors)), true);
  stat("bytes used", format_percent(k.kv.used_share(), 0), true);
  item_tooltip("Of the bytes the transactions moved (32 a sector), the share the lanes asked for");
  std::string what = concat({"K ", t.k_format, ", V ", t.v_format, ", block ", num(t.block_size),
                             ", step ", num(t.step), ", layer ", num(t.layer)});
  if (!view_->same_pool) what.append(" (re-run: not the pool shown)");
  ImGui::TextDisabled("%s", what.c_str());
  draw_measured(state, t);
}

// The layer's KV write launches before the attention: one per new token (a row each for int4 and
// int2), each hoverable to mark the block it wrote.
void KernelPanel::draw_writes(AppState& state) {
  const StepKernelTrace& t = *view_->trace;
  if (t.writes.empty()) return;
  const StepKernelTrace::KvWrite& w0 = t.writes.front();
  const bool rows = w0.kernel == "kv_write_groups_kernel";
  const sim::Traffic& s = t.write_total;
  ImGui::TextWrapped(
      "Before it, the KV write: %zu launches of %s (grid %u x %u), %s stored in %s "
      "transactions (ideal %s, %s of the bytes moved used)",
      t.writes.size(), w0.kernel.c_str(), w0.grid.x, w0.grid.y,
      format_bytes(static_cast<double>(s.distinct_bytes)).c_str(),
      format_count(static_cast<double>(s.sectors)).c_str(),
      format_count(static_cast<double>(s.ideal_sectors)).c_str(),
      format_percent(s.used_share(), 0).c_str());
  item_tooltip(rows ? "A launch per new token and row (K, then V): one warp packs the row's 4- or "
                      "2-bit codes and its groups' scales and zeros into the token's slot. Below: "
                      "each launch's request, block and row in it; hover one to mark its block"
                    : "A launch per new token: a warp per KV head (columns) and K or V (rows) "
                      "quantizes the head's values into the token's slot of its block; a head's "
                      "few bytes still take a whole 32-byte sector. Below: each launch's request, "
                      "block and row in it; hover one to mark its block");
  const std::size_t shown = std::min<std::size_t>(t.writes.size(), 16);
  for (std::size_t i = 0; i < shown; ++i) {
    const StepKernelTrace::KvWrite& w = t.writes[i];
    std::string chip = w.request >= 0 ? concat({"req ", num(w.request)}) : std::string("req ?");
    chip.append(
        concat({" -> block ", num(w.kv_block), ":", num(w.slot % std::max(1, t.block_size))}));
    if (rows) chip.append(concat({" ", w.rows}));
    if (i > 0) flow_same_line(ImGui::CalcTextSize(chip.c_str()).x);
    ImGui::TextDisabled("%s", chip.c_str());
    if (!ImGui::IsItemHovered()) continue;
    if (view_->same_pool) {
      state.kernel_blocks = {w.kv_block};
      state.kernel_request = w.request;
      state.kernel_blocks_frame = ImGui::GetFrameCount();
    }
    ImGui::BeginTooltip();
    ImGui::Text("request %d's token at slot %d: %s into block %d, row %d", w.request, w.slot,
                w.rows.c_str(), w.kv_block, w.slot % std::max(1, t.block_size));
    ImGui::Text("%s stored in %s warp stores: %s transactions of 32 B, ideal %s",
                format_bytes(static_cast<double>(w.stores.distinct_bytes)).c_str(),
                format_count(static_cast<double>(w.stores.loads)).c_str(),
                format_count(static_cast<double>(w.stores.sectors)).c_str(),
                format_count(static_cast<double>(w.stores.ideal_sectors)).c_str());
    ImGui::EndTooltip();
  }
  if (t.writes.size() > shown) {
    const std::string more =
        concat({"and ", num(static_cast<long>(t.writes.size() - shown)), " more"});
    flow_same_line(ImGui::CalcTextSize(more.c_str()).x);
    ImGui::TextDisabled("%s", more.c_str());
  }
}

const KernelTimings* KernelPanel::timings() {
  if (!timings_loaded_) {
    timings_loaded_ = true;
    const char* env = std::getenv("KVSCOPE_GPU_TIMINGS");
    const std::string path = env != nullptr && *env != '\0' ? std::string(env)
                                                            : std::string(KVSCOPE_SOURCE_DIR) +
                                                                  "/assets/gpu/kernel-timings.json";
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      try {
        KernelTimings t = load_kernel_timings(path);
        if (t.emulated)
          timings_error_ = path + ": the emulator's times, not a GPU's: not shown";
        else
          timings_ = std::move(t);
      } catch (const std::exception& e) {
        timings_error_ = e.what();
      }
    }
  }
  return timings_ ? &*timings_ : nullptr;
}

// The same launch shape timed on a GPU by the GPU check (attention_timing.h), when it was.
void KernelPanel::draw_measured(const AppState& state, const StepKernelTrace& t) {
  measured_text_.clear();
  const KernelTimings* file = timings();
  if (file == nullptr) {
    if (!timings_error_.empty()) warning_text(timings_error_, state.presenter);
    return;
  }
  const MeasuredLaunch* m = file->find(view_->shape);
  if (m == nullptr) {
    measured_text_ = "GPU: this launch shape was not measured";
    ImGui::TextDisabled("%s", measured_text_.c_str());
    item_tooltip(concat({"The GPU check times ", file->scenario,
                         "'s launches in every format and block size offered here, on stories260K "
                         "and SmolLM2 (",
                         file->device, ", ", file->date.substr(0, 10),
                         "); this step's queries, formats or heads differ from all of them. "
                         "kvscope trace kernel --measure times any launch on a GPU."})
                     .c_str());
    return;
  }
  const double bytes = static_cast<double>(t.summary.kv_unique_bytes);
  const double gb_per_s = m->ms > 0.0 ? bytes / m->ms / 1e6 : 0.0;
  char rate[48];
  std::snprintf(rate, sizeof rate, "%.1f GB/s", gb_per_s);
  std::string line =
      concat({"GPU (", file->device, "): ", format_time(m->ms / 1e3), " for this launch, ", rate});
  if (file->copy_gb_per_s > 0.0) {
    line.append(
        concat({" (", format_percent(gb_per_s / file->copy_gb_per_s, 1), " of a device copy)"}));
  }
  ImGui::TextWrapped("%s", line.c_str());
  measured_text_ = line;
  char copy[64] = "";
  if (file->copy_gb_per_s > 0.0) std::snprintf(copy, sizeof copy, "%.0f GB/s", file->copy_gb_per_s);
  const bool small = file->copy_gb_per_s > 0.0 && gb_per_s < 0.05 * file->copy_gb_per_s;
  item_tooltip(
      concat(
          {"Measured by the GPU check (", file->date.substr(0, 10), ", commit ", file->commit,
           "): the same launch shape (formats, block size, heads and every query's context) "
           "issued ",
           num(m->repeats), " times back to back, the median of ", num(m->rounds),
           " rounds; fastest ", format_time(m->ms_min / 1e3), ". The rate is the ",
           format_bytes(bytes),
           " the emulator counts over that time; a device-to-device copy ran at ",
           copy[0] != '\0' ? copy : "-", " in the same run.",
           small
               ? " A launch this small is bound by its latency (starting the grid, the reduction), "
                 "not by memory: the transactions above are what would count at scale."
               : ""})
          .c_str());
}

void KernelPanel::draw_grid(AppState& state) {
  const StepKernelTrace& t = *view_->trace;
  const sim::KernelTrace& k = t.summary;
  const int cols = static_cast<int>(k.grid.x), rows = static_cast<int>(k.grid.y);
  const Palette& pal = palette(state.presenter);
  const float line = ImGui::GetTextLineHeightWithSpacing();
  const float label_w = ImGui::CalcTextSize("q00 req 000").x + 8.0f;
  // Past 8 rows the grid scrolls, and its scrollbar takes its width from the cells'.
  const float scrollbar = rows > 8 ? ImGui::GetStyle().ScrollbarSize : 0.0f;
  const float avail_w = ImGui::GetContentRegionAvail().x - label_w - scrollbar;
  const float cell_w = std::max(
      6.0f, std::min(avail_w / static_cast<float>(std::max(1, cols)), ImGui::GetFontSize() * 7.0f));
  // Taller cells where the panel has room (up to 2.5 lines), at most ~8 rows before the grid
  // scrolls; the warp view below keeps its room.
  const float room = (ImGui::GetContentRegionAvail().y - line * 6.0f) * 0.6f;
  const float cell_h = std::clamp(room / static_cast<float>(std::max(1, std::min(rows, 8))),
                                  std::max(line * 1.1f, 10.0f), line * 2.5f);
  const float grid_h = std::min(static_cast<float>(rows), 8.0f) * cell_h + 4.0f;
  ImGui::BeginChild("##grid", ImVec2(0, grid_h), false);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("##cells", ImVec2(label_w + cell_w * static_cast<float>(cols),
                                           cell_h * static_cast<float>(rows)));
  const bool over = ImGui::IsItemHovered();
  const bool clicked = ImGui::IsItemClicked();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  hovered_ = -1;
  grid_origin_ = ImVec2(origin.x + label_w, origin.y);
  cell_size_ = ImVec2(cell_w, cell_h);
  grid_cols_ = k.grid.x;
  for (const sim::ThreadBlockTrace& tb : k.blocks) {
    const int c = static_cast<int>(tb.block % k.grid.x), r = static_cast<int>(tb.block / k.grid.x);
    const ImVec2 a(origin.x + label_w + static_cast<float>(c) * cell_w,
                   origin.y + static_cast<float>(r) * cell_h);
    const ImVec2 b(a.x + cell_w - 1.0f, a.y + cell_h - 1.0f);
    const bool empty = tb.kv.loads == 0;
    dl->AddRectFilled(a, b, empty ? pal.block_free : efficiency_color(tb.kv));
    if (over && mouse.x >= a.x && mouse.x < b.x + 1.0f && mouse.y >= a.y && mouse.y < b.y + 1.0f)
      hovered_ = static_cast<int>(tb.block);
    if (static_cast<int>(tb.block) == focus_) dl->AddRect(a, b, pal.outline_selected, 0, 0, 2.0f);
    if (tb.role && cell_w >= ImGui::GetFontSize() * 3.0f) {
      const std::string s = splits_columns(k.kernel)
                                ? concat({"g", num(tb.role->kv_head), " s", num(tb.role->split)})
                                : concat({"h", num(tb.role->head_first)});
      if (ImGui::CalcTextSize(s.c_str()).x + 6.0f <= cell_w)
        dl->AddText(ImVec2(a.x + 4.0f, a.y + (cell_h - ImGui::GetFontSize()) * 0.5f),
                    IM_COL32(20, 24, 30, 255), s.c_str());
    }
  }
  for (int r = 0; r < rows; ++r) {
    const int req = r < static_cast<int>(t.query_request.size())
                        ? t.query_request[static_cast<std::size_t>(r)]
                        : -1;
    std::string s = concat({"q", num(r)});
    if (req >= 0) s.append(concat({" req ", num(req)}));
    dl->AddText(ImVec2(origin.x, origin.y + static_cast<float>(r) * cell_h +
                                     (cell_h - ImGui::GetFontSize()) * 0.5f),
                pal.text_dim, s.c_str());
  }
  ImGui::EndChild();
  if (hovered_ < 0) return;
  focus_ = hovered_;
  const sim::ThreadBlockTrace& tb = k.blocks[static_cast<std::size_t>(hovered_)];
  int req = -1;
  if (tb.role) req = t.query_request[static_cast<std::size_t>(tb.role->query)];
  if (view_->same_pool) {
    state.kernel_blocks = tb.kv_blocks;
    state.kernel_request = req;
    state.kernel_blocks_frame = ImGui::GetFrameCount();
  }
  if (clicked && req >= 0) state.selected_request = req;
  ImGui::BeginTooltip();
  if (tb.role) {
    const std::string of = req >= 0 ? concat({" (request ", num(req), ")"}) : std::string();
    ImGui::Text("query %d%s: %s", tb.role->query, of.c_str(),
                role_text(*tb.role, k.kernel).c_str());
    if (tb.role->slot_end > tb.role->slot_begin)
      ImGui::Text("slots %d to %d of the query's %d", tb.role->slot_begin, tb.role->slot_end - 1,
                  tb.role->num_slots);
    else
      ImGui::Text("no slots: the query's %d end before this split", tb.role->num_slots);
  }
  std::string blocks;
  for (int id : tb.kv_blocks) {
    if (!blocks.empty()) blocks.append(", ");
    blocks.append(num(id));
  }
  ImGui::Text("KV blocks read: %s", blocks.empty() ? "none" : blocks.c_str());
  ImGui::Text(
      "%s read in %s warp loads: %s transactions of 32 B (%s of the bytes moved used), "
      "ideal %s",
      format_bytes(static_cast<double>(tb.kv.distinct_bytes)).c_str(),
      format_count(static_cast<double>(tb.kv.loads)).c_str(),
      format_count(static_cast<double>(tb.kv.sectors)).c_str(),
      format_percent(tb.kv.used_share(), 0).c_str(),
      format_count(static_cast<double>(tb.kv.ideal_sectors)).c_str());
  if (!view_->same_pool)
    ImGui::TextDisabled("re-run with another format or block size: the Block pool shows the run's");
  else if (req >= 0)
    ImGui::TextDisabled("click: select request %d", req);
  ImGui::EndTooltip();
}

void KernelPanel::draw_warp(const AppState& state) {
  const StepKernelTrace& t = *view_->trace;
  if (focus_ < 0 || focus_ >= static_cast<int>(view_->first_k_load.size())) focus_ = 0;
  const std::optional<sim::WarpLoad>& w = view_->first_k_load[static_cast<std::size_t>(focus_)];
  if (!w) {
    ImGui::TextDisabled("thread block %d reads no K (no slots in its split)", focus_);
    return;
  }
  const sim::Traffic& tr = w->traffic;
  ImGui::Text("Warp %u's first K load (thread block %d): %d lanes x %u B", w->warp, focus_,
              w->lanes, w->bytes_per_lane);
  // The sectors it touches, in address order, each drawn with the bytes its lanes asked for.
  std::vector<std::uintptr_t> sectors;
  for (std::uintptr_t a : w->addrs)
    for (std::uintptr_t s = a / 32; s <= (a + w->bytes_per_lane - 1) / 32; ++s)
      sectors.push_back(s);
  std::sort(sectors.begin(), sectors.end());
  sectors.erase(std::unique(sectors.begin(), sectors.end()), sectors.end());
  const float avail = ImGui::GetContentRegionAvail().x;
  const int shown = std::min<int>(static_cast<int>(sectors.size()), 64);
  const float gap = 3.0f;
  const float sw = std::max(
      4.0f, std::min(ImGui::GetFontSize() * 2.5f, (avail - gap * static_cast<float>(shown)) /
                                                      static_cast<float>(std::max(1, shown))));
  const float sh = ImGui::GetFontSize() * 1.6f;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const Palette& pal = palette(state.presenter);
  const ImU32 used = IM_COL32(60, 160, 95, 255), wasted = pal.block_free;
  for (int i = 0; i < shown; ++i) {
    const float x = o.x + static_cast<float>(i) * (sw + gap);
    dl->AddRectFilled(ImVec2(x, o.y), ImVec2(x + sw, o.y + sh), wasted);
    const std::uintptr_t lo = sectors[static_cast<std::size_t>(i)] * 32, hi = lo + 32;
    for (std::uintptr_t a : w->addrs) {
      const std::uintptr_t b0 = std::max(a, lo), b1 = std::min(a + w->bytes_per_lane, hi);
      if (b0 >= b1) continue;
      const float x0 = x + sw * static_cast<float>(b0 - lo) / 32.0f;
      const float x1 = x + sw * static_cast<float>(b1 - lo) / 32.0f;
      dl->AddRectFilled(ImVec2(x0, o.y), ImVec2(std::max(x1, x0 + 1.0f), o.y + sh), used);
    }
  }
  ImGui::Dummy(ImVec2(avail, sh + 2.0f));
  if (ImGui::IsItemHovered())
    item_tooltip(
        "Each box is a 32-byte sector the load touches (shown in address order, gaps "
        "between them left out); green: bytes a lane asked for; grey: bytes moved and "
        "not used");
  ImGui::TextWrapped(
      "%s asked for, %s sectors moved (%s B); ideal %s sectors: %s of the moved bytes used%s",
      format_bytes(static_cast<double>(tr.distinct_bytes)).c_str(),
      format_count(static_cast<double>(tr.sectors)).c_str(),
      format_count(static_cast<double>(tr.bytes_moved())).c_str(),
      format_count(static_cast<double>(tr.ideal_sectors)).c_str(),
      format_percent(tr.used_share(), 0).c_str(),
      static_cast<int>(sectors.size()) > shown ? " (first 64 sectors drawn)" : "");
  for (std::size_t i = 0; i < t.reduce.size(); ++i) {
    const unsigned splits = t.summary.grid.x / static_cast<unsigned>(std::max(1, t.kv_heads));
    if (splits > 1)
      ImGui::TextWrapped(
          "Split-K: each query's slots are cut into up to %u splits (the columns' "
          "s); %s rescales each head's partial sums by their maxima and adds them "
          "(grid %u x %u)",
          splits, t.reduce_kernels[i].c_str(), t.reduce[i].x, t.reduce[i].y);
    else
      ImGui::TextWrapped(
          "Split-K: these contexts fit one split; %s still divides each head's "
          "sum by its softmax total (grid %u x %u)",
          t.reduce_kernels[i].c_str(), t.reduce[i].x, t.reduce[i].y);
  }
  draw_splits(state);
  ImGui::TextDisabled("Emulated: sectors counted, caches not modelled; no GPU timing of it yet");
}

void KernelPanel::draw_splits(const AppState& state) {
  // The focused thread block's query, its context cut into the splits of its KV head: each
  // segment one thread block (coloured as in the grid), the focused one outlined.
  const sim::KernelTrace& k = view_->trace->summary;
  if (focus_ < 0 || focus_ >= static_cast<int>(k.blocks.size())) return;
  const std::optional<sim::TraceRole>& me = k.blocks[static_cast<std::size_t>(focus_)].role;
  if (!me || me->num_slots <= 0 || !splits_columns(k.kernel)) return;
  std::vector<const sim::ThreadBlockTrace*> parts;
  for (const sim::ThreadBlockTrace& tb : k.blocks)
    if (tb.role && tb.role->query == me->query && tb.role->kv_head == me->kv_head &&
        tb.role->slot_end > tb.role->slot_begin)
      parts.push_back(&tb);
  if (parts.size() < 2) return;
  const Palette& pal = palette(state.presenter);
  const float w = ImGui::GetContentRegionAvail().x, h = ImGui::GetFontSize() * 1.2f;
  const ImVec2 o = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float per_slot = w / static_cast<float>(me->num_slots);
  for (const sim::ThreadBlockTrace* tb : parts) {
    const ImVec2 a(o.x + per_slot * static_cast<float>(tb->role->slot_begin), o.y);
    const ImVec2 b(o.x + per_slot * static_cast<float>(tb->role->slot_end) - 2.0f, o.y + h);
    dl->AddRectFilled(a, b, efficiency_color(tb->kv));
    if (static_cast<int>(tb->block) == focus_) dl->AddRect(a, b, pal.outline_selected, 0, 0, 2.0f);
    const std::string label = concat({"s", num(tb->role->split)});
    if (ImGui::CalcTextSize(label.c_str()).x + 6.0f < b.x - a.x)
      dl->AddText(ImVec2(a.x + 3.0f, a.y + (h - ImGui::GetFontSize()) * 0.5f),
                  IM_COL32(20, 24, 30, 255), label.c_str());
  }
  ImGui::Dummy(ImVec2(w, h + 2.0f));
  ImGui::TextDisabled("query %d's %d slots, KV head %d, in %zu splits, one thread block each",
                      me->query, me->num_slots, me->kv_head, parts.size());
}

void KernelPanel::draw(AppState& state) {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (view_ && view_->generation != state.source_generation()) {
    view_.reset();  // another run: its blocks and requests are not this one's
    failed_.reset();
    requested_.reset();
  }
  if (!info || !info->model) {
    ImGui::TextWrapped(
        "The kernel trace re-runs a scenario with its model's weights on the emulated device: "
        "open a scenario (a recording, a live stream or a bookkeeping run has none to re-run).");
    return;
  }
  if (info->config.mla) {
    ImGui::TextWrapped(
        "This run caches MLA latents: their kernels are not traced (paged "
        "attention only). Choose a scenario without MLA.");
    return;
  }
  layer_ = std::clamp(layer_, 0, std::max(0, info->shape.n_layers - 1));  // another model
  draw_controls(state, *info);
  poll(state, info);
  if (job_.busy()) {
    ImGui::Text("re-running on the emulated device: step %d of %d...", job_.steps_done(),
                job_.steps_needed());
    ImGui::SameLine();
    if (ImGui::SmallButton("Cancel")) {
      job_.request_cancel();  // it stops after the step it is running
      failed_ = running_;     // and is not asked again until Trace is pressed
    }
  } else if (!auto_trace(*info) && (!view_ || view_->ui_step != state.step())) {
    ImGui::TextDisabled("%s",
                        concat({"Trace step ", num(state.step()),
                                " re-runs the scenario on the emulated device (seconds a step "
                                "for this model)"})
                            .c_str());
  } else if (state.playing && (!view_ || view_->ui_step != state.step())) {
    ImGui::TextDisabled("the panel traces the step shown once playing stops");
  }
  if (!view_) return;
  if (!view_->error.empty()) {
    warning_text(view_->error, state.presenter);
    return;
  }
  if (!view_->trace) return;
  if (view_->ui_step != state.step())
    ImGui::TextDisabled("showing step %d's trace", view_->ui_step);
  draw_summary(state);
  draw_grid(state);
  draw_writes(state);
  draw_warp(state);
}

}  // namespace kvscope::ui
