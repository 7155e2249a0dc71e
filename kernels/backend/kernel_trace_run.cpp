// See kernel_trace_run.h.
#include "kernels/backend/kernel_trace_run.h"

#include <algorithm>
#include <set>

#include "engine/common/error.h"

namespace kvscope {
namespace {

// The attention kernels whose launches carry a layer's queries, and the reductions after them.
bool is_attention(const std::string& k) {
  return k == "paged_attention_kernel" || k == "paged_attention_batch_kernel" ||
         k == "paged_attention_split_kernel" || k == "decode_split_kernel" ||
         k == "decode_split_batch_kernel";
}
bool is_reduce(const std::string& k) {
  return k == "paged_attention_reduce_kernel" || k == "decode_reduce_kernel";
}
bool is_write(const std::string& k) {
  return k == "kv_write_kernel" || k == "kv_write_groups_kernel";
}

using Tables = std::vector<StepKernelTrace::Table>;

Tables running_tables(const Simulator& sim) {
  Tables out;
  for (int r = 0; r < sim.num_requests(); ++r) {
    if (!sim.cache().has_sequence(SeqId(r))) continue;
    const BlockTable& t = sim.cache().table(SeqId(r));
    StepKernelTrace::Table row;
    row.request = r;
    row.num_tokens = t.num_tokens;
    for (BlockId b : t.blocks) row.blocks.push_back(static_cast<int>(b.value));
    out.push_back(std::move(row));
  }
  return out;
}

// Whether one table is a prefix of the other (a table grows by whole blocks during a step).
bool prefix_related(const std::vector<int>& a, const std::vector<int>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  return n > 0 && std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin());
}

// The request whose table (as the kernels saw it, else before the step) the query's table
// belongs to: a query reads the first entries of its request's table (a prefill chunk's queries
// fewer than its last one). The longest agreement wins, then an exact length, then the lowest
// request (identical tables: parallel samples just forked, which read the same blocks); -1 when
// none agrees.
int match_request(const std::vector<int>& table, const Tables& during, const Tables& before) {
  for (const Tables* ts : {&during, &before}) {
    int best = -1;
    std::size_t best_len = 0;
    for (const auto& t : *ts) {
      if (!prefix_related(table, t.blocks)) continue;
      const std::size_t len = std::min(table.size(), t.blocks.size());
      if (len > best_len || (len == best_len && t.blocks.size() == table.size())) {
        best = t.request;
        best_len = len;
      }
    }
    if (best >= 0) return best;
  }
  return -1;
}

nlohmann::json traffic_json(const sim::Traffic& t) {
  return {{"bytes_read", t.distinct_bytes},
          {"bytes_requested", t.bytes},
          {"bytes_moved", t.bytes_moved()},
          {"warp_loads", t.loads},
          {"transactions", t.sectors},
          {"ideal_transactions", t.ideal_sectors},
          {"lines", t.lines},
          {"ideal_lines", t.ideal_lines}};
}

// A write kernel's traffic: its recorded accesses are stores.
nlohmann::json stores_json(const sim::Traffic& t) {
  nlohmann::json j = traffic_json(t);
  j.erase("bytes_read");
  j["bytes_written"] = t.distinct_bytes;
  j["warp_stores"] = t.loads;
  j.erase("warp_loads");
  return j;
}

nlohmann::json dim_json(const sim::dim3& d) {
  return {d.x, d.y, d.z};
}

}  // namespace

