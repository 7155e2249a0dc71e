// The attach status line and summary JSON, from KvAttachStatus and the KvEventModel.
#include "present/attach_report.h"

#include <cstdio>
#include <utility>

namespace kvscope {

namespace {

// Before the first batch: what the connection state says about why nothing came.
const char* waiting_hint(KvConnection c) {
  switch (c) {
    case KvConnection::kConnected:
      return " connected (engine idle?)";
    case KvConnection::kDisconnected:
      return " not connected (no publisher listening?)";
    case KvConnection::kListening:
      return " listening (no engine connected yet)";
    case KvConnection::kHandshaking:
      return " connected, waiting for the ZeroMQ handshake";
    case KvConnection::kNotZeroMq:
      return " not ZeroMQ (something answers at that port, but not a ZeroMQ publisher: "
             "the engine's --kv-events-config endpoint?)";
    case KvConnection::kUnknown:
      break;
  }
  return " waiting";
}

// "no batch yet: rank 0 tcp://... not connected (no publisher listening?), replay asked; ...".
std::string waiting_line(const KvAttachStatus& status) {
  const KvRankStats& t = status.totals;
  std::string s = "no batch yet:";
  for (const KvRankStats& r : status.ranks) {
    s.append(" rank ").append(std::to_string(r.rank)).append(" ").append(r.endpoint);
    s.append(waiting_hint(r.connection));
    if (r.replaying) s.append(", replay asked");
  }
  if (t.other_topics > 0) {
    s.append("; ").append(std::to_string(t.other_topics)).append(" batches on topic \"");
    s.append(t.last_other_topic).append("\", not the subscribed topic \"").append(status.topic);
    s.append("\"");
  }
  return s;
}

std::int64_t live_on_rank(const KvEventModel& model, int rank) {
  const auto it = model.by_rank().find(rank);
  return it == model.by_rank().end() ? 0 : it->second.live;
}

// "batches 3  stored 2  live 1 [r0 1 r1 0]  gaps 0  replayed 0  decode errors 0  restarts 0 ...".
std::string flowing_line(const KvAttachStatus& status, const KvEventModel& model) {
  const KvRankStats& t = status.totals;
  const KvModelCounters& m = model.totals();
  std::string s;
  s.append("batches ").append(std::to_string(t.batches));
  s.append("  stored ").append(std::to_string(m.blocks_stored));
  s.append("  live ").append(std::to_string(m.live));
  if (status.ranks.size() > 1) {
    s.append(" [");
    for (const KvRankStats& r : status.ranks) {
      if (r.rank > 0) s.append(" ");
      s.append("r").append(std::to_string(r.rank)).append(" ");
      s.append(std::to_string(live_on_rank(model, r.rank)));
    }
    s.append("]");
  }
  s.append("  gaps ").append(std::to_string(t.gaps));
  s.append("  replayed ").append(std::to_string(t.replayed));
  if (t.lost > 0) s.append("  lost ").append(kv_lost_text(t));
  s.append("  decode errors ").append(std::to_string(t.decode_errors));
  s.append("  restarts ").append(std::to_string(t.restarts));
  char lag[48];
  std::snprintf(lag, sizeof lag, "  lag %.2f s", t.lag_s);
  s.append(lag);
  if (t.replaying) s.append("  (replaying)");
  return s;
}

nlohmann::json optional_json(const std::optional<std::int64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

// {"BlockStored": n, "BlockRemoved": n, "AllBlocksCleared": n}.
nlohmann::json events_json(const KvModelCounters& c) {
  nlohmann::json e = nlohmann::json::object();
  for (std::size_t k = 0; k < kNumKvEventKinds; ++k)
    e[std::string(kv_event_kind_name(static_cast<KvEventKind>(k)))] = c.events[k];
  return e;
}

// One entry of the summary's "ranks".
nlohmann::json rank_json(const KvRankStats& r, const KvEventModel& model) {
  const auto it = model.by_rank().find(r.rank);
  const KvModelCounters c = it == model.by_rank().end() ? KvModelCounters{} : it->second;
  return {{"rank", r.rank},
          {"endpoint", r.endpoint},
          {"replay_endpoint", r.replay_endpoint},
          {"connection", kv_connection_name(r.connection)},
          {"peers", r.peers},
          {"batches", r.batches},
          {"last_seq", r.last_seq ? nlohmann::json(*r.last_seq) : nlohmann::json()},
          {"events", events_json(c)},
          {"blocks_stored", c.blocks_stored},
          {"blocks_removed", c.blocks_removed},
          {"live_blocks", c.live},
          {"peak_live_blocks", c.peak_live},
          {"live_blocks_by_medium", model.live_by_medium(r.rank)},
          {"gaps", r.gaps},
          {"replayed", r.replayed},
          {"lost", r.lost},
          {"lost_by_cause", kv_lost_json(r)},
          {"state_exact", r.lost == 0 && r.decode_errors == 0},
          {"replay_frames", r.replay_frames},
          {"decode_errors", r.decode_errors},
          {"restarts", r.restarts},
          {"lag_seconds", r.lag_s}};
}

// {"<group>": {"kind", "sliding_window", "block_size", "live", "stored"}}.
nlohmann::json groups_json(const KvEventModel& model) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [g, info] : model.groups()) {
    groups[std::to_string(g)] = {{"kind", info.spec_kind},
                                 {"sliding_window", optional_json(info.sliding_window)},
                                 {"block_size", info.block_size},
                                 {"live", info.live},
                                 {"stored", info.stored}};
  }
  return groups;
}

// What was asked for: the endpoints, the topic, the ranks, bind mode; and the journal.
nlohmann::json config_json(const KvAttachStatus& status) {
  nlohmann::json journal;  // null without one
  if (status.journal) {
    journal = {{"path", status.journal->path},
               {"bytes", status.journal->bytes},
               {"truncated", status.journal->truncated}};
  }
  return {{"endpoint", status.endpoint}, {"replay_endpoint", status.replay_endpoint},
          {"topic", status.topic},       {"dp", status.dp_ranks},
          {"bind", status.bind},         {"journal", journal}};
}

// The blocks as the model holds them: events, stores, removals, live blocks by rank, medium,
// group and ownership, the clear scope, what was skipped, the recording.
nlohmann::json blocks_json(const KvAttachStatus& status, const KvEventModel& model) {
  const KvModelCounters& m = model.totals();
  nlohmann::json by_rank = nlohmann::json::object();
  for (const KvRankStats& r : status.ranks)
    by_rank[std::to_string(r.rank)] = live_on_rank(model, r.rank);
  return {{"events", events_json(m)},
          {"blocks_stored", m.blocks_stored},
          {"blocks_removed", m.blocks_removed},
          {"blocks_cleared", m.blocks_cleared},
          {"live_blocks", m.live},
          {"live_blocks_by_rank", by_rank},
          {"live_blocks_by_medium", model.live_by_medium()},
          {"live_blocks_by_group", groups_json(model)},
          {"live_blocks_by_ownership", model.live_by_ownership()},
          {"placeholder_blocks", m.placeholders},
          {"clear_scope",
           {{"setting", kv_clear_scope_name(model.clear_scope())},
            {"engine", kv_engine_guess_name(model.engine_guess())},
            {"clears_gpu_only", m.clears_gpu_only},
            {"clears_all", m.clears_all}}},
          {"peak_live_blocks", m.peak_live},
          {"unknown_parents", m.unknown_parents},
          {"unknown_removals", m.unknown_removals},
          {"restored", m.restored},
          {"short_lived", m.short_lived},
          {"skipped_events", m.skipped_events},
          {"skipped_fields", m.skipped_fields},
          {"untracked_blocks", m.untracked_blocks},
          {"recording",
           {{"batches", model.recorded_batches()},
            {"events", model.recorded_events()},
            {"truncated", model.recording_truncated()}}}};
}

// The stream's counters over all ranks: batches, gaps, replays, losses, what was skipped.
nlohmann::json stream_json(const KvRankStats& t) {
  return {{"batches", t.batches},
          {"gaps", t.gaps},
          {"replayed", t.replayed},
          {"lost", t.lost},
          {"lost_by_cause", kv_lost_json(t)},
          {"state_exact", t.lost == 0 && t.decode_errors == 0},
          {"replay_frames", t.replay_frames},
          {"decode_errors", t.decode_errors},
          {"restarts", t.restarts},
          {"bad_frames", t.bad_frames},
          {"other_topics", t.other_topics},
          {"duplicates", t.duplicates},
          {"replay_requests", t.replay_requests},
          {"replay_timeouts", t.replay_timeouts},
          {"rank_mismatches", t.rank_mismatches},
          {"last_decode_error", t.last_decode_error}};
}

}  // namespace

