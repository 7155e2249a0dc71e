// TierPrefetcher: a FIFO of prefix reads served by one IO thread.
#include "engine/tiers/tier_prefetch.h"

#include <chrono>

namespace kvscope {

TierPrefetcher::TierPrefetcher(KvTierStore& store, std::mutex& store_mutex)
    : store_(store), store_mutex_(store_mutex), thread_([this] { run(); }) {}

TierPrefetcher::~TierPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<TierPrefetcher::Job> TierPrefetcher::submit(std::vector<std::uint64_t> keys) {
  auto job = std::make_shared<Job>();
  const std::size_t n = keys.size();
  job->keys = std::move(keys);
  job->bytes.resize(store_.with_bytes() ? n * store_.block_bytes() : 0);
  job->staged.assign(n, 0);
  job->seconds.assign(n, 0.0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(job);
  }
  wake_.notify_one();
  return job;
}

double TierPrefetcher::wait(const std::shared_ptr<Job>& job) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (job->done) return 0.0;
  done_.wait(lock, [&] { return job->done; });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void TierPrefetcher::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = queue_.front();
      queue_.pop_front();
    }
    // The job's buffers are this thread's until `done` is set under the mutex. Each block's time
    // is the read itself, not the wait for the store's mutex.
    const std::size_t bytes = store_.block_bytes();
    for (std::size_t i = 0; i < job->keys.size(); ++i) {
      std::byte* out = job->bytes.empty() ? nullptr : job->bytes.data() + i * bytes;
      std::lock_guard<std::mutex> lock(store_mutex_);
      const auto start = std::chrono::steady_clock::now();
      job->staged[i] = store_.peek(job->keys[i], out) ? 1 : 0;
      job->seconds[i] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job->done = true;
    }
    done_.notify_all();
  }
}

}  // namespace kvscope
