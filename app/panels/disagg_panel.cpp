// Prefill/decode panel: the TTFT split, the GPUs' steps and the link's transfers on one time axis,
// and both pools at the time chosen.
#include "app/panels/disagg_panel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "app/core/theme.h"
#include "app/widgets/widgets.h"
#include "engine/analysis/memory_math.h"

namespace kvscope::ui {
namespace {

// The TTFT parts' colours: queue, prefill, transfer, first decode.
ImU32 part_color(int part) {
  static const ImU32 kColors[] = {IM_COL32(120, 128, 140, 255), IM_COL32(230, 150, 60, 255),
                                  IM_COL32(200, 90, 200, 255), IM_COL32(80, 150, 230, 255)};
  return kColors[part];
}

const char* const kParts[] = {"queue", "prefill", "transfer", "first decode"};

}  // namespace

std::string DisaggPanel::help() const {
  return "Prefill is bound by arithmetic, decode by memory bandwidth; on one GPU every arriving "
         "prompt lengthens the step of every request decoding beside it. Disaggregated serving "
         "gives each phase its own GPU and sends the prompt's K/V over a link, paid before the "
         "first token; the times here are modelled (a GPU's roofline, the link's bandwidth).";
}

bool DisaggPanel::auto_run(const RunInfo& info) {
  // Bookkeeping runs and stories260K-sized models run both serving modes in under a second; a
  // model with weights the size of SmolLM2 takes minutes (two full runs on the CPU).
  if (!info.model) return true;
  const ModelConfig& c = info.shape;
  return static_cast<double>(c.dim) * c.dim * c.n_layers * 12.0 < 20e6;
}

bool DisaggPanel::shows(const AppState& state) const {
  return view_ && view_->generation == state.source_generation() && view_->link_choice == link_ &&
         view_->transfer_choice == transfer_;
}

void DisaggPanel::poll(const AppState& state, const std::shared_ptr<const RunInfo>& info) {
  if (auto done = job_.take()) {
    view_ = std::move(done);
    if (!view_->error.empty()) failed_ = running_;
    if (view_->error.empty() && (time_ < 0 || time_ > view_->end)) {
      // Mid-run, while a prompt's K/V crosses: its prefill done, its blocks held, others decoding.
      time_ = view_->end * 0.5;
      double best = view_->end;
      for (const RequestTiming& t : view_->disaggregated.requests) {
        const double at = (t.prefill_end + t.transfer_end) / 2;
        if (t.transfer_end > t.prefill_end && std::abs(at - view_->end * 0.5) < best) {
          best = std::abs(at - view_->end * 0.5);
          time_ = at;
        }
      }
      span_ = 0;
    }
    running_.reset();
  }
  Wanted w;
  w.generation = state.source_generation();
  w.variant = info->override.variant;
  w.link = link_;
  w.transfer = transfer_;
  if (shows(state) || job_.busy() || failed_ == w) return;
  if (!auto_run(*info) && requested_ != w) return;
  DisaggJob::Request r;
  r.info = info;
  r.generation = w.generation;
  r.link = link_;
  r.transfer = transfer_;
  if (job_.start(r)) running_ = w;
}

void DisaggPanel::draw_controls(const AppState& state) {
  const DisaggOptions* o = view_ && view_->error.empty() ? &view_->options : nullptr;
  const std::string link_label = link_.empty() ? (o ? o->link.name : "scenario's") : link_;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7.0f);
  if (ImGui::BeginCombo("link", link_label.c_str())) {
    std::vector<Link> links = link_presets();
    for (const char* ethernet : {"25Gb/s", "10Gb/s"}) {
      links.push_back(parse_link(ethernet, "link"));
      links.back().what = std::string("Ethernet, ") + ethernet;
    }
    for (const Link& l : links) {
      char label[96];
      std::snprintf(label, sizeof label, "%s (%.2f GB/s)", l.name.c_str(),
                    l.bytes_per_second / 1e9);
      if (ImGui::Selectable(label, l.name == link_label)) link_ = l.name;
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", l.what.c_str());
    }
    ImGui::EndCombo();
  }
  item_tooltip("The link the K/V crosses (one direction's bandwidth)");
  ImGui::SameLine();
  const bool layer =
      transfer_.empty() ? (!o || o->transfer == TransferMode::kLayerWise) : transfer_ == "layer";
  if (ImGui::RadioButton("layer by layer", layer)) transfer_ = "layer";
  item_tooltip("Each block's layers leave as the prefill step computes them (Mooncake)");
  ImGui::SameLine();
  if (ImGui::RadioButton("whole request", !layer)) transfer_ = "request";
  item_tooltip("A request's blocks leave together after its prefill");
  if (o != nullptr) {
    const std::string note = o->gpu.name + " roofline, " + format_time(o->latency_seconds) +
                             " latency" + (view_->from_scenario ? "" : ", defaults");
    flow_same_line(ImGui::CalcTextSize(note.c_str()).x);
    ImGui::TextDisabled("%s", note.c_str());
    if (!view_->from_scenario) {
      item_tooltip(
          "The scenario has no cache.disaggregation section: the defaults run (RDMA "
          "400 Gb/s, layer by layer, the H100's roofline, the scenario's pool twice)");
    }
  }
  static_cast<void>(state);
}