StepKernelTrace trace_next_step(Simulator& sim, int layer, const std::string& where) {
  const KvLayout& L = sim.cache().layout();
  if (L.is_latent())
    throw Error(where, "MLA's latent attention kernels are not traced (paged attention only)");
  if (layer < 0 || layer >= L.n_layers)
    fail_expected("--layer", "a layer in 0.." + std::to_string(L.n_layers - 1),
                  std::to_string(layer));
  StepKernelTrace out;
  out.layer = layer;
  out.layers = L.n_layers;
  out.k_format = L.k_format.name();
  out.v_format = L.v_format.name();
  out.block_size = L.block_size;
  out.kv_heads = L.kv_heads;
  out.head_dim = L.head_dim;
  const Tables before = running_tables(sim);

  sim::TraceRecorder r;
  int attention_seen = 0, last_attention = -1;
  // The tables as the step's kernels see them: taken at its first attention launch, after the
  // step allocated its slots and before the prefix cache swaps full blocks for cached twins.
  Tables during;
  r.select = [&](const std::string& kernel, int index) {
    if (is_attention(kernel)) {
      if (attention_seen == 0) during = running_tables(sim);
      const bool mine = attention_seen++ == layer;
      if (mine) last_attention = index;
      return mine;
    }
    if (is_write(kernel)) return attention_seen == layer;  // the layer's, before its attention
    return is_reduce(kernel) && last_attention >= 0 && index == last_attention + 1;
  };
  bool stepped = false;
  {
    sim::ScopedRecorder on(r);
    stepped = sim.step();
  }
  if (!stepped) throw Error(where, "the run has finished: there is no step to trace");
  out.step = sim.current_step() - 1;  // the recording's index of the step just run
  out.attention_launches = attention_seen;
  if (attention_seen == 0) {
    throw Error(where, "step " + std::to_string(out.step) +
                           " ran no attention kernel on the emulated device (trace kernel needs "
                           "--backend cuda-sim; a step with no query runs none)");
  }
  if (attention_seen != L.n_layers) {
    throw Error(where, "step " + std::to_string(out.step) + " made " +
                           std::to_string(attention_seen) + " attention launches for " +
                           std::to_string(L.n_layers) +
                           " layers: contexts past 4,096 slots launch once per query, which is "
                           "not traced yet");
  }
  if (r.overflowed) {
    throw Error(where, "step " + std::to_string(out.step) + "'s attention launch loads more than " +
                           std::to_string(r.max_accesses) +
                           " values, too many to trace: trace a decode step, or a shorter prompt");
  }
  std::vector<sim::TraceLaunch> writes;
  for (sim::TraceLaunch& l : r.launches) {
    if (!l.recorded) continue;
    if (is_attention(l.kernel)) {
      out.launch = std::move(l);
    } else if (is_write(l.kernel)) {
      writes.push_back(std::move(l));
    } else {
      out.reduce.push_back(l.grid);
      out.reduce_kernels.push_back(l.kernel);
    }
  }
  if (out.launch.roles.empty()) {
    throw Error(where, "step " + std::to_string(out.step) +
                           "'s attention launch recorded nothing: the emulator's thread mode "
                           "(KVSCOPE_SIM_MODE=threads) records no loads; unset it");
  }
  out.summary = sim::summarize_launch(out.launch);
  for (const sim::ThreadBlockTrace& tb : out.summary.blocks)
    if (tb.role) out.n_heads = std::max(out.n_heads, tb.role->head_first + tb.role->heads);

  const Tables after = running_tables(sim);
  int queries = 0;
  for (const sim::TraceRole& role : out.launch.roles) queries = std::max(queries, role.query + 1);
  out.query_request.assign(static_cast<std::size_t>(queries), -1);
  for (const sim::TraceRole& role : out.launch.roles)
    out.query_request[static_cast<std::size_t>(role.query)] =
        match_request(role.table, during, before);
  for (const sim::TraceLaunch& l : writes) {
    const sim::KernelTrace k = sim::summarize_launch(l);
    StepKernelTrace::KvWrite w;
    w.kernel = l.kernel;
    w.grid = l.grid;
    w.block = l.block;
    bool k_row = false, v_row = false;
    for (const sim::ThreadBlockTrace& tb : k.blocks) {
      w.stores += tb.kv;
      w.table += tb.table;
      if (!tb.role) continue;
      (tb.role->row == 1 ? v_row : k_row) = true;
      w.slot = tb.role->slot_begin;
      if (!tb.kv_blocks.empty()) w.kv_block = tb.kv_blocks.front();
      if (w.request < 0) w.request = match_request(tb.role->table, during, before);
      if (!tb.stray_blocks.empty()) {
        throw InternalError("trace kernel", l.kernel + " stored into block " +
                                                std::to_string(tb.stray_blocks.front()) +
                                                ", not the one its table gives slot " +
                                                std::to_string(w.slot));
      }
    }
    w.rows = k_row && v_row ? "K and V" : v_row ? "V" : "K";
    out.write_total += w.stores;
    out.writes.push_back(std::move(w));
  }
  std::set<int> listed;
  for (const auto& t : during) {
    out.block_tables.push_back(t);
    listed.insert(t.request);
  }
  for (const Tables* ts : {&after, &before})
    for (const auto& t : *ts)
      if (listed.insert(t.request).second) out.block_tables.push_back(t);
  std::sort(out.block_tables.begin(), out.block_tables.end(),
            [](const auto& a, const auto& b) { return a.request < b.request; });
  return out;
}

LaunchShape launch_shape(const StepKernelTrace& t) {
  LaunchShape s{t.k_format, t.v_format, t.block_size, t.n_heads, t.kv_heads, t.head_dim, {}};
  s.contexts.assign(t.query_request.size(), 0);
  for (const sim::TraceRole& r : t.launch.roles)
    if (r.query >= 0 && static_cast<std::size_t>(r.query) < s.contexts.size())
      s.contexts[static_cast<std::size_t>(r.query)] = r.num_slots;
  return s;
}

