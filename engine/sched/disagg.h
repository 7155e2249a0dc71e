// Disaggregated prefill/decode (DistServe, Splitwise, Mooncake; vLLM's and SGLang's P/D
// connectors): a prefill instance and a decode instance, each a Simulator with its own pool,
// joined by a link. A request prefills on the first, which holds its blocks until they have
// crossed the link; the second receives the K/V of every prompt token but the last, computes that
// one (for its logits, as vLLM's NIXL connector does) and decodes. Both run on one modelled clock
// (engine/sched/step_cost.h): each step priced by the roofline of a named GPU, each transfer by
// the link's bandwidth, first in first out, plus its latency. Layer-wise transfer sends a block's
// layers as the step that completes it computes them; whole-request transfer sends the request's
// blocks after its prefill. The colocated baseline runs the same requests on one instance and one
// clock. Bytes really move: the decode instance's blocks are written from the prefill instance's
// (KvStorage::read_block / write_block), so its tokens are the colocated run's. With a prefix
// cache on the decode instance (as vLLM's decode side looks its own cache up before it pulls), a
// request's prompt blocks already cached there are mapped when its prefill starts and stay put
// (a reference each) until it is delivered; only the blocks after them cross.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sched/disagg_options.h"
#include "engine/sched/simulator.h"

namespace kvscope {

// One request's life on the clock (seconds from the run's start). Colocated runs have no
// transfer: prefill_end = transfer_end = first_token.
struct RequestTiming {
  std::int32_t id = 0;
  int prompt_tokens = 0;
  int generated = 0;
  double arrival = 0;
  double prefill_start = 0;  // the start of the first step that ran its prompt
  double prefill_end = 0;    // the end of the step that ran its last prompt token
  double transfer_start = 0;
  double transfer_end = 0;  // its K/V is on the decode instance
  double first_token = 0;   // the end of the step that sampled its first token
  double last_token = 0;
  int transfer_blocks = 0;  // sent over the link
  std::int64_t transfer_bytes = 0;
  int decode_cached_blocks = 0;  // found in the decode instance's prefix cache: not sent
  double queue() const { return prefill_start - arrival; }
  double prefill() const { return prefill_end - prefill_start; }
  double transfer() const { return transfer_end - prefill_end; }
  double first_decode() const { return first_token - transfer_end; }
  double ttft() const { return first_token - arrival; }
  // Mean time per output token after the first (0 with one token).
  double tpot() const { return generated > 1 ? (last_token - first_token) / (generated - 1) : 0; }
};

struct TransferEvent {
  double time = 0;
  bool done = false;  // false: its first byte leaves; true: its last byte (and the latency) is in
  std::int32_t request = 0;
  int blocks = 0;
  std::int64_t bytes = 0;
};

struct InstanceStats {
  std::string name;  // "prefill", "decode", "colocated"
  int num_blocks = 0;
  int steps = 0;            // that ran tokens
  double busy_seconds = 0;  // modelled time spent in steps
  int peak_blocks_used = 0;
  std::int64_t prefill_tokens = 0;  // prompt tokens computed (and recomputed)
  std::int64_t decode_tokens = 0;
  std::int64_t prefix_hit_tokens = 0;  // prompt tokens its prefix cache served (0 without one)
};

// One step of an instance on the clock, or (start == end, no tokens) the prefill instance freeing
// the blocks of a request whose K/V has crossed (at its transfer's end, or at the end of the
// prefill step under way then: its scheduler sees them from its next step).
struct StepRecord {
  int instance = 0;  // index into DisaggReport::instances
  double start = 0, end = 0;
  std::int64_t prefill_tokens = 0, decode_tokens = 0;
  int blocks_used = 0;  // after it
  int blocks_held = 0;  // of those, held for transfers (the prefill instance's finished prompts)
};

// What a pool block is doing, for a block map (DisaggOptions::record_blocks).
enum class BlockUse : std::uint8_t {
  kFree,
  kCached,    // only the prefix cache keeps it
  kRunning,   // a request's sequence holds it
  kHeld,      // the prefill instance holds it until the request's K/V has crossed
  kReserved,  // the decode instance's prefix cache mapped it for a request not delivered yet
};
// One block's use changed, at the end of a StepRecord (or at a release).
struct BlockChange {
  double time = 0;
  std::int32_t instance = 0;
  std::int32_t block = 0;
  std::int32_t request = -1;  // the lowest request id whose sequence holds it; -1 when none
  BlockUse use = BlockUse::kFree;
};
struct BlockOwner {
  std::int32_t request = -1;
  BlockUse use = BlockUse::kFree;
};

struct DisaggReport {
  bool disaggregated = true;
  DisaggOptions options;
  std::vector<InstanceStats> instances;    // prefill, decode; or colocated
  std::vector<RequestTiming> requests;     // by id
  std::vector<TransferEvent> transfers;    // in time order
  std::vector<StepRecord> steps;           // in the order they ran (each instance's in time order)
  std::vector<BlockChange> block_changes;  // with options.record_blocks, in the order of `steps`
  std::int64_t transfer_bytes = 0;
  int transfer_blocks = 0;
  int decode_cached_blocks = 0;  // prompt blocks the decode instance's prefix cache held
  bool decode_prefix_caching = false;
  double block_bytes = 0;  // one block, every layer, K and V, in the run's format
  double makespan = 0;     // the last token's time
};

// The report's headline figures over the requests that produced a token (refused ones aside).
struct DisaggSummary {
  int finished = 0;
  double ttft_mean = 0, ttft_p90 = 0;
  double queue = 0, prefill = 0, transfer = 0, first_decode = 0;  // means
  double tpot_mean = 0, tpot_p90 = 0;  // over requests with two or more tokens
};
// p90: the value at rank ceil(0.9 n) of the sorted values.
DisaggSummary summarize(const DisaggReport& report);

// The run at time t: each instance's blocks after its last step (or release) that ended by t, and
// the transfers under way (started by t, not done).
struct PoolsAt {
  std::vector<int> blocks_used;  // [instance]
  std::vector<int> blocks_held;  // [instance]
  int transfers = 0;             // requests whose K/V is on the link
  int blocks_in_flight = 0;
  std::int64_t bytes_in_flight = 0;
};
PoolsAt pools_at(const DisaggReport& report, double t);
// Instance `instance`'s blocks at time t (every block free without options.record_blocks).
std::vector<BlockOwner> blocks_at(const DisaggReport& report, int instance, double t);

enum class Serving {
  kColocated,      // one instance runs prefill and decode (its pool: the decode instance's)
  kDisaggregated,  // a prefill instance and a decode instance joined by the link
};

class DisaggRun {
 public:
  struct Pending {
    double time;
    std::int32_t id;
  };
  // Runs `requests` as `serving` says; a colocated run uses the options' GPU, arrival interval and
  // decode pool (one GPU's memory), and no link. Throws kvscope::Error on settings it cannot run:
  // a contiguous allocator, token eviction, CacheBlend, parallel samples, a KIVI format
  // disaggregated (its open group stays in per-sequence staging, which is not sent), or a request
  // that cannot fit an instance's pool. With decode_prefix_caching the decode instance maps a
  // request's cached prefix when its prefill starts, and only the prompt blocks after it cross.
  DisaggRun(SimConfig base, DisaggOptions options, Serving serving, SimModel model,
            std::vector<SimRequest> requests);
  ~DisaggRun();
  DisaggRun(const DisaggRun&) = delete;
  DisaggRun& operator=(const DisaggRun&) = delete;

