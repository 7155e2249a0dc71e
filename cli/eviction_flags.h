// The token-eviction flags `kvscope generate` and the `kvscope eval` eviction subverbs share
// (--evict or eval's --policy, --budget --sinks --recent --obs-window --compact --positions): read
// and checked in this one place, so the commands accept the same values and refuse the others with
// the same messages.
#pragma once

#include <string>

#include "cli/args.h"
#include "engine/evict/token_evictor.h"

namespace kvscope::cli {

// The flags beside --evict that only mean something with eviction.
inline constexpr const char* kEvictionDetailFlags[] = {"--budget",     "--sinks",   "--recent",
                                                       "--obs-window", "--compact", "--positions"};

// The evictor the flags ask for: `policy` is --evict's value as the command resolves it (eval has a
// default, generate none); then --budget 64, --sinks 4, --recent budget / 2, --obs-window 8,
// --compact never, --positions keep unless given. Checks what it can before any model loads:
// --recent is a positive integer or -1, and the engine's rules for every evictor (evict/policy.h
// validate), each error naming the flag that carried the value.
// `policy_flag` is the flag errors about the policy name name (--evict; eval evict's --policy).
EvictorOptions parse_eviction_flags(const Args& args, const std::string& policy,
                                    const char* policy_flag = "--evict");

}  // namespace kvscope::cli
