// vLLM / SGLang KV-cache event import: strict JSON-lines parsing into kvscope Events.
#include "engine/trace/kv_events_import.h"

#include "engine/common/json_depth.h"
#include "engine/kv/event_payloads.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "engine/common/error.h"
#include "engine/common/text_lines.h"

namespace kvscope {
namespace {

using nlohmann::json;

std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) {
    s.resize(57);
    s.append("...");
  }
  return s;
}

// A block hash: an integer (any sign) or a non-empty string; returned in a canonical text form.
std::string hash_text(const json& v, const std::string& where) {
  if (v.is_number_integer()) return v.dump();
  if (v.is_string() && !v.get<std::string>().empty()) return "s:" + v.get<std::string>();
  fail_expected(where, "a block hash (integer or non-empty string)", shown(v));
}

const json& field(const json& obj, const char* name, const std::string& where) {
  if (!obj.contains(name)) throw Error(where + ": " + name, "missing");
  return obj.at(name);
}

struct Importer {
  KvEventImport out;
  EventSink* sink;
  std::unordered_map<std::string, std::int32_t> ids;  // hash -> dense id
  std::vector<std::int32_t> depth;                    // [ids]
  std::vector<char> cached;                           // [ids]
  std::int32_t step = 0;

  void emit(const Event& e) {
    if (sink)
      sink->emit(e);
    else
      out.events.push_back(e);
  }
  std::int32_t id_of(const std::string& h) {
    auto [it, fresh] = ids.emplace(h, static_cast<std::int32_t>(out.hashes.size()));
    if (fresh) {
      out.hashes.push_back(h.rfind("s:", 0) == 0 ? h.substr(2) : h);
      depth.push_back(0);
      cached.push_back(0);
    }
    return it->second;
  }
  void set_cached(std::int32_t id, bool on) {
    out.cached_at_end += on ? 1 : -1;
    cached[static_cast<std::size_t>(id)] = on;
    out.peak_cached = std::max(out.peak_cached, out.cached_at_end);
  }

  void stored(const json& ev, const std::string& where) {
    const json& hashes = field(ev, "block_hashes", where);
    if (!hashes.is_array() || hashes.empty())
      fail_expected(where + ": block_hashes", "a non-empty array", shown(hashes));
    const json& bs = field(ev, "block_size", where);
    if (!bs.is_number_integer() || bs.get<std::int64_t>() <= 0)
      fail_expected(where + ": block_size", "a positive integer", shown(bs));
    const json& tokens = field(ev, "token_ids", where);
    if (!tokens.is_array())
      fail_expected(where + ": token_ids", "an array of token ids", shown(tokens));
    const auto num_hashes = static_cast<std::int64_t>(hashes.size());
    if (bs.get<std::int64_t>() > INT64_MAX / num_hashes)  // the product below must not overflow
      fail_expected(where + ": block_size",
                    "at most " + std::to_string(INT64_MAX / num_hashes) + " for " +
                        std::to_string(num_hashes) + " block hashes",
                    shown(bs));
    const std::int64_t expected = num_hashes * bs.get<std::int64_t>();
    if (static_cast<std::int64_t>(tokens.size()) != expected) {
      fail_expected(where + ": token_ids",
                    std::to_string(expected) + " ids (block_hashes x block_size)",
                    std::to_string(tokens.size()) + " ids");
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (!tokens[i].is_number_integer())
        fail_expected(where + ": token_ids[" + std::to_string(i) + "]", "an integer",
                      shown(tokens[i]));
    }
    std::int32_t parent = -1;
    if (ev.contains("parent_block_hash") && !ev.at("parent_block_hash").is_null()) {
      const std::string ph = hash_text(ev.at("parent_block_hash"), where + ": parent_block_hash");
      auto it = ids.find(ph);
      if (it == ids.end())
        ++out.unknown_parents;
      else
        parent = it->second;
    }
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      const std::int32_t id =
          id_of(hash_text(hashes[i], where + ": block_hashes[" + std::to_string(i) + "]"));
      depth[static_cast<std::size_t>(id)] =
          parent < 0 ? 0 : depth[static_cast<std::size_t>(parent)] + 1;
      if (!cached[static_cast<std::size_t>(id)]) set_cached(id, true);
      ++out.blocks_stored;
      emit(to_event(ev::BlockAllocated{-1, id, depth[static_cast<std::size_t>(id)], parent,
                                       bs.get<std::int64_t>()},
                    step));
      parent = id;
    }
  }
  void removed(const json& ev, const std::string& where) {
    const json& hashes = field(ev, "block_hashes", where);
    if (!hashes.is_array()) fail_expected(where + ": block_hashes", "an array", shown(hashes));
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      const std::string h =
          hash_text(hashes[i], where + ": block_hashes[" + std::to_string(i) + "]");
      auto it = ids.find(h);
      if (it == ids.end() || !cached[static_cast<std::size_t>(it->second)]) {
        ++out.unknown_removals;
        continue;
      }
      set_cached(it->second, false);
      ++out.blocks_removed;
      emit(to_event(ev::CachedBlockEvicted{it->second, /*cached_by=*/-1}, step));
    }
  }
  void cleared() {
    ++out.clears;
    for (std::size_t id = 0; id < cached.size(); ++id) {
      if (!cached[id]) continue;
      set_cached(static_cast<std::int32_t>(id), false);
      emit(to_event(ev::CachedBlockEvicted{static_cast<std::int32_t>(id), /*cached_by=*/-1}, step));
    }
  }
  void event(const json& ev, const std::string& where) {
    if (!ev.is_object()) fail_expected(where, "an event object", shown(ev));
    const json& type = field(ev, "type", where);
    const std::string t = type.is_string() ? type.get<std::string>() : "";
    if (t == "BlockStored")
      stored(ev, where);
    else if (t == "BlockRemoved")
      removed(ev, where);
    else if (t == "AllBlocksCleared")
      cleared();
    else
      fail_expected(where + ": type", "BlockStored, BlockRemoved or AllBlocksCleared", shown(type));
  }
};

}  // namespace

KvEventImport parse_kv_events(std::string_view text, const std::string& source, EventSink* sink) {
  Importer im;
  im.sink = sink;
  for_each_nonblank_line(
      text,
      [&](std::int64_t line_no, std::string_view line) {
        const std::string where = source + ":" + std::to_string(line_no);
        std::size_t deep_at = 0;
        if (!json_nesting_within(line, kMaxJsonDepth, &deep_at)) {
          fail_expected(where, "JSON nested at most " + std::to_string(kMaxJsonDepth) + " deep",
                        "deeper nesting at byte " + std::to_string(deep_at));
        }
        const json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (obj.is_discarded())
          throw Error(where,
                      "expected a JSON object (one event or batch per line), got unparsable text");
        if (obj.is_object() && obj.contains("events")) {  // a batch: {"ts": ..., "events": [...]}
          const json& evs = obj.at("events");
          if (!evs.is_array()) fail_expected(where + ": events", "an array of events", shown(evs));
          for (std::size_t i = 0; i < evs.size(); ++i)
            im.event(evs[i], where + ": events[" + std::to_string(i) + "]");
        } else {
          im.event(obj, where);
        }
        ++im.out.lines;
        ++im.step;
      },
      " \t\r");
  return std::move(im.out);
}

KvEventImport load_kv_events(const std::string& path, EventSink* sink) {
  return parse_kv_events(read_text_file(path, "cannot open the KV event log"), path, sink);
}

}  // namespace kvscope
