// The token-eviction flags of generate and eval.
#include "cli/eviction_flags.h"

#include "engine/common/error.h"
#include "engine/common/setting_source.h"

namespace kvscope::cli {

EvictorOptions parse_eviction_flags(const Args& args, const std::string& policy,
                                    const char* policy_flag) {
  EvictorOptions o;
  EvictionConfig& p = o.policy;
  p.kind = parse_eviction_kind(policy, policy_flag);
  p.budget = args.get_int("--budget", 64);
  p.sinks = args.get_int("--sinks", 4);
  p.recent = args.get_int("--recent", -1);
  p.observation_window = args.get_int("--obs-window", 8);
  // -1 is this flag's spelling of "budget / 2" (a scenario leaves the key out instead), so the
  // rule on it is the CLI's own.
  if (p.recent < -1 || p.recent == 0) {
    fail_expected("--recent", "a positive integer (or -1: budget / 2)", std::to_string(p.recent));
  }
  with_setting_sources({{kEvictionBudget, "--budget"},
                        {kEvictionSinks, "--sinks"},
                        {kEvictionObservationWindow, "--obs-window"}},
                       [&] { validate(p); });
  o.compaction = parse_compaction_policy(args.get("--compact", "never"), "--compact");
  o.positions = parse_position_mode(args.get("--positions", "keep"), "--positions");
  return o;
}

}  // namespace kvscope::cli