void DisaggPanel::draw_ttft(const AppState& state) {
  const DisaggView& v = *view_;
  const DisaggSummary* runs[] = {&v.co, &v.di};
  const char* names[] = {"colocated", "disaggregated"};
  const double longest = std::max({v.co.ttft_mean, v.di.ttft_mean, 1e-12});
  const float label_w = ImGui::CalcTextSize("disaggregated ").x;
  const float text_w = ImGui::CalcTextSize("TTFT 999.99 ms, TPOT p90 99.99 ms").x;
  const float bar_w = std::max(40.0f, ImGui::GetContentRegionAvail().x - label_w - text_w - 16.0f);
  const float h = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (int k = 0; k < 2; ++k) {
    const DisaggSummary& s = *runs[k];
    const float x0 = ImGui::GetCursorPosX();
    ImGui::TextUnformatted(names[k]);
    ImGui::SameLine(x0 + label_w);
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const double parts[] = {s.queue, s.prefill, s.transfer, s.first_decode};
    float x = p.x;
    for (int i = 0; i < 4; ++i) {
      const float w = static_cast<float>(parts[i] / longest) * bar_w;
      if (w > 0.0f) dl->AddRectFilled(ImVec2(x, p.y), ImVec2(x + w, p.y + h), part_color(i));
      if (w > 0.0f && ImGui::IsMouseHoveringRect(ImVec2(x, p.y), ImVec2(x + w, p.y + h)))
        ImGui::SetTooltip("%s: %s (mean)", kParts[i], format_time(parts[i]).c_str());
      x += w;
    }
    ImGui::Dummy(ImVec2(bar_w, h));
    ImGui::SameLine();
    ImGui::Text("TTFT %s, TPOT p90 %s", format_time(s.ttft_mean).c_str(),
                format_time(s.tpot_p90).c_str());
  }
  for (int i = 0; i < 4; ++i) {
    if (i > 0) flow_same_line(ImGui::CalcTextSize(kParts[i]).x + h * 1.5f);
    swatch(part_color(i));
    ImGui::SameLine();
    ImGui::TextUnformatted(kParts[i]);
  }
  static_cast<void>(state);
}

