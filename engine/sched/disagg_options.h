// What a disaggregated prefill/decode run is given (engine/sched/disagg.h): the link, how the K/V
// crosses it, the GPU whose roofline prices each step, each instance's pool, and the time between
// arrivals. A scenario's cache.disaggregation section parses into it.
#pragma once

#include <optional>
#include <string>

#include "engine/common/interconnect.h"
#include "engine/sched/step_cost.h"

namespace kvscope {

enum class TransferMode {
  kLayerWise,     // each completed block's layers leave as the step computes them
  kWholeRequest,  // the request's blocks leave together once its prefill ends
};
TransferMode parse_transfer_mode(const std::string& name, const std::string& where);
std::string transfer_mode_name(TransferMode mode);

struct DisaggOptions {
  Link link = parse_link("rdma400", "disaggregation.link");
  double latency_seconds = 10e-6;
  TransferMode transfer = TransferMode::kLayerWise;
  GpuRoofline gpu = gpu_rooflines()[0];  // h100
  int prefill_blocks = 0;                // 0: the scenario's num_blocks
  int decode_blocks = 0;                 // 0: the scenario's num_blocks
  // A request with arrival_step s arrives at s x this (both runs use the same times).
  double arrival_interval_seconds = 0.0;
  // Whether the decode instance keeps a prefix cache of what it receives (then a request's
  // blocks it already holds do not cross the link); unset: as the scenario's prefix_caching.
  std::optional<bool> decode_prefix_caching;
  // Record who holds each block of each pool over the run (DisaggReport::block_changes), for a
  // block map; off by default (kvscope disagg does not draw one).
  bool record_blocks = false;
};

}  // namespace kvscope