  // Runs the next step of whichever instance starts first; false once every request finished.
  bool step();
  void run();
  bool done() const;
  const DisaggReport& report() const { return report_; }
  // The prefill instance (the only one, colocated) and the decode instance (null colocated).
  const Simulator& prefill() const { return *instances_[0].sim; }
  const Simulator* decode() const {
    return instances_.size() > 1 ? instances_[1].sim.get() : nullptr;
  }
  // Throws InternalError on the first inconsistency (each instance's own invariants, blocks held
  // only for transfers in flight).
  void check_invariants() const;

 private:
  struct Instance {
    std::unique_ptr<Simulator> sim;
    double clock = 0;      // when its next step may start
    bool blocked = false;  // its last step ran nothing: it waits for an event
  };
  struct Transfer {
    std::int32_t id;
    int first_block = 0;           // the prompt's blocks before it were cached on the decode side
    std::vector<std::byte> bytes;  // the blocks as read from the prefill pool
  };
  bool is_disaggregated() const { return instances_.size() > 1; }
  void take_events(double time);
  void after_prefill_step(double start, double cost);
  void after_token_step(std::size_t i, const std::vector<int>& generated_before);
  // Appends `rec` with its instance's blocks used and held now.
  void record_pool(StepRecord rec);
  // One unit over the link, first in first out: when it ends (and, in *begin, starts).
  double send(double ready, double bytes, double* begin);

  SimModel model_;
  std::vector<Instance> instances_;
  DisaggReport report_;
  std::vector<Pending> arrivals_;    // by time, to the first instance
  std::vector<Pending> releases_;    // by time: prefill blocks freed
  std::vector<Pending> deliveries_;  // by time: requests handed to the decode instance
  std::vector<Transfer> wire_;       // K/V read out of the prefill pool, not consumed yet
  std::vector<int> blocks_sent_;     // [id] blocks of the request queued on the link
  std::vector<double>
      last_send_end_;  // [id] when its last byte queued so far is across (< 0: none)
  std::vector<bool> prefill_started_;
  double link_free_ = 0;                              // when the link's queue empties
  std::vector<std::vector<BlockOwner>> last_blocks_;  // [instance]: as last recorded
};

// The same requests run colocated, then disaggregated: what kvscope disagg and the Serving
// workspace show. `on_step` (may be empty) is called after every engine step of either run with
// that run's mode; when it returns false the runs stop and run_both returns nullopt.
struct DisaggComparison {
  DisaggReport colocated, disaggregated;
};
std::optional<DisaggComparison> run_both(const SimConfig& config, const DisaggOptions& options,
                                         const SimModel& model,
                                         const std::vector<SimRequest>& requests,
                                         const std::function<bool(Serving)>& on_step = {});

}  // namespace kvscope