void DisaggPanel::draw_lanes(const AppState& state) {
  const DisaggView& v = *view_;
  const Palette& pal = palette(state.presenter);
  if (span_ <= 0) span_ = std::max(v.end / 6.0, 1e-9);
  // The time slider and play.
  if (icon_button("##play", playing_ ? Icon::kPause : Icon::kPlay, ImGui::GetFrameHeight()))
    playing_ = !playing_;
  item_tooltip("Play the run's time (the whole run in 20 s)");
  if (playing_) {
    time_ += ImGui::GetIO().DeltaTime * v.end / 20.0;
    if (time_ >= v.end) {
      time_ = v.end;
      playing_ = false;
    }
  }
  ImGui::SameLine();
  // The slider in microseconds for a run shorter than a millisecond (stories260K's), else in ms.
  const bool micro = v.end < 1e-3;
  const double unit = micro ? 1e6 : 1e3;
  float shown = static_cast<float>(time_ * unit);
  ImGui::SetNextItemWidth(std::max(80.0f, ImGui::GetContentRegionAvail().x * 0.6f));
  if (ImGui::SliderFloat(micro ? "time (us)" : "time (ms)", &shown, 0.0f,
                         static_cast<float>(v.end * unit), "%.2f"))
    time_ = shown / unit;
  double t0 = std::clamp(time_ - span_ / 2, 0.0, std::max(0.0, v.end - span_));
  // Lanes: colocated GPU, prefill GPU, link, decode GPU.
  const char* lanes[] = {"colocated GPU", "prefill GPU", "link", "decode GPU"};
  // The lanes take the height the pools' two rows leave, from 1.1 to 3.5 lines each.
  const float line = ImGui::GetTextLineHeight();
  const float avail = ImGui::GetContentRegionAvail().y;
  const float room = avail - pools_height(v);
  const float h = std::clamp(room / 4.0f, line * 1.1f, line * 3.5f);
  // The block maps take the height the lanes leave, up to 12 lines (a 1080p screen's worth).
  map_h_ = std::clamp(map_height() + room - 4.0f * h, map_height(), 12.0f * line);
  const float label_w = ImGui::CalcTextSize("colocated GPU ").x;
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float w = std::max(60.0f, ImGui::GetContentRegionAvail().x - label_w);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  auto x_of = [&](double t) { return p.x + label_w + static_cast<float>((t - t0) / span_) * w; };
  for (int i = 0; i < 4; ++i) {
    const float y = p.y + static_cast<float>(i) * h;
    dl->AddText(ImVec2(p.x, y), pal.text_dim, lanes[i]);
    dl->AddRect(ImVec2(p.x + label_w, y), ImVec2(p.x + label_w + w, y + h - 2.0f), pal.grid);
  }
  dl->PushClipRect(ImVec2(p.x + label_w, p.y), ImVec2(p.x + label_w + w, p.y + 4 * h), true);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  auto step_lane = [](const DisaggReport& r, const StepRecord& s) {
    return r.disaggregated ? (s.instance == 0 ? 1 : 3) : 0;
  };
  for (const DisaggReport* r : {&v.colocated, &v.disaggregated}) {
    for (const StepRecord& s : r->steps) {
      if (s.end < t0 || s.start > t0 + span_ || s.end == s.start) continue;
      const float y = p.y + static_cast<float>(step_lane(*r, s)) * h;
      const ImVec2 a(x_of(s.start) + 0.5f, y + 2.0f),
          b(std::max(x_of(s.end) - 0.5f, a.x + 1.0f), y + h - 4.0f);
      dl->AddRectFilled(a, b, s.prefill_tokens > 0 ? part_color(1) : part_color(3));
      if (ImGui::IsWindowHovered() && mouse.x >= a.x && mouse.x <= b.x && mouse.y >= a.y &&
          mouse.y <= b.y) {
        ImGui::SetTooltip("%s: %s to %s\n%lld prompt tokens, %lld decoded", lanes[step_lane(*r, s)],
                          format_time(s.start).c_str(), format_time(s.end).c_str(),
                          static_cast<long long>(s.prefill_tokens),
                          static_cast<long long>(s.decode_tokens));
      }
    }
  }
  for (const TransferEvent& e : v.disaggregated.transfers) {
    if (e.done) continue;
    const RequestTiming& q = v.disaggregated.requests[static_cast<std::size_t>(e.request)];
    if (q.transfer_end < t0 || e.time > t0 + span_) continue;
    const float y = p.y + 2.0f * h + (e.request % 2 == 0 ? 2.0f : h * 0.5f);
    const ImVec2 a(x_of(e.time), y),
        b(std::max(x_of(q.transfer_end), x_of(e.time) + 1.0f), y + h * 0.5f - 3.0f);
    dl->AddRectFilled(a, b, part_color(2));
    if (ImGui::IsWindowHovered() && mouse.x >= a.x && mouse.x <= b.x && mouse.y >= a.y &&
        mouse.y <= b.y) {
      ImGui::SetTooltip("request %d: %d blocks, %s, %s to %s", e.request, e.blocks,
                        format_bytes(static_cast<double>(e.bytes)).c_str(),
                        format_time(e.time).c_str(), format_time(q.transfer_end).c_str());
    }
  }
  const float cx = x_of(time_);
  dl->AddLine(ImVec2(cx, p.y), ImVec2(cx, p.y + 4 * h), pal.accent, 2.0f);
  dl->PopClipRect();
  ImGui::Dummy(ImVec2(label_w + w, 4 * h));
  if (ImGui::IsItemHovered()) {
    if (ImGui::GetIO().MouseWheel != 0.0f) {
      span_ = std::clamp(span_ * (ImGui::GetIO().MouseWheel > 0 ? 0.8 : 1.25), v.end / 2000.0,
                         std::max(v.end, 1e-9));
    }
    if (!ImGui::IsAnyItemActive() && ImGui::GetIO().MousePos.x < p.x + label_w) {
      ImGui::SetTooltip(
          "%s to %s shown (the wheel zooms). Orange: steps that ran prompt tokens; "
          "blue: decode-only steps; magenta: a request's K/V on the link",
          format_time(t0).c_str(), format_time(t0 + span_).c_str());
    }
  }
}