nlohmann::json kernel_trace_json(const StepKernelTrace& t, std::size_t warp_sample) {
  const sim::KernelTrace& k = t.summary;
  nlohmann::json blocks = nlohmann::json::array();
  for (const sim::ThreadBlockTrace& tb : k.blocks) {
    nlohmann::json b;
    b["block"] = tb.block;
    b["block_idx"] = {tb.block % k.grid.x, (tb.block / k.grid.x) % k.grid.y};
    if (tb.role) {
      const sim::TraceRole& r = *tb.role;
      b["query"] = r.query;
      const int req = t.query_request[static_cast<std::size_t>(r.query)];
      b["seq"] = req >= 0 ? nlohmann::json(req) : nlohmann::json(nullptr);
      b["kv_head"] = r.kv_head;
      b["split"] = r.split;
      b["query_heads"] = {r.head_first, r.head_first + r.heads};
      b["slots"] = {r.slot_begin, r.slot_end};
    }
    b["kv_blocks"] = tb.kv_blocks;
    if (!tb.stray_blocks.empty()) b["stray_blocks"] = tb.stray_blocks;
    b["bytes_read"] = tb.kv.distinct_bytes;
    b["bytes_requested"] = tb.kv.bytes;
    b["bytes_moved"] = tb.kv.bytes_moved();
    b["transactions"] = tb.kv.sectors;
    b["ideal_transactions"] = tb.kv.ideal_sectors;
    b["warp_loads"] = tb.kv.loads;
    b["table_bytes"] = tb.table.distinct_bytes;
    b["table_transactions"] = tb.table.sectors;
    blocks.push_back(std::move(b));
  }
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& tb : t.block_tables)
    tables.push_back({{"seq", tb.request}, {"num_tokens", tb.num_tokens}, {"blocks", tb.blocks}});
  nlohmann::json by_what = nlohmann::json::object();
  for (unsigned w = 0; w < sim::kTraceWhatCount; ++w)
    if (k.by_what[w].loads > 0) by_what[sim::trace_what_name(w)] = traffic_json(k.by_what[w]);
  nlohmann::json totals = traffic_json(k.kv);
  totals["distinct_kv_bytes"] = k.kv_unique_bytes;
  totals["table"] = traffic_json(k.table);
  totals["thread_blocks"] = k.blocks.size();
  nlohmann::json sample = nlohmann::json::array();
  for (const sim::WarpLoad& w : sim::warp_loads(t.launch, 0, warp_sample)) {
    nlohmann::json lanes = nlohmann::json::array();
    const std::uintptr_t lo = *std::min_element(w.addrs.begin(), w.addrs.end());
    for (std::size_t i = 0; i < w.addrs.size(); ++i)
      lanes.push_back({w.lane_ids[i], static_cast<long>(w.addrs[i] - lo)});
    sample.push_back({{"warp", w.warp},
                      {"what", sim::trace_what_name(w.what)},
                      {"bytes_per_lane", w.bytes_per_lane},
                      {"first_address_mod_128", static_cast<unsigned>(lo % 128)},
                      {"lanes", lanes},
                      {"traffic", traffic_json(w.traffic)}});
  }
  nlohmann::json reduce = nlohmann::json::array();
  for (std::size_t i = 0; i < t.reduce.size(); ++i)
    reduce.push_back({{"kernel", t.reduce_kernels[i]}, {"grid", dim_json(t.reduce[i])}});
  nlohmann::json writes = nlohmann::json::array();
  for (const StepKernelTrace::KvWrite& w : t.writes) {
    writes.push_back({{"kernel", w.kernel},
                      {"grid", dim_json(w.grid)},
                      {"block", dim_json(w.block)},
                      {"seq", w.request >= 0 ? nlohmann::json(w.request) : nlohmann::json(nullptr)},
                      {"slot", w.slot},
                      {"kv_block", w.kv_block},
                      {"offset", t.block_size > 0 ? w.slot % t.block_size : 0},
                      {"rows", w.rows},
                      {"stores", stores_json(w.stores)},
                      {"table", traffic_json(w.table)}});
  }
  nlohmann::json write_total = stores_json(t.write_total);
  write_total["launches"] = t.writes.size();
  totals["kv_write"] = write_total;
  return {{"step", t.step},
          {"layer", t.layer},
          {"layers", t.layers},
          {"kernel", k.kernel},
          {"grid", dim_json(k.grid)},
          {"block", dim_json(k.block)},
          {"kv_format", {{"k", t.k_format}, {"v", t.v_format}}},
          {"block_size", t.block_size},
          {"n_heads", t.n_heads},
          {"kv_heads", t.kv_heads},
          {"head_dim", t.head_dim},
          {"queries", t.query_request},
          {"thread_blocks", blocks},
          {"block_tables", tables},
          {"totals", totals},
          {"by_what", by_what},
          {"reduce", reduce},
          {"kv_writes", writes},
          {"warp_sample", sample},
          {"transaction_bytes", 32},
          {"line_bytes", 128}};
}

}  // namespace kvscope
