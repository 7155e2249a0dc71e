// The disaggregated run's two instances on one modelled clock: whichever instance's next step
// starts first runs it; arrivals, releases of the prefill instance's held blocks and deliveries
// to the decode instance are taken in time order between steps.
#include "engine/sched/disagg.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/common/error.h"
#include "engine/evict/policy.h"

namespace kvscope {
namespace {

void insert_by_time(std::vector<DisaggRun::Pending>& list, DisaggRun::Pending p) {
  const auto at =
      std::upper_bound(list.begin(), list.end(), p.time,
                       [](double t, const DisaggRun::Pending& q) { return t < q.time; });
  list.insert(at, p);
}

int blocks_for(int tokens, int block_size) {
  return (tokens + block_size - 1) / block_size;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(std::max<std::size_t>(rank, 1), v.size()) - 1];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

}  // namespace

PoolsAt pools_at(const DisaggReport& r, double t) {
  PoolsAt p;
  p.blocks_used.assign(r.instances.size(), 0);
  p.blocks_held.assign(r.instances.size(), 0);
  for (const StepRecord& s : r.steps) {
    if (s.end > t) continue;
    const auto i = static_cast<std::size_t>(s.instance);
    p.blocks_used[i] = s.blocks_used;  // records of one instance come in time order
    p.blocks_held[i] = s.blocks_held;
  }
  for (const TransferEvent& e : r.transfers) {
    if (e.done || e.time > t) continue;
    const RequestTiming& q = r.requests[static_cast<std::size_t>(e.request)];
    if (q.transfer_end <= t) continue;
    ++p.transfers;
    p.blocks_in_flight += e.blocks;
    p.bytes_in_flight += e.bytes;
  }
  return p;
}

std::vector<BlockOwner> blocks_at(const DisaggReport& r, int instance, double t) {
  if (instance < 0 || static_cast<std::size_t>(instance) >= r.instances.size()) return {};
  std::vector<BlockOwner> out(
      static_cast<std::size_t>(r.instances[static_cast<std::size_t>(instance)].num_blocks));
  for (const BlockChange& c : r.block_changes) {
    if (c.instance != instance) continue;
    if (c.time > t) break;  // one instance's changes come in time order
    out[static_cast<std::size_t>(c.block)] = {c.request, c.use};
  }
  return out;
}

DisaggSummary summarize(const DisaggReport& r) {
  DisaggSummary s;
  std::vector<double> ttft, tpot, queue, prefill, transfer, first;
  for (const RequestTiming& t : r.requests) {
    if (t.generated == 0) continue;  // refused
    ++s.finished;
    ttft.push_back(t.ttft());
    queue.push_back(t.queue());
    prefill.push_back(t.prefill());
    transfer.push_back(t.transfer());
    first.push_back(t.first_decode());
    if (t.generated > 1) tpot.push_back(t.tpot());
  }
  s.ttft_mean = mean(ttft);
  s.ttft_p90 = percentile(ttft, 0.9);
  s.queue = mean(queue);
  s.prefill = mean(prefill);
  s.transfer = mean(transfer);
  s.first_decode = mean(first);
  s.tpot_mean = mean(tpot);
  s.tpot_p90 = percentile(tpot, 0.9);
  return s;
}

TransferMode parse_transfer_mode(const std::string& name, const std::string& where) {
  if (name == "layer") return TransferMode::kLayerWise;
  if (name == "request") return TransferMode::kWholeRequest;
  fail_expected(where, "\"layer\" (layer by layer as the prefill computes it) or \"request\"",
                name);
}

std::string transfer_mode_name(TransferMode mode) {
  return mode == TransferMode::kLayerWise ? "layer" : "request";
}

DisaggRun::DisaggRun(SimConfig base, DisaggOptions options, Serving serving, SimModel model,
                     std::vector<SimRequest> requests)
    : model_(std::move(model)) {
  report_.disaggregated = serving == Serving::kDisaggregated;
  report_.options = std::move(options);
  const DisaggOptions& o = report_.options;
  const std::string where = "cache.disaggregation";
  if (base.allocator != AllocatorKind::kPaged) {
    fail_expected("cache.allocator", "paged in a disaggregated or colocated timing run",
                  allocator_name(base.allocator));
  }
  if (base.evicts_tokens()) {
    fail_expected("cache.token_eviction",
                  "none in a disaggregated or colocated timing run (not supported)",
                  eviction_kind_name(base.token_eviction.policy.kind));
  }
  if (base.blend) {
    fail_expected("cache.blend", "none in a disaggregated or colocated timing run (not supported)",
                  "a blend section");
  }
  if (!base.layer_groups.empty()) {
    fail_expected("cache.layer_groups",
                  "none in a disaggregated or colocated timing run (hybrid layer groups are not "
                  "modelled there yet)",
                  std::to_string(base.layer_groups.size()) + " groups");
  }
  if (!(o.arrival_interval_seconds >= 0) || !std::isfinite(o.arrival_interval_seconds)) {
    fail_expected(where + ".arrival_interval_ms", "a finite time >= 0",
                  std::to_string(o.arrival_interval_seconds * 1e3));
  }
  if (!(o.latency_seconds >= 0) || !std::isfinite(o.latency_seconds))
    fail_expected(where + ".latency_us", "a finite time >= 0", std::to_string(o.latency_seconds));
  const int n = static_cast<int>(requests.size());
  for (int i = 0; i < n; ++i) {
    const SimRequest& r = requests[static_cast<std::size_t>(i)];
    if (r.n_samples != 1) {
      fail_expected("requests[" + std::to_string(i) + "].n",
                    "1 in a disaggregated or colocated timing run (parallel samples are not "
                    "supported)",
                    std::to_string(r.n_samples));
    }
    arrivals_.push_back({r.arrival_step * o.arrival_interval_seconds, i});
    RequestTiming t;
    t.id = i;
    t.prompt_tokens = static_cast<int>(r.prompt_tokens.size());
    t.arrival = arrivals_.back().time;
    report_.requests.push_back(t);
  }
  std::stable_sort(arrivals_.begin(), arrivals_.end(),
                   [](const Pending& a, const Pending& b) { return a.time < b.time; });
  blocks_sent_.assign(static_cast<std::size_t>(n), 0);
  last_send_end_.assign(static_cast<std::size_t>(n), -1.0);
  prefill_started_.assign(static_cast<std::size_t>(n), false);

  if (!report_.disaggregated) {
    if (o.decode_blocks > 0) base.num_blocks = o.decode_blocks;
    for (SimRequest& r : requests) r.external_arrival = true;
    InstanceStats s;
    s.name = "colocated";
    s.num_blocks = base.num_blocks;
    report_.instances.push_back(s);
    instances_.push_back({std::make_unique<Simulator>(base, model_, std::move(requests))});
    report_.block_bytes = static_cast<double>(prefill().cache().layout().block_bytes());
    return;
  }

  SimConfig p = base;
  SimConfig d = base;
  if (o.prefill_blocks > 0) p.num_blocks = o.prefill_blocks;
  if (o.decode_blocks > 0) d.num_blocks = o.decode_blocks;
  p.title = base.title + " (prefill instance)";
  d.title = base.title + " (decode instance)";
  d.prefix_caching = o.decode_prefix_caching.value_or(base.prefix_caching);
  report_.decode_prefix_caching = d.prefix_caching;
  d.tiers.clear();  // the KV tiers are the prefill instance's
  std::vector<SimRequest> pr = requests;
  std::vector<SimRequest> dr = std::move(requests);
  const std::string prefill_at =
      o.prefill_blocks > 0 ? where + ".prefill_blocks (or --prefill-blocks)" : "cache.num_blocks";
  const std::string decode_at =
      o.decode_blocks > 0 ? where + ".decode_blocks (or --decode-blocks)" : "cache.num_blocks";
  for (int i = 0; i < n; ++i) {
    SimRequest& a = pr[static_cast<std::size_t>(i)];
    SimRequest& b = dr[static_cast<std::size_t>(i)];
    const int prompt = static_cast<int>(a.prompt_tokens.size());
    const std::string at = "requests[" + std::to_string(i) + "]";
    // K/V slots as the Scheduler counts them: the last sampled token is never fed.
    const int total = prompt + b.max_new_tokens - 1;
    if (total > model_.config.seq_len) {
      // Longer than the model's context: the colocated run refuses it at arrival, and so do both
      // instances here (the prefill instance checks the whole request, not its one token).
      a.external_arrival = true;
      b.external_arrival = true;
      continue;
    }
    if (blocks_for(prompt, p.block_size) > p.num_blocks) {
      fail_expected(prefill_at,
                    "a prefill pool that holds " + at + "'s prompt (" + std::to_string(prompt) +
                        " tokens: " + std::to_string(blocks_for(prompt, p.block_size)) + " blocks)",
                    std::to_string(p.num_blocks));
    }
    if (blocks_for(total, d.block_size) > d.num_blocks) {
      fail_expected(decode_at,
                    "a decode pool that holds " + at + " whole (" + std::to_string(total) +
                        " tokens: " + std::to_string(blocks_for(total, d.block_size)) + " blocks)",
                    std::to_string(d.num_blocks));
    }
    a.max_new_tokens = 1;  // the prefill instance's token is dropped, as vLLM's proxy does
    a.external_arrival = true;
    a.hold_blocks = true;
    b.external_arrival = true;
    b.kv_in_tokens = prompt - 1;
  }
  InstanceStats ps;
  ps.name = "prefill";
  ps.num_blocks = p.num_blocks;
  InstanceStats ds;
  ds.name = "decode";
  ds.num_blocks = d.num_blocks;
  report_.instances = {ps, ds};
  instances_.push_back({std::make_unique<Simulator>(p, model_, std::move(pr))});
  instances_.push_back({std::make_unique<Simulator>(d, model_, std::move(dr))});
  const KvLayout& layout = prefill().cache().layout();
  if (layout.staging_bytes_per_sequence() > 0) {
    fail_expected("cache.kv_dtype",
                  "a KV format without per-sequence staging in a disaggregated run (KIVI's open "
                  "group is not sent)",
                  prefill().timeline()->header().kv_format);
  }
  report_.block_bytes = static_cast<double>(layout.block_bytes());
  instances_[1].sim->set_kv_source([this](const RequestRun& r, int from, int to, KvStorage& storage,
                                          std::span<const BlockId> blocks) {
    const auto it =
        std::find_if(wire_.begin(), wire_.end(), [&](const Transfer& t) { return t.id == r.id; });
    const std::size_t bytes = storage.layout().block_bytes();
    // The decode instance's cache may hold more of the prompt now than when the transfer began
    // (blocks that arrived for other requests meanwhile): those crossed, and are not needed.
    const int skip = from / storage.layout().block_size - (it == wire_.end() ? 0 : it->first_block);
    if (it == wire_.end() || skip < 0 ||
        it->bytes.size() != (static_cast<std::size_t>(skip) + blocks.size()) * bytes) {
      throw InternalError("disaggregation", "request " + std::to_string(r.id) + " takes " +
                                                std::to_string(to - from) +
                                                " tokens of K/V that did not cross the link");
    }
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      storage.write_block(blocks[b],
                          it->bytes.data() + (static_cast<std::size_t>(skip) + b) * bytes);
    }
    wire_.erase(it);
  });
}