float DisaggPanel::map_height() {
  return 2.0f * ImGui::GetFrameHeight();  // two lines of text: legible cells at 720p
}

float DisaggPanel::pools_height(const DisaggView& v) {
  const float row = ImGui::GetFrameHeightWithSpacing();
  if (v.disaggregated.block_changes.empty()) return 2.0f * row;
  return map_height() + ImGui::GetStyle().ItemSpacing.y + row;
}

void DisaggPanel::draw_pools(const AppState& state) {
  const DisaggView& v = *view_;
  const Palette& pal = palette(state.presenter);
  const PoolsAt co = pools_at(v.colocated, time_);
  const PoolsAt di = pools_at(v.disaggregated, time_);
  drawn_ = di;
  const float h = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // A pool as a bar `w` wide: used blocks, of them held (magenta), with "used/total" on it.
  auto bar = [&](float w, const char* name, int used, int held, int total, const char* tip) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float u = total > 0 ? static_cast<float>(used) / static_cast<float>(total) : 0.0f;
    const float k = total > 0 ? static_cast<float>(held) / static_cast<float>(total) : 0.0f;
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), pal.block_free);
    dl->AddRectFilled(p, ImVec2(p.x + w * u, p.y + h), part_color(3));
    if (held > 0) dl->AddRectFilled(p, ImVec2(p.x + w * k, p.y + h), part_color(2));
    char text[64];
    std::snprintf(text, sizeof text, "%s %d/%d", name, used, total);
    dl->AddText(ImVec2(p.x + 4.0f, p.y), pal.text, text);
    ImGui::Dummy(ImVec2(w, h));
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip(
          "%s: %d of %d blocks used%s", tip, used, total,
          held > 0 ? (", " + std::to_string(held) + " held for the link").c_str() : "");
    }
  };
  // An instance's pool as a map of its blocks, `w` x `gh`: each block a cell coloured by the
  // request holding it (magenta: held for the link; outlined: reserved by the decode prefix
  // cache for a request still on its way; grey: only cached), "name used/total" over it.
  auto grid = [&](float w, float gh, int instance, const char* name, int used, int held,
                  int total) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    std::vector<BlockOwner>& map = drawn_maps_[static_cast<std::size_t>(instance)];
    map = blocks_at(v.disaggregated, instance, time_);
    const int n = static_cast<int>(map.size());
    const int cols =
        std::max(1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n) * w / gh))));
    const int rows = std::max(1, (n + cols - 1) / cols);
    const float cw = w / static_cast<float>(cols), ch = gh / static_cast<float>(rows);
    const float gap = cw >= 4.0f && ch >= 4.0f ? 1.0f : 0.0f;
    dl->AddRectFilled(p, ImVec2(p.x + w, p.y + gh), pal.panel_bg);
    int reserved = 0, cached = 0;
    for (int b = 0; b < n; ++b) {
      const BlockOwner& o = map[static_cast<std::size_t>(b)];
      const int row = b / cols, col = b % cols;
      const ImVec2 a(p.x + static_cast<float>(col) * cw, p.y + static_cast<float>(row) * ch);
      const ImVec2 z(a.x + cw - gap, a.y + ch - gap);
      switch (o.use) {
        case BlockUse::kFree:
          dl->AddRectFilled(a, z, pal.block_free);
          break;
        case BlockUse::kCached:
          dl->AddRectFilled(a, z, pal.block_cached);
          ++cached;
          break;
        case BlockUse::kRunning:
          dl->AddRectFilled(a, z, sequence_color(o.request));
          break;
        case BlockUse::kHeld:
          dl->AddRectFilled(a, z, part_color(2));
          break;
        case BlockUse::kReserved:
          dl->AddRectFilled(a, z, sequence_color(o.request, 0.45f));
          ++reserved;
          break;
      }
    }
    char text[64];
    std::snprintf(text, sizeof text, "%s %d/%d", name, used, total);
    const ImVec2 ts = ImGui::CalcTextSize(text);
    // Over the map's first rows: a backdrop the blocks show through.
    dl->AddRectFilled(ImVec2(p.x, p.y), ImVec2(p.x + ts.x + 8.0f, p.y + ts.y),
                      mix_color(pal.window_bg, IM_COL32(0, 0, 0, 0), 0.35f));
    dl->AddText(ImVec2(p.x + 4.0f, p.y), pal.text, text);
    ImGui::Dummy(ImVec2(w, gh));
    if (ImGui::IsItemHovered()) {
      const ImVec2 m = ImGui::GetMousePos();
      const int c = std::clamp(static_cast<int>((m.x - p.x) / cw), 0, cols - 1);
      const int r = std::clamp(static_cast<int>((m.y - p.y) / ch), 0, rows - 1);
      const int b = r * cols + c;
      std::string what;
      if (b < n) {
        const BlockOwner& o = map[static_cast<std::size_t>(b)];
        what = "\nblock " + std::to_string(b) + ": ";
        switch (o.use) {
          case BlockUse::kFree:
            what += "free";
            break;
          case BlockUse::kCached:
            what += "cached, held by no request";
            break;
          case BlockUse::kRunning:
            what += "request " + std::to_string(o.request);
            break;
          case BlockUse::kHeld:
            what += "request " + std::to_string(o.request) + "'s, held until its K/V has crossed";
            break;
          case BlockUse::kReserved:
            what += "cached, kept for request " + std::to_string(o.request) +
                    " while the rest of its K/V crosses";
            break;
        }
      }
      ImGui::SetTooltip(
          "the %s's pool: %d of %d blocks used (colour: the request holding it)%s%s%s%s", name,
          used, total,
          held > 0 ? (", " + std::to_string(held) + " held for the link (magenta)").c_str() : "",
          cached > 0 ? (", " + std::to_string(cached) + " only cached (grey)").c_str() : "",
          reserved > 0 ? (", " + std::to_string(reserved) +
                          " kept by its prefix cache for requests on their way (pale)")
                             .c_str()
                       : "",
          what.c_str());
    }
  };
  char link[96];
  if (di.transfers > 0) {
    std::snprintf(link, sizeof link, " -> %d blocks, %s on the link -> ", di.blocks_in_flight,
                  format_bytes(static_cast<double>(di.bytes_in_flight)).c_str());
  } else {
    std::snprintf(link, sizeof link, " -> nothing on the link -> ");
  }
  const float label_w = ImGui::CalcTextSize("colocated ").x;
  const float link_w = ImGui::CalcTextSize(link).x;
  const float w = std::max(30.0f, (ImGui::GetContentRegionAvail().x - label_w - link_w) / 2.0f);
  const float x0 = ImGui::GetCursorPosX();
  const bool mapped = !v.disaggregated.block_changes.empty();
  for (std::vector<BlockOwner>& m : drawn_maps_) m.clear();
  ImGui::TextUnformatted("split");
  ImGui::SameLine(x0 + label_w);
  if (mapped) {
    const float gh = map_h_ > 0 ? map_h_ : map_height();
    grid(w, gh, 0, "prefill GPU", di.blocks_used[0], di.blocks_held[0],
         v.disaggregated.instances[0].num_blocks);
    ImGui::SameLine(0.0f, 0.0f);
    ImGui::BeginGroup();
    ImGui::TextUnformatted(link);
    // One square per request on the link, in its colour.
    const ImVec2 q = ImGui::GetCursorScreenPos();
    float x = q.x + ImGui::CalcTextSize(" -> ").x;
    for (const RequestTiming& t : v.disaggregated.requests) {
      if (!(t.transfer_start <= time_ && time_ < t.transfer_end) || t.transfer_blocks == 0)
        continue;
      if (x + h * 0.7f > q.x + link_w) break;
      dl->AddRectFilled(ImVec2(x, q.y + h * 0.15f), ImVec2(x + h * 0.7f, q.y + h * 0.85f),
                        sequence_color(t.id));
      x += h * 0.9f;
    }
    ImGui::Dummy(ImVec2(link_w, h));
    ImGui::EndGroup();
    ImGui::SameLine(0.0f, 0.0f);
    grid(w, gh, 1, "decode GPU", di.blocks_used[1], 0, v.disaggregated.instances[1].num_blocks);
  } else {
    bar(w, "prefill GPU", di.blocks_used[0], di.blocks_held[0],
        v.disaggregated.instances[0].num_blocks,
        "the prefill GPU's pool (magenta: finished prompts held until they have crossed)");
    ImGui::SameLine(0.0f, 0.0f);
    ImGui::TextUnformatted(link);
    ImGui::SameLine(0.0f, 0.0f);
    bar(w, "decode GPU", di.blocks_used[1], 0, v.disaggregated.instances[1].num_blocks,
        "the decode GPU's pool");
  }
  ImGui::TextUnformatted("colocated");
  ImGui::SameLine(x0 + label_w);
  bar(w, "one GPU", co.blocks_used[0], 0, v.colocated.instances[0].num_blocks,
      "the one GPU's pool");
  ImGui::SameLine();
  ImGui::TextDisabled("pools at %s", format_time(time_).c_str());
}

void DisaggPanel::draw(AppState& state) {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  if (view_ && view_->generation != state.source_generation()) {
    view_.reset();  // another run
    failed_.reset();
    requested_.reset();
    time_ = -1;
  }
  if (!info || info->scenario_path.empty()) {
    ImGui::TextWrapped(
        "Runs a scenario's requests colocated and on a prefill GPU and a decode GPU joined by a "
        "link: open a scenario (a recording or a live stream has no requests to re-run).");
    return;
  }
  draw_controls(state);
  poll(state, info);
  if (job_.busy()) {
    ImGui::Text("running colocated and disaggregated: %ld steps...", job_.steps_done());
  } else if (!auto_run(*info) && !shows(state)) {
    if (ImGui::Button("Run")) {
      Wanted w{state.source_generation(), info->override.variant, link_, transfer_};
      requested_ = w;
      failed_.reset();
    }
    item_tooltip("Runs the model twice on the CPU (minutes for this model)");
  }
  if (!view_) return;
  if (!view_->error.empty()) {
    warning_text(view_->error, state.presenter);
    return;
  }
  draw_ttft(state);
  draw_lanes(state);
  draw_pools(state);
}

}  // namespace kvscope::ui
