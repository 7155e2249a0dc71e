// Attach in words and JSON: the status line, the summary `kvscope attach --json` prints (and
// summary.json), lost batches by cause, lookup rows as JSON. Made from the engine's typed state
// (KvAttachStatus from KvEventClient::status(), and its KvEventModel); shared by
// cli/cmd_attach.cpp, cli/cmd_lookup.cpp and kvscope-ui's attach feed and panel. No sockets here:
// kvscope_present links the engine only, not ZeroMQ or msgpack.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/trace/kv_attach_status.h"
#include "engine/trace/kv_event_model.h"

namespace kvscope {

// "connected", "not connected", "listening", "handshaking", "not ZeroMQ", "unknown".
const char* kv_connection_name(KvConnection c);

// "10 before attach, never replayed, 2 mid-stream gap": the causes that lost any batch ("" if
// none did).
std::string kv_lost_causes(std::int64_t before_attach, std::int64_t replay_expired,
                           std::int64_t mid_stream);
// "12 (10 before attach, never replayed, 2 mid-stream gap)": the lost batches and their causes.
std::string kv_lost_text(const KvRankStats& s);
// {"before_attach": n, "replay_expired": n, "mid_stream": n}.
nlohmann::json kv_lost_json(const KvRankStats& s);
// A lookup's rows as JSON: [{"rank", "medium", "group", "block_size", "prompt_blocks",
// "matched_blocks", "matched_tokens", "prompt_tokens", "by_hash", "reason", "text", ...}].
nlohmann::json kv_lookup_json(const std::vector<KvLookupRow>& rows, double last_ts);

// One line for a terminal: batches, live blocks by rank, gaps, ... or, before the first batch,
// each rank's connection and why nothing came yet.
std::string kv_attach_status_line(const KvAttachStatus& status, const KvEventModel& model);
// The summary `kvscope attach --json` prints and writes to summary.json (keys in docs/attach.md).
nlohmann::json kv_attach_summary_json(const KvAttachStatus& status, const KvEventModel& model);

}  // namespace kvscope