const char* kv_connection_name(KvConnection c) {
  switch (c) {
    case KvConnection::kConnected:
      return "connected";
    case KvConnection::kDisconnected:
      return "not connected";
    case KvConnection::kListening:
      return "listening";
    case KvConnection::kHandshaking:
      return "handshaking";
    case KvConnection::kNotZeroMq:
      return "not ZeroMQ";
    case KvConnection::kUnknown:
      break;
  }
  return "unknown";
}

std::string kv_lost_causes(std::int64_t before_attach, std::int64_t replay_expired,
                           std::int64_t mid_stream) {
  std::string causes;
  const auto add = [&](std::int64_t n, const char* what) {
    if (n == 0) return;
    causes.append(causes.empty() ? "" : ", ").append(std::to_string(n)).append(" ").append(what);
  };
  add(before_attach, "before attach, never replayed");
  add(replay_expired, "gone from the replay buffer");
  add(mid_stream, "mid-stream gap");
  return causes;
}

std::string kv_lost_text(const KvRankStats& s) {
  std::string out = std::to_string(s.lost);
  const std::string causes =
      kv_lost_causes(s.lost_before_attach, s.lost_replay_expired, s.lost_mid_stream);
  if (!causes.empty()) out.append(" (").append(causes).append(")");
  return out;
}

