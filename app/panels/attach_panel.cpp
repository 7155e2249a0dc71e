// Live attach panel: per-rank connection table, two plots over the session, LoRA and shared-prefix
// tables, all from the AttachFeed's latest snapshot.
#include "app/panels/attach_panel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app/core/theme.h"
#include "app/widgets/widgets.h"
#include "engine/common/error.h"
#include "engine/model/prompt_file.h"
#include "present/attach_report.h"

namespace kvscope::ui {

namespace {

ImU32 connection_color(KvConnection c, bool presenter) {
  const Palette& p = palette(presenter);
  switch (c) {
    case KvConnection::kConnected:
      return series_color(2);
    case KvConnection::kDisconnected:
    case KvConnection::kNotZeroMq:
      return p.warn;
    case KvConnection::kHandshaking:
    case KvConnection::kListening:
    case KvConnection::kUnknown:
      break;
  }
  return p.text_dim;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

}  // namespace

// Batch k of the stream is step k of the timeline (step 0 = the attach), until the history is
// full; the samples say when each batch count was reached.
double seconds_at_step(const AttachSnapshot& snap, int step) {
  for (const AttachSample& a : snap.samples)
    if (a.batches >= step) return a.seconds;
  return snap.samples.empty() ? NAN : snap.samples.back().seconds;
}

int step_at_seconds(const AttachSnapshot& snap, double seconds) {
  std::int64_t batches = 0;
  for (const AttachSample& a : snap.samples) {
    if (a.seconds > seconds) break;
    batches = a.batches;
  }
  return static_cast<int>(std::min<std::int64_t>(batches, 1 << 30));
}

bool attach_flowing(const AttachSnapshot& snap) {
  if (snap.stopped || snap.last_batch_seconds < 0 || snap.seconds - snap.last_batch_seconds > 10.0)
    return false;
  for (const KvRankStats& r : snap.ranks)
    if (r.connection == KvConnection::kDisconnected || r.connection == KvConnection::kListening ||
        r.connection == KvConnection::kNotZeroMq || r.connection == KvConnection::kHandshaking)
      return false;
  return true;
}

std::string AttachPanel::help() const {
  return "vLLM and SGLang publish every KV block their prefix cache stores and removes (ZeroMQ, "
         "--kv-events-config); this follows that stream live, per data-parallel rank and medium. "
         "The stream has no lookups, so prefix hits cannot be seen here; churn is blocks removed "
         "within 1 s of being stored.";
}

std::string attach_status_text(const AttachSnapshot& snap) {
  std::string s = snap.stopped ? "detached from " : (snap.bind ? "listening at " : "attached to ");
  s.append(snap.endpoint);
  for (const KvRankStats& r : snap.ranks) {
    s.append(r.rank == 0 ? "  |  " : ", ");
    s.append("rank ").append(std::to_string(r.rank)).append(" ");
    s.append(kv_connection_name(r.connection));
  }
  s.append("  |  ")
      .append(format_count(static_cast<double>(snap.totals.batches)))
      .append(" batches");
  s.append("  |  ")
      .append(format_count(static_cast<double>(snap.counters.live)))
      .append(" live blocks");
  if (snap.totals.batches > 0) s.append("  |  lag ").append(seconds_text(snap.totals.lag_s));
  s.append("  |  gaps ").append(std::to_string(snap.totals.gaps));
  if (snap.totals.lost > 0) s.append("  |  lost ").append(kv_lost_text(snap.totals));
  if (snap.totals.replaying) s.append(", replaying");
  if (snap.totals.restarts > 0)
    s.append("  |  restarts ").append(std::to_string(snap.totals.restarts));
  if (snap.totals.decode_errors > 0)
    s.append("  |  decode errors ").append(std::to_string(snap.totals.decode_errors));
  return s;
}

std::vector<PlotSeries> AttachPanel::live_series(const AttachSnapshot& snap) {
  std::vector<PlotSeries> out;
  const bool one_rank = snap.ranks.size() <= 1;
  for (std::size_t k = 0; k < snap.series.size(); ++k) {
    PlotSeries s;
    const auto& [rank, medium] = snap.series[k];
    s.label = one_rank ? medium : "rank " + std::to_string(rank) + " " + medium;
    s.color = series_color(static_cast<int>(k));
    for (const AttachSample& a : snap.samples) {
      s.x.push_back(a.seconds);
      s.y.push_back(k < a.live.size() ? static_cast<double>(a.live[k]) : 0.0);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<PlotSeries> AttachPanel::rate_series(const AttachSnapshot& snap) {
  PlotSeries stored, removed, churn;
  stored.label = "stored / s";
  removed.label = "removed / s";
  churn.label = "churn: removed < 1 s after store";
  stored.color = series_color(0);
  removed.color = series_color(1);
  churn.color = series_color(3);
  for (std::size_t i = 1; i < snap.samples.size(); ++i) {
    const AttachSample& a = snap.samples[i - 1];
    const AttachSample& b = snap.samples[i];
    const double dt = b.seconds - a.seconds;
    if (dt <= 0) continue;
    for (auto [series, value] :
         {std::pair{&stored, b.stored - a.stored}, std::pair{&removed, b.removed - a.removed},
          std::pair{&churn, b.short_lived - a.short_lived}}) {
      series->x.push_back(b.seconds);
      series->y.push_back(static_cast<double>(value) / dt);
    }
  }
  return {std::move(stored), std::move(removed), std::move(churn)};
}

void AttachPanel::draw_ranks(const AttachSnapshot& snap) {
  // Up to four ranks shown at once; more scroll (the header row stays).
  const ImGuiTableFlags flags = ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollX |
                                ImGuiTableFlags_ScrollY;
  const float rows = static_cast<float>(std::min<std::size_t>(snap.ranks.size(), 4) + 1);
  const float h = rows * (ImGui::GetTextLineHeight() + ImGui::GetStyle().CellPadding.y * 2.0f) +
                  ImGui::GetStyle().ScrollbarSize + 4.0f;
  if (!ImGui::BeginTable("##ranks", 10, flags, ImVec2(0, h))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* name : {"rank", "publisher", "connection", "batches", "live", "gaps", "replayed",
                           "lost", "restarts", "lag"})
    ImGui::TableSetupColumn(name);
  ImGui::TableHeadersRow();
  for (const KvRankStats& r : snap.ranks) {
    ImGui::TableNextColumn();
    ImGui::Text("%d", r.rank);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.endpoint.c_str());
    if (!r.replay_endpoint.empty()) item_tooltip(("replay: " + r.replay_endpoint).c_str());
    ImGui::TableNextColumn();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(connection_color(r.connection, false)), "%s",
                       kv_connection_name(r.connection));
    item_tooltip(r.connection == KvConnection::kDisconnected
                     ? "Nothing accepted the connection: wrong host or port, or the engine is down"
                 : r.connection == KvConnection::kNotZeroMq
                     ? "Something accepts connections at that port but does not speak ZeroMQ (an "
                       "HTTP port?): give the engine's KV-events endpoint"
                 : r.connection == KvConnection::kHandshaking
                     ? "Connected; waiting for the publisher's ZeroMQ greeting"
                 : r.connection == KvConnection::kListening
                     ? "Bound and waiting for the engine to connect (its endpoint names this host)"
                     : "The socket's connection state, from ZeroMQ's monitor");
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_count(static_cast<double>(r.batches)).c_str());
    ImGui::TableNextColumn();
    const std::int64_t live =
        static_cast<std::size_t>(r.rank) < snap.rank_live.size() ? snap.rank_live[r.rank] : 0;
    ImGui::TextUnformatted(format_count(static_cast<double>(live)).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%lld", static_cast<long long>(r.gaps));
    ImGui::TableNextColumn();
    ImGui::Text("%lld", static_cast<long long>(r.replayed));
    ImGui::TableNextColumn();
    ImGui::Text("%lld", static_cast<long long>(r.lost));
    ImGui::TableNextColumn();
    ImGui::Text("%lld", static_cast<long long>(r.restarts));
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.batches > 0 ? seconds_text(r.lag_s).c_str() : "-");
    item_tooltip("Receive time minus the engine's batch timestamp (includes clock skew)");
  }
  ImGui::EndTable();
}

void AttachPanel::draw_tables(const AttachSnapshot& snap) {
  const ImGuiTableFlags flags =
      ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV;
  if (!ImGui::BeginTable("##attach_tables", 3, ImGuiTableFlags_SizingStretchProp)) return;
  ImGui::TableNextColumn();
  ImGui::TextUnformatted("LoRA namespaces");
  item_tooltip(
      "Blocks by the adapter that computed them (lora_name, or lora_id when no name "
      "came); \"base\" is the base model");
  if (ImGui::BeginTable("##loras", 3, flags)) {
    ImGui::TableSetupColumn("adapter");
    ImGui::TableSetupColumn("live");
    ImGui::TableSetupColumn("stored");
    ImGui::TableHeadersRow();
    for (const auto& [name, c] : snap.loras) {
      if (c.stored == 0 && name == "base" && snap.loras.size() > 1) continue;
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(name.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_count(static_cast<double>(c.live)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_count(static_cast<double>(c.stored)).c_str());
    }
    ImGui::EndTable();
  }
  ImGui::TableNextColumn();
  ImGui::TextUnformatted("Deepest shared prefixes");
  item_tooltip(
      "Cached blocks with two or more cached continuations: prompts that agreed on every "
      "token up to here, then diverged");
  if (snap.shared_prefixes.empty()) {
    ImGui::TextDisabled("none yet (no cached block has two continuations)");
  } else if (ImGui::BeginTable("##shared", 5, flags)) {
    for (const char* h : {"tokens", "blocks", "branches", "rank / medium", "adapter"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (std::size_t i = 0; i < snap.shared_prefixes.size(); ++i) {
      const KvSharedPrefix& p = snap.shared_prefixes[i];
      ImGui::TableNextColumn();
      const char* at_least = p.complete ? "" : ">= ";
      ImGui::Text("%s%s", at_least, format_count(static_cast<double>(p.tokens)).c_str());
      item_tooltip(("block " + std::to_string(p.slot) +
                    " in the block map and the prefix tree (kvscope's slot number)" +
                    (p.complete ? std::string()
                                : std::string("; part of its chain was stored before attach, "
                                              "in a lost batch or is gone: at least this long")))
                       .c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%s%d", at_least, p.blocks);
      ImGui::TableNextColumn();
      ImGui::Text("%d", p.branches);
      ImGui::TableNextColumn();
      ImGui::Text("%d / %s", p.rank, p.medium.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(p.lora.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::TableNextColumn();
  ImGui::Text("Media and groups (clear scope %s%s)", kv_clear_scope_name(snap.clear_scope),
              snap.clear_scope == KvClearScope::kAuto
                  ? (std::string(": ") + kv_engine_guess_name(snap.engine)).c_str()
                  : "");
  item_tooltip(
      "Live blocks per rank, medium and KV cache group. \"(remote)\": blocks vLLM reports as "
      "held elsewhere (locality REMOTE). Groups are a hybrid model's caches (full attention, "
      "sliding window, Mamba), each with its own blocks. Clear scope: what AllBlocksCleared "
      "drops (vLLM: the GPU pool only; SGLang: every tier), guessed from the stream's fields");
  if (snap.media_groups.empty()) {
    ImGui::TextDisabled("nothing stored yet");
  } else if (ImGui::BeginTable("##media", 4, flags)) {
    for (const char* h : {"rank", "medium", "group", "live"}) ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& [key, n] : snap.media_groups) {
      const auto& [rank, medium, group] = key;
      ImGui::TableNextColumn();
      ImGui::Text("%d", rank);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(medium.c_str());
      ImGui::TableNextColumn();
      const auto g = snap.groups.find(group);
      if (g != snap.groups.end() && !g->second.spec_kind.empty()) {
        ImGui::Text("%lld %s", static_cast<long long>(group), g->second.spec_kind.c_str());
        item_tooltip(("block size " + std::to_string(g->second.block_size) +
                      (g->second.sliding_window
                           ? ", sliding window " + std::to_string(*g->second.sliding_window)
                           : std::string()))
                         .c_str());
      } else {
        ImGui::Text("%lld", static_cast<long long>(group));
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_count(static_cast<double>(n)).c_str());
    }
    ImGui::EndTable();
  }
  ImGui::EndTable();
}

void AttachPanel::draw_lookup(AttachFeed& feed, const AttachSnapshot& snap, bool presenter) {
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 22.0f);
  bool go = ImGui::InputTextWithHint("##lookup_prompt", "prompt: token ids, @FILE or text",
                                     lookup_prompt_, sizeof lookup_prompt_,
                                     ImGuiInputTextFlags_EnterReturnsTrue);
  item_tooltip(
      "The prompt whose prefix to look for: token ids (\"1 2 3\" or [1, 2, 3]), @FILE (ids, "
      "the engine's /tokenize answer, or text), or text, tokenized with the tokenizer beside. "
      "Matching compares the token ids the stream carried, block by block along the chain");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 12.0f);
  go |= ImGui::InputTextWithHint("##lookup_tok", "tokenizer (for text)", lookup_tokenizer_,
                                 sizeof lookup_tokenizer_, ImGuiInputTextFlags_EnterReturnsTrue);
  item_tooltip("tokenizer.json or a GGUF file (the engine's model); or a model name: smollm2");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6.0f);
  go |= ImGui::InputTextWithHint("##lookup_lora", "LoRA", lookup_lora_, sizeof lookup_lora_,
                                 ImGuiInputTextFlags_EnterReturnsTrue);
  item_tooltip("The LoRA adapter the request runs with (empty: none)");
  ImGui::SameLine();
  go |= ImGui::SmallButton("Look up");
  if (snap.lookup) {
    ImGui::SameLine();
    if (ImGui::SmallButton("Clear")) {
      feed.set_lookup(std::nullopt);
      lookup_error_.clear();
    }
  }
  if (go) {
    lookup_error_.clear();
    try {
      PromptSource src;
      std::string prompt = lookup_prompt_;
      if (!prompt.empty() && prompt[0] == '@') {
        src.path = prompt.substr(1);
      } else {
        // "1 2 3" or "1, 2, 3": token ids, given to the reader as the JSON array they are.
        const bool ids =
            !prompt.empty() && prompt.find_first_not_of("0123456789 ,\t") == std::string::npos;
        src.text = prompt;
        if (ids) {
          src.text = "[";
          std::string number;
          for (char c : prompt + " ") {
            if (c >= '0' && c <= '9') {
              number += c;
            } else if (!number.empty()) {
              src.text += (src.text.size() > 1 ? "," : "") + number;
              number.clear();
            }
          }
          src.text += "]";
        }
      }
      const std::string tok = lookup_tokenizer_;
      if (!tok.empty() && tok.find('/') == std::string::npos && tok.find('.') == std::string::npos)
        src.model = tok;  // a model name
      else
        src.tokenizer = tok;
      KvLookupQuery q;
      q.tokens = read_prompt_tokens(src);
      q.lora = lookup_lora_[0] != '\0' ? std::string(lookup_lora_) : std::string("base");
      feed.set_lookup(std::move(q));
    } catch (const Error& e) {
      lookup_error_ = e.what();
    }
  }
  if (!lookup_error_.empty()) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(palette(presenter).warn), "%s",
                       lookup_error_.c_str());
    ImGui::PopTextWrapPos();
  }
  if (!snap.lookup) return;
  ImGui::TextDisabled("%zu prompt tokens, LoRA %s: the prefix tree outlines the matched blocks",
                      snap.lookup->tokens.size(), snap.lookup->lora.c_str());
  if (snap.lookup_rows.empty()) {
    ImGui::TextDisabled("nothing stored yet: no cache to match against");
    return;
  }
  const ImGuiTableFlags flags =
      ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV;
  if (!ImGui::BeginTable("##lookup_rows", 3, flags)) return;
  ImGui::TableSetupColumn("rank / medium");
  ImGui::TableSetupColumn("held");
  ImGui::TableSetupColumn("where the match stops, and why", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  for (const KvLookupRow& r : snap.lookup_rows) {
    ImGui::TableNextColumn();
    ImGui::Text("%d / %s%s", r.rank, r.medium.c_str(),
                r.group != 0 ? (" g" + std::to_string(r.group)).c_str() : "");
    ImGui::TableNextColumn();
    ImGui::Text("%lld / %lld", static_cast<long long>(r.matched_blocks),
                static_cast<long long>(r.prompt_blocks));
    ImGui::TableNextColumn();
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextUnformatted(kv_lookup_text(r, snap.last_ts).c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::EndTable();
}

void AttachPanel::draw(AppState& state) {
  const std::shared_ptr<AttachFeed> feed = state.source().attach_feed();
  if (!feed) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextUnformatted(
        "Not attached. File > Attach to a live engine... (Ctrl+Shift+A) follows the KV-cache "
        "event stream of a running vLLM or SGLang server: every block its prefix cache stores "
        "and removes, per data-parallel rank and medium, live, with the scrubber going back over "
        "the session.");
    ImGui::TextDisabled(
        "Start the engine with --kv-events-config (docs/attach.md); no engine at "
        "hand? python3 tests/attach/publish.py publishes a demo stream.");
    ImGui::PopTextWrapPos();
    return;
  }
  const std::shared_ptr<const AttachSnapshot> snap = feed->snapshot();
  const Palette& pal = palette(state.presenter);
  // Header: where, how long, and the detach button.
  ImGui::TextColored(
      ImGui::ColorConvertU32ToFloat4(snap->stopped ? pal.text_dim : pal.accent), "%s %s",
      snap->stopped ? "detached from" : (snap->bind ? "listening at" : "attached to"),
      snap->endpoint.c_str());
  ImGui::SameLine(0, 12);
  ImGui::TextDisabled("%.0f s", snap->seconds);
  if (!snap->stopped) {
    ImGui::SameLine(0, 12);
    if (ImGui::SmallButton("Detach")) state.detach_request = true;
    item_tooltip(
        "Stop following the stream; what was recorded stays (scrub it, or File > Save "
        "recording)");
  }
  draw_ranks(*snap);
  if (snap->totals.batches == 0) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn), "%s", snap->status_line.c_str());
    ImGui::PopTextWrapPos();
  }
  const KvModelCounters& c = snap->counters;
  stat("stored", format_count(static_cast<double>(c.blocks_stored)));
  stat("removed", format_count(static_cast<double>(c.blocks_removed)), true);
  stat("cleared", format_count(static_cast<double>(c.blocks_cleared)), true);
  stat("live",
       format_count(static_cast<double>(c.live)) + " (peak " +
           format_count(static_cast<double>(c.peak_live)) + ")",
       true);
  stat("churn",
       format_count(static_cast<double>(c.short_lived)) + " (" +
           format_percent(
               c.blocks_removed > 0 ? static_cast<double>(c.short_lived) / c.blocks_removed : 0.0) +
           " of removals)",
       true);
  item_tooltip("Blocks removed within 1 s of being stored, by the engine's timestamps");
  stat("block",
       snap->block_size > 0 ? std::to_string(snap->block_size) + " tokens" : "not known yet", true);
  if (c.unknown_removals > 0)
    stat("unknown removals", format_count(static_cast<double>(c.unknown_removals)), true);
  if (c.untracked_blocks > 0) {
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn),
                       "%s stores not shown: this view holds %d blocks (raise Slots in File > "
                       "Attach)",
                       format_count(static_cast<double>(c.untracked_blocks)).c_str(), snap->slots);
  }
  if (snap->recording_truncated) {
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.warn),
                       "History full after %s batches: the scrubber stops there, the counters and "
                       "plots go on",
                       format_count(static_cast<double>(snap->recorded_batches)).c_str());
  }
  if (!export_message_.empty()) ImGui::TextDisabled("%s", export_message_.c_str());
  if (ImGui::CollapsingHeader("Why did my prefix miss?"))
    draw_lookup(*feed, *snap, state.presenter);

  if (plotted_ != snap) {
    plotted_ = snap;
    live_ = live_series(*snap);
    rates_ = rate_series(*snap);
  }
  // The tables below the plots: a title, a header and their rows (the longer of the two).
  const std::size_t rows = std::max<std::size_t>({snap->loras.size(), snap->shared_prefixes.size(),
                                                  snap->media_groups.size(), std::size_t{1}});
  const float table_h =
      ImGui::GetTextLineHeightWithSpacing() * (static_cast<float>(rows) + 2.5f) + 8.0f;
  // Small windows scroll rather than squeeze the plots below their legends.
  const float h =
      std::max(ImGui::GetContentRegionAvail().y - table_h, ImGui::GetFontSize() * 16.0f);
  if (ImGui::BeginTable("##attach_plots", 2, ImGuiTableFlags_SizingStretchSame)) {
    const auto cell = [&](const char* id, const char* title, const char* y_label,
                          std::vector<PlotSeries>& series) {
      ImGui::TableNextColumn();
      PlotConfig cfg;
      cfg.id = id;
      cfg.title = title;
      cfg.x.label = "seconds since attach";
      cfg.y.label = y_label;
      cfg.size = ImVec2(-1.0f, h);
      cfg.cursor_x = seconds_at_step(*snap, state.step());
      cfg.line_scale = state.presenter ? 1.6f : 1.0f;
      const PlotResult r = plot(cfg, series);
      if (r.clicked || (r.hovered && ImGui::IsMouseDragging(ImGuiMouseButton_Left)))
        state.set_step(step_at_seconds(*snap, r.mouse_x));
      if (!r.exported.empty()) export_message_ = r.exported;
    };
    cell("attach_live", "Cached blocks", "blocks", live_);
    cell("attach_rates", "Block traffic", "blocks per second", rates_);
    ImGui::EndTable();
  }
  draw_tables(*snap);
}

}  // namespace kvscope::ui