DisaggRun::~DisaggRun() = default;

bool DisaggRun::done() const {
  for (const Instance& in : instances_)
    if (!in.sim->done()) return false;
  return arrivals_.empty() && releases_.empty() && deliveries_.empty();
}

void DisaggRun::run() {
  while (step()) {
  }
}

bool DisaggRun::step() {
  for (;;) {
    // The earliest step start among instances with work, and the earliest event.
    double best = std::numeric_limits<double>::infinity();
    std::size_t who = instances_.size();
    for (std::size_t i = 0; i < instances_.size(); ++i) {
      const Instance& in = instances_[i];
      if (in.sim->has_work() && !in.blocked && in.clock < best) {
        best = in.clock;
        who = i;
      }
    }
    double event = std::numeric_limits<double>::infinity();
    for (const auto* list : {&arrivals_, &releases_, &deliveries_})
      if (!list->empty()) event = std::min(event, list->front().time);
    if (who == instances_.size() && event == std::numeric_limits<double>::infinity()) {
      if (!done()) {
        throw InternalError("disaggregation",
                            "no instance can run and not every request has finished");
      }
      return false;
    }
    if (event <= best) {
      take_events(event);
      continue;
    }
    Instance& in = instances_[who];
    InstanceStats& stats = report_.instances[who];
    std::vector<int> before;
    for (int id = 0; id < in.sim->num_requests(); ++id)
      before.push_back(in.sim->request(id).generated);
    const double start = in.clock;
    in.sim->step();
    const StepPlan& plan = in.sim->last_plan();
    std::vector<StepRun> runs;
    for (const StepPlan::Entry& e : plan.entries) {
      const RequestRun& r = in.sim->request(e.id);
      runs.push_back({r.num_computed - e.tokens, e.tokens});
      if (who == 0 && !prefill_started_[static_cast<std::size_t>(e.id)]) {
        prefill_started_[static_cast<std::size_t>(e.id)] = true;
        RequestTiming& t = report_.requests[static_cast<std::size_t>(e.id)];
        t.prefill_start = start;
        if (is_disaggregated() && report_.decode_prefix_caching && t.prompt_tokens > 1) {
          // The decode instance maps what its cache holds of the prompt now; those blocks are
          // not sent.
          t.decode_cached_blocks = instances_[1].sim->reserve_prefix(e.id);
          blocks_sent_[static_cast<std::size_t>(e.id)] = t.decode_cached_blocks;
        }
      }
    }
    const double cost = price_step(model_.config, in.sim->cache().layout().bytes_per_token(),
                                   report_.options.gpu, runs)
                            .seconds;
    in.clock = start + cost;
    in.blocked = plan.entries.empty();
    if (!plan.entries.empty()) stats.steps += 1;  // not the waits for held blocks
    stats.busy_seconds += cost;
    stats.prefill_tokens += plan.prefill_tokens;
    stats.decode_tokens += plan.decode_tokens;
    stats.peak_blocks_used = std::max(stats.peak_blocks_used, in.sim->cache().pool().num_used());
    if (const PrefixCache* pc = in.sim->prefix_cache())
      stats.prefix_hit_tokens = pc->metrics().hit_tokens;
    StepRecord rec;
    rec.instance = static_cast<int>(who);
    rec.start = start;
    rec.end = in.clock;
    rec.prefill_tokens = plan.prefill_tokens;
    rec.decode_tokens = plan.decode_tokens;
    if (who == 0 && is_disaggregated()) {
      after_prefill_step(start, cost);
    } else {
      after_token_step(who, before);
    }
    record_pool(rec);
    return true;
  }
}