nlohmann::json kv_lost_json(const KvRankStats& s) {
  return {{"before_attach", s.lost_before_attach},
          {"replay_expired", s.lost_replay_expired},
          {"mid_stream", s.lost_mid_stream}};
}

nlohmann::json kv_lookup_json(const std::vector<KvLookupRow>& rows, double last_ts) {
  nlohmann::json out = nlohmann::json::array();
  for (const KvLookupRow& r : rows) {
    nlohmann::json row = {{"rank", r.rank},
                          {"medium", r.medium},
                          {"group", r.group},
                          {"block_size", r.block_size},
                          {"prompt_tokens", r.prompt_tokens},
                          {"prompt_blocks", r.prompt_blocks},
                          {"matched_blocks", r.matched_blocks},
                          {"matched_tokens", r.matched_tokens},
                          {"by_hash", r.by_hash},
                          {"reason", kv_miss_reason_name(r.reason)},
                          {"text", kv_lookup_text(r, last_ts)}};
    if (r.reason == KvMissReason::kRemoved) {
      row["removed_by"] = r.removed_by;
      row["removed_seq"] = r.removed_seq >= 0 ? nlohmann::json(r.removed_seq) : nlohmann::json();
      row["removed_ts"] = r.removed_ts;
    }
    if (r.reason == KvMissReason::kOtherNamespace) row["other_namespace"] = r.other_namespace;
    out.push_back(std::move(row));
  }
  return out;
}

std::string kv_attach_status_line(const KvAttachStatus& status, const KvEventModel& model) {
  return status.totals.batches == 0 ? waiting_line(status) : flowing_line(status, model);
}

nlohmann::json kv_attach_summary_json(const KvAttachStatus& status, const KvEventModel& model) {
  // Keys are unique across the three parts (nlohmann::json keeps an object's keys sorted, so
  // the order they are added in does not show).
  nlohmann::json s = config_json(status);
  s.update(blocks_json(status, model));
  s.update(stream_json(status.totals));
  nlohmann::json ranks = nlohmann::json::array();
  for (const KvRankStats& r : status.ranks) ranks.push_back(rank_json(r, model));
  s["ranks"] = std::move(ranks);
  return s;
}

}  // namespace kvscope
