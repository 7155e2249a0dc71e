// TierPrefetcher: one IO thread that reads KV tier blocks ahead of need. The Simulator hands it a
// request's prefix blocks that sit in the tiers when the request arrives; the thread reads them
// (KvTierStore::peek, under the store's mutex, one block at a time) into the job's own buffer
// while the stepping thread runs earlier requests' steps. At admission the stepping thread waits
// for the job (the time it waits is the load time prefetch did not hide) and takes the staged
// bytes: a block's bytes are named by its chain key, so they are valid whatever the tiers did
// since. Only the stepping thread changes the tiers' contents, so they never depend on timing.
//
// THREADING: submit() and wait() from one thread (the stepping thread); the IO thread touches the
// store only while holding `store_mutex`, which the stepping thread also holds around its own
// calls into the store.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/tiers/kv_tier_store.h"

namespace kvscope {

class TierPrefetcher {
 public:
  struct Job {
    std::vector<std::uint64_t> keys;
    std::vector<std::byte> bytes;  // [keys.size()][block bytes], filled by the IO thread
    std::vector<char> staged;      // [keys.size()] 1 when the block's bytes are in `bytes`
    std::vector<double> seconds;   // [keys.size()] the IO thread's time reading each block
    bool done = false;             // guarded by the prefetcher's mutex
    // Where the job staged `key`'s bytes; nullopt when it did not (call once it is done).
    std::optional<std::size_t> staged_at(std::uint64_t key) const {
      for (std::size_t i = 0; i < keys.size(); ++i)
        if (keys[i] == key && staged[i]) return i;
      return std::nullopt;
    }
  };

  TierPrefetcher(KvTierStore& store, std::mutex& store_mutex);
  ~TierPrefetcher();  // finishes the job in hand, drops the rest, joins the thread
  TierPrefetcher(const TierPrefetcher&) = delete;
  TierPrefetcher& operator=(const TierPrefetcher&) = delete;

  // Queues the reads of `keys` (in order) and returns the job to wait for.
  std::shared_ptr<Job> submit(std::vector<std::uint64_t> keys);
  // Blocks until `job` is done; the seconds it waited (0 when it was done already).
  double wait(const std::shared_ptr<Job>& job);

 private:
  void run();

  KvTierStore& store_;
  std::mutex& store_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;  // the IO thread: a job arrived, or stop
  std::condition_variable done_;  // waiters: a job finished
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace kvscope