void DisaggRun::take_events(double time) {
  auto due = [&](std::vector<Pending>& list) {
    std::vector<std::int32_t> ids;
    while (!list.empty() && list.front().time <= time) {
      ids.push_back(list.front().id);
      list.erase(list.begin());
    }
    return ids;
  };
  Instance& first = instances_[0];
  for (const std::int32_t id : due(releases_)) {
    first.sim->release(id);
    first.blocked = false;
    first.clock = std::max(first.clock, time);
    // Recorded at the instance's clock (its last step's end when that is later): its scheduler
    // sees the freed blocks from its next step, and each instance's records stay in time order.
    StepRecord rec;
    rec.start = rec.end = first.clock;
    record_pool(rec);
  }
  for (const std::int32_t id : due(arrivals_)) {
    first.clock = std::max(first.clock, time);
    first.blocked = false;
    first.sim->deliver(id);
    // Refused by the prefill instance (longer than the model's context): the decode instance
    // refuses it too, at once, so both account for it.
    if (is_disaggregated() && first.sim->request(id).phase == RequestPhase::kRejected)
      insert_by_time(deliveries_, {time, id});
  }
  if (!is_disaggregated()) return;
  Instance& second = instances_[1];
  for (const std::int32_t id : due(deliveries_)) {
    second.clock = std::max(second.clock, time);
    second.blocked = false;
    second.sim->deliver(id);
  }
}

double DisaggRun::send(double ready, double bytes, double* begin) {
  *begin = std::max(ready, link_free_);
  link_free_ = *begin + bytes / report_.options.link.bytes_per_second;
  return link_free_;
}

void DisaggRun::after_prefill_step(double start, double cost) {
  const Simulator& p = prefill();
  const int bs = p.config().block_size;
  const int layers = std::max(1, p.cache().layout().n_layers);
  const double block_bytes = report_.block_bytes;
  const DisaggOptions& o = report_.options;
  const double prefill_end = start + cost;
  // What each request of the step sends: the blocks it completed (layer-wise), or all of them
  // once its prefill ended (whole request). Every prompt token but the last crosses.
  struct Send {
    std::int32_t id;
    int blocks;
  };
  std::vector<Send> sends;
  std::vector<std::int32_t> finished;
  for (const StepPlan::Entry& e : p.last_plan().entries) {
    const RequestRun& r = p.request(e.id);
    const RequestTiming& t = report_.requests[static_cast<std::size_t>(e.id)];
    const int sent_tokens = t.prompt_tokens - 1;
    const int needed = blocks_for(sent_tokens, bs);
    const bool done = r.phase == RequestPhase::kFinished;
    const int have = std::min(r.num_computed, sent_tokens);
    const int complete = done || have == sent_tokens ? needed : have / bs;
    int& sent = blocks_sent_[static_cast<std::size_t>(e.id)];
    if ((o.transfer == TransferMode::kLayerWise || done) && complete > sent) {
      sends.push_back({e.id, complete - sent});
      sent = complete;
    }
    if (done) finished.push_back(e.id);
  }
  auto queue = [&](const Send& s, double ready, double bytes) {
    double begin = 0;
    const double end = send(ready, bytes, &begin);
    RequestTiming& t = report_.requests[static_cast<std::size_t>(s.id)];
    double& last = last_send_end_[static_cast<std::size_t>(s.id)];
    if (last < 0) {  // its first byte leaves
      t.transfer_start = begin;
      const int sending = blocks_for(t.prompt_tokens - 1, bs) - t.decode_cached_blocks;
      report_.transfers.push_back(
          {begin, false, s.id, sending, static_cast<std::int64_t>(sending * block_bytes)});
    }
    last = std::max(last, end);
  };
  // Layer-wise, the link takes the step's layers in the order they are computed: layer l of
  // every request before layer l + 1 of any.
  if (o.transfer == TransferMode::kLayerWise) {
    for (int l = 0; l < layers; ++l) {
      for (const Send& s : sends)
        queue(s, start + cost * (l + 1) / layers, s.blocks * block_bytes / layers);
    }
  } else {
    for (const Send& s : sends) queue(s, prefill_end, s.blocks * block_bytes);
  }
  for (const std::int32_t id : finished) {
    RequestTiming& t = report_.requests[static_cast<std::size_t>(id)];
    const int cached = t.decode_cached_blocks;
    const int needed = blocks_for(t.prompt_tokens - 1, bs) - cached;  // what crosses
    double& last = last_send_end_[static_cast<std::size_t>(id)];
    if (last < 0) {  // a one-token prompt, or all cached there: the hand-over alone
      t.transfer_start = prefill_end;
      report_.transfers.push_back({prefill_end, false, id, 0, 0});
      last = prefill_end;
    }
    t.prefill_end = prefill_end;
    t.transfer_blocks = needed;
    t.transfer_bytes = static_cast<std::int64_t>(needed * block_bytes);
    // The last byte of the request, whichever step sent it, then the latency.
    t.transfer_end = std::max(last, prefill_end) + o.latency_seconds;
    report_.transfer_blocks += needed;
    report_.transfer_bytes += t.transfer_bytes;
    report_.decode_cached_blocks += cached;
    report_.transfers.push_back({t.transfer_end, true, id, needed, t.transfer_bytes});
    // The bytes cross now (the clock says when they land); the prefill instance keeps the blocks
    // until then.
    if (model_.weights != nullptr && needed > 0) {
      Transfer w;
      w.id = id;
      w.first_block = cached;
      const std::vector<BlockId>& table = p.cache().table(SeqId(id)).blocks;
      const auto bytes = static_cast<std::size_t>(block_bytes);
      w.bytes.resize(static_cast<std::size_t>(needed) * bytes);
      for (int b = 0; b < needed; ++b) {
        p.cache().storage()->read_block(table[static_cast<std::size_t>(cached + b)],
                                        w.bytes.data() + static_cast<std::size_t>(b) * bytes);
      }
      wire_.push_back(std::move(w));
    }
    insert_by_time(releases_, {t.transfer_end, id});
    insert_by_time(deliveries_, {t.transfer_end, id});
  }
  std::stable_sort(report_.transfers.begin(), report_.transfers.end(),
                   [](const TransferEvent& a, const TransferEvent& b) { return a.time < b.time; });
}

void DisaggRun::after_token_step(std::size_t i, const std::vector<int>& before) {
  const Instance& in = instances_[i];
  for (int id = 0; id < in.sim->num_requests(); ++id) {
    const RequestRun& r = in.sim->request(id);
    if (r.generated <= before[static_cast<std::size_t>(id)]) continue;
    RequestTiming& t = report_.requests[static_cast<std::size_t>(id)];
    if (before[static_cast<std::size_t>(id)] == 0) {
      t.first_token = in.clock;
      // K/V its admission found cached on the decode instance after all was never read.
      std::erase_if(wire_, [&](const Transfer& w) { return w.id == id; });
      if (!is_disaggregated()) {
        t.prefill_end = in.clock;
        t.transfer_start = in.clock;
        t.transfer_end = in.clock;
      }
    }
    t.last_token = in.clock;
    t.generated = r.generated;
    report_.makespan = std::max(report_.makespan, in.clock);
  }
}

void DisaggRun::record_pool(StepRecord rec) {
  const Simulator& sim = *instances_[static_cast<std::size_t>(rec.instance)].sim;
  rec.blocks_used = sim.cache().pool().num_used();
  const PrefixCache* pc = sim.prefix_cache();
  if (pc == nullptr && !report_.options.record_blocks) {  // no block is in two tables
    for (int id = 0; id < sim.num_requests(); ++id) {
      if (sim.request(id).held)
        rec.blocks_held += static_cast<int>(sim.cache().table(SeqId(id)).blocks.size());
    }
    report_.steps.push_back(rec);
    return;
  }
  // Each block's use: running before reserved before held (a block a running request shares with
  // a held one stays when the held one goes), its owner the lowest id of that use.
  const auto n = static_cast<std::size_t>(sim.cache().pool().num_blocks());
  std::vector<BlockOwner> now(n);
  if (pc != nullptr) {
    for (std::size_t b = 0; b < n; ++b)
      if (pc->is_cached(BlockId(static_cast<std::int32_t>(b)))) now[b].use = BlockUse::kCached;
  }
  auto rank = [](BlockUse u) {
    return u == BlockUse::kRunning    ? 3
           : u == BlockUse::kReserved ? 2
           : u == BlockUse::kHeld     ? 1
                                      : 0;
  };
  for (const SeqId seq : sim.cache().sequences()) {
    const RequestRun& r = sim.request(seq.value);
    const BlockUse use = r.held       ? BlockUse::kHeld
                         : r.reserved ? BlockUse::kReserved
                                      : BlockUse::kRunning;
    for (const BlockId b : sim.cache().table(seq).blocks) {
      BlockOwner& o = now[static_cast<std::size_t>(b.value)];
      if (o.request < 0 || rank(use) > rank(o.use) || (use == o.use && r.id < o.request))
        o = {r.id, use};
    }
  }
  for (const BlockOwner& o : now) rec.blocks_held += o.use == BlockUse::kHeld ? 1 : 0;
  report_.steps.push_back(rec);
  if (!report_.options.record_blocks) return;
  const auto i = static_cast<std::size_t>(rec.instance);
  if (last_blocks_.size() <= i) last_blocks_.resize(i + 1);
  std::vector<BlockOwner>& last = last_blocks_[i];
  last.resize(n);
  for (std::size_t b = 0; b < n; ++b) {
    if (now[b].request == last[b].request && now[b].use == last[b].use) continue;
    report_.block_changes.push_back(
        {rec.end, rec.instance, static_cast<std::int32_t>(b), now[b].request, now[b].use});
    last[b] = now[b];
  }
}

std::optional<DisaggComparison> run_both(const SimConfig& config, const DisaggOptions& options,
                                         const SimModel& model,
                                         const std::vector<SimRequest>& requests,
                                         const std::function<bool(Serving)>& on_step) {
  DisaggComparison out;
  for (const Serving serving : {Serving::kColocated, Serving::kDisaggregated}) {
    DisaggRun run(config, options, serving, model, requests);
    while (run.step())
      if (on_step && !on_step(serving)) return std::nullopt;
    (serving == Serving::kColocated ? out.colocated : out.disaggregated) = run.report();
  }
  return out;
}

void DisaggRun::check_invariants() const {
  for (const Instance& in : instances_) in.sim->check_invariants();
  if (!is_disaggregated()) return;
  const Simulator& p = prefill();
  for (int id = 0; id < p.num_requests(); ++id) {
    const bool pending = std::any_of(releases_.begin(), releases_.end(),
                                     [&](const Pending& q) { return q.id == id; });
    if (p.request(id).held != pending) {
      throw InternalError("disaggregation invariant",
                          "request " + std::to_string(id) +
                              (pending ? " has a release due but holds no blocks"
                                       : " holds prefill blocks with no transfer in flight"));
    }
  }
}

}  // namespace kvscope
