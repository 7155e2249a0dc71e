// See simt.h. One block at a time: a scheduler context runs each runnable fiber until it waits
// (block barrier or warp collective) or returns, then releases the waits that are complete, and
// reports the ones that never can be.
// Fortified glibc turns _longjmp into __longjmp_chk, which refuses a jump to a lower stack (the
// scheduler's jump into a fiber, whose stack is on the heap) and aborts. Distributions turn it
// on by default at -O2 (Ubuntu's gcc does): off for this file, which switches stacks on purpose.
#undef _FORTIFY_SOURCE
#include "kernels/sim/simt.h"

#include "kernels/sim/memory_trace.h"

#include <pthread.h>
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define KVSCOPE_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVSCOPE_SIM_ASAN 1
#endif
#endif
#ifdef KVSCOPE_SIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace kvscope::sim {
namespace {

#ifdef KVSCOPE_SIM_ASAN
constexpr std::size_t kStackBytes = 512 * 1024;  // AddressSanitizer's redzones and fake frames
#else
constexpr std::size_t kStackBytes = 128 * 1024;
#endif
// Bytes past the end of every shared allocation, filled with kCanary and checked after each
// block: a write past the end is a kernel bug, reported in every build (AddressSanitizer also
// sees accesses beyond these).
constexpr std::size_t kCanaryBytes = 64;
constexpr unsigned char kCanary = 0xA5;

std::unique_ptr<std::byte[]> guarded(std::size_t bytes) {
  auto p = std::make_unique<std::byte[]>(bytes + kCanaryBytes);
  std::memset(p.get(), 0xFF, bytes);  // poison: NaN as floats
  std::memset(p.get() + bytes, kCanary, kCanaryBytes);
  return p;
}

bool canary_intact(const std::byte* p, std::size_t bytes) {
  for (std::size_t i = 0; i < kCanaryBytes; ++i)
    if (static_cast<unsigned char>(p[bytes + i]) != kCanary) return false;
  return true;
}

enum class State { kRunnable, kAtBarrier, kAtWarp, kDone };

struct Fiber {
  ucontext_t ctx{};
  std::unique_ptr<char[]> stack;
  State state = State::kRunnable;
  dim3 tid;
  unsigned linear = 0;     // thread index within the block
  unsigned warp_mask = 0;  // the mask of the warp collective it waits at
  std::size_t shared_calls = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, while switched out
  jmp_buf jmp{};               // where it resumes
  bool started = false;
  // Parked: it finished a body and waits in fiber_main's loop for the next one, so the next
  // block (of this launch or a later one) resumes it with a _longjmp instead of building a new
  // context (getcontext, makecontext and swapcontext each cost system calls).
  bool parked = false;
};

struct Warp {
  std::uint64_t slot[kWarpSize] = {};
};

struct Block {
  const LaunchConfig* config = nullptr;
  const std::function<void()>* body = nullptr;
  dim3 block_idx;
  std::vector<Fiber*> fibers;  // this OS thread's pooled fibers, one per CUDA thread
  std::vector<Warp> warps;
  ucontext_t scheduler{};
  jmp_buf scheduler_jmp{};
  void* sched_fake_stack = nullptr;  // AddressSanitizer's, while a fiber runs
  Fiber* current = nullptr;
  std::exception_ptr error;  // the first exception a thread threw
  // Static shared memory: one heap block per allocation site, in the order threads reach them.
  std::vector<std::unique_ptr<std::byte[]>> shared;
  std::vector<std::size_t> shared_sizes;
  std::unique_ptr<std::byte[]> dynamic;
  std::size_t shared_total = 0;
  const void* sched_stack_bottom = nullptr;
  std::size_t sched_stack_size = 0;
};

thread_local Block* g_block = nullptr;

// "KERNEL block (x,y,z)[ thread (x,y,z)]": where an error happened, in either mode.
std::string place(const char* kernel, const dim3& block, const dim3* tid) {
  std::string s = std::string(kernel) + " block (" + std::to_string(block.x) + "," +
                  std::to_string(block.y) + "," + std::to_string(block.z) + ")";
  if (tid != nullptr) {
    s += " thread (" + std::to_string(tid->x) + "," + std::to_string(tid->y) + "," +
         std::to_string(tid->z) + ")";
  }
  return s;
}

// After a block, in either mode: throws if a kernel wrote past a shared allocation's end.
void check_canaries(const std::string& where,
                    const std::vector<std::unique_ptr<std::byte[]>>& shared,
                    const std::vector<std::size_t>& sizes, const std::byte* dynamic,
                    std::size_t dynamic_bytes) {
  for (std::size_t k = 0; k < shared.size(); ++k) {
    if (!canary_intact(shared[k].get(), sizes[k])) {
      throw SimError(where + ": shared allocation " + std::to_string(k) + " (" +
                     std::to_string(sizes[k]) + " bytes) was written past its end");
    }
  }
  if (!canary_intact(dynamic, dynamic_bytes)) {
    throw SimError(where + ": dynamic shared memory (" + std::to_string(dynamic_bytes) +
                   " bytes) was written past its end");
  }
}

std::string where(const Block& b, const Fiber* f) {
  return place(b.config->kernel, b.block_idx, f != nullptr ? &f->tid : nullptr);
}

Block& block() {
  if (g_block == nullptr || g_block->current == nullptr)
    throw SimError("a SIMT primitive was called outside a kernel launched by kvscope::sim::launch");
  return *g_block;
}

// Switching: swapcontext only to enter a fiber the first time, then _setjmp/_longjmp, which do
// not save and restore the signal mask: no system call per switch (a forward pass switches
// millions of times). Under AddressSanitizer every switch is announced to it (fiber API).

// Scheduler -> fiber, and back when it waits or returns.
__attribute__((noinline)) void run_fiber(Block& b, Fiber& f) {
  b.current = &f;
#ifdef KVSCOPE_SIM_ASAN
  __sanitizer_start_switch_fiber(&b.sched_fake_stack, f.stack.get(), kStackBytes);
#endif
  if (_setjmp(b.scheduler_jmp) == 0) {
    if (!f.started) {
      f.started = true;
      swapcontext(&b.scheduler, &f.ctx);  // the fiber comes back by _longjmp, not through here
    } else {
      _longjmp(f.jmp, 1);
    }
  }
#ifdef KVSCOPE_SIM_ASAN
  __sanitizer_finish_switch_fiber(b.sched_fake_stack, nullptr, nullptr);
#endif
  b.current = nullptr;
}

// Fiber -> scheduler (the fiber is waiting; it resumes here).
__attribute__((noinline)) void yield_to_scheduler(Block& b, Fiber& f) {
#ifdef KVSCOPE_SIM_ASAN
  __sanitizer_start_switch_fiber(&f.fake_stack, b.sched_stack_bottom, b.sched_stack_size);
#endif
  if (_setjmp(f.jmp) == 0) _longjmp(b.scheduler_jmp, 1);
#ifdef KVSCOPE_SIM_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &b.sched_stack_bottom, &b.sched_stack_size);
#endif
}

// A fiber's life: run the body of the block it is given, park, and run the next block's body
// when resumed, for as long as the OS thread lives (or until a block fails while the fiber is
// inside a body: then its context is rebuilt). The block and the fiber are read from g_block
// after every resume: the next block may belong to another launch.
void fiber_main() {
#ifdef KVSCOPE_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_block->sched_stack_bottom,
                                  &g_block->sched_stack_size);
#endif
  for (;;) {
    Block& b = *g_block;
    Fiber& f = *b.current;
    f.parked = false;
    try {
      (*b.body)();
    } catch (...) {
      if (!b.error) b.error = std::current_exception();
    }
    f.state = State::kDone;
    f.parked = true;
#ifdef KVSCOPE_SIM_ASAN
    __sanitizer_start_switch_fiber(&f.fake_stack, b.sched_stack_bottom, b.sched_stack_size);
#endif
    if (_setjmp(f.jmp) == 0) _longjmp(b.scheduler_jmp, 1);
#ifdef KVSCOPE_SIM_ASAN
    Fiber& resumed = *g_block->current;
    __sanitizer_finish_switch_fiber(resumed.fake_stack, &g_block->sched_stack_bottom,
                                    &g_block->sched_stack_size);
#endif
  }
}

// Releases complete warp collectives; returns whether any was released.
bool release_warps(Block& b) {
  bool released = false;
  for (unsigned w = 0; w < b.warps.size(); ++w) {
    unsigned waiting = 0;
    for (unsigned l = 0; l < kWarpSize; ++l) {
      const std::size_t i = static_cast<std::size_t>(w) * kWarpSize + l;
      if (i < b.fibers.size() && b.fibers[i]->state == State::kAtWarp) waiting |= 1u << l;
    }
    if (waiting == 0) continue;
    for (unsigned l = 0; l < kWarpSize; ++l) {
      if ((waiting >> l & 1u) == 0) continue;
      Fiber& f = *b.fibers[static_cast<std::size_t>(w) * kWarpSize + l];
      const unsigned need = f.warp_mask;
      for (unsigned k = 0; k < kWarpSize; ++k) {
        if ((need >> k & 1u) == 0) continue;
        const std::size_t i = static_cast<std::size_t>(w) * kWarpSize + k;
        if (i >= b.fibers.size() || b.fibers[i]->state == State::kDone) {
          throw SimError(where(b, &f) + ": a warp collective's mask 0x" +
                         [&] {
                           char buf[16];
                           std::snprintf(buf, sizeof buf, "%08x", need);
                           return std::string(buf);
                         }() +
                         " names lane " + std::to_string(k) + ", which " +
                         (i >= b.fibers.size() ? "does not exist" : "has exited"));
        }
      }
      if ((need & ~waiting) != 0) continue;  // not everyone is there yet
      // Everyone of the mask waits, each with this mask: release them together.
      bool same = true;
      for (unsigned k = 0; k < kWarpSize; ++k)
        if ((need >> k & 1u) != 0)
          same = same && b.fibers[static_cast<std::size_t>(w) * kWarpSize + k]->warp_mask == need;
      if (!same) continue;
      for (unsigned k = 0; k < kWarpSize; ++k)
        if ((need >> k & 1u) != 0)
          b.fibers[static_cast<std::size_t>(w) * kWarpSize + k]->state = State::kRunnable;
      waiting &= ~need;
      released = true;
    }
  }
  return released;
}

void run_block(Block& b) {
  for (;;) {
    bool ran = false;
    for (Fiber* f : b.fibers) {
      if (f->state != State::kRunnable) continue;
      run_fiber(b, *f);
      ran = true;
      if (b.error) return;
    }
    std::size_t done = 0, at_barrier = 0;
    const Fiber* exited = nullptr;
    const Fiber* waiting = nullptr;
    for (const Fiber* f : b.fibers) {
      if (f->state == State::kDone) {
        ++done;
        exited = f;
      }
      if (f->state == State::kAtBarrier) {
        ++at_barrier;
        waiting = f;
      }
    }
    if (done == b.fibers.size()) return;
    if (release_warps(b)) continue;
    if (at_barrier > 0 && at_barrier + done == b.fibers.size()) {
      if (done > 0) {
        throw SimError(where(b, exited) + " exited while " + std::to_string(at_barrier) +
                       " threads of its block wait at __syncthreads (" + where(b, waiting) +
                       "): a barrier in divergent code");
      }
      for (Fiber* f : b.fibers) f->state = State::kRunnable;
      continue;
    }
    if (!ran) {
      // Nobody can move: threads wait at different barriers or collectives.
      const Fiber* warp_waiter = nullptr;
      for (const Fiber* f : b.fibers)
        if (f->state == State::kAtWarp) warp_waiter = f;
      throw SimError(std::string(b.config->kernel) + ": deadlock: " + std::to_string(at_barrier) +
                     " threads wait at __syncthreads" +
                     (warp_waiter ? " while " + where(b, warp_waiter) +
                                        " waits for its warp (a collective some lanes of its "
                                        "mask never reach)"
                                  : std::string()));
    }
  }
}

void check_launch(const LaunchConfig& c) {
  auto dims = [](const dim3& d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
  };
  const unsigned long threads = static_cast<unsigned long>(c.block.x) * c.block.y * c.block.z;
  if (c.block.x == 0 || c.block.y == 0 || c.block.z == 0 || c.grid.x == 0 || c.grid.y == 0 ||
      c.grid.z == 0) {
    throw SimError(std::string(c.kernel) + ": launch with an empty grid " + dims(c.grid) +
                   " or block " + dims(c.block));
  }
  if (threads > kMaxThreadsPerBlock || c.block.z > 64) {
    throw SimError(std::string(c.kernel) + ": block " + dims(c.block) +
                   " exceeds 1024 threads per block (z at most 64)");
  }
  if (c.grid.y > 65535 || c.grid.z > 65535) {
    throw SimError(std::string(c.kernel) + ": grid " + dims(c.grid) + " exceeds 65535 in y or z");
  }
  if (c.shared_bytes > kMaxSharedBytes) {
    throw SimError(std::string(c.kernel) + ": " + std::to_string(c.shared_bytes) +
                   " bytes of dynamic shared memory exceed the 48 KiB a launch gets");
  }
}

thread_local dim3 g_grid_dim, g_block_dim;

// One block of b's launch: fresh fibers and shared memory, run to completion, shared memory
// checked. Kept out of launch()'s loops: getcontext returns twice, which would make the loop
// counters candidates for clobbering.
__attribute__((noinline)) void run_one_block(Block& b, dim3 block_idx) {
  const LaunchConfig& config = *b.config;
  b.block_idx = block_idx;
  b.shared.clear();
  b.shared_sizes.clear();
  b.shared_total = config.shared_bytes;
  b.dynamic = guarded(config.shared_bytes);
  const unsigned n = static_cast<unsigned>(b.fibers.size());
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = *b.fibers[i];
    f.state = State::kRunnable;
    f.linear = i;
    f.tid = dim3(i % config.block.x, (i / config.block.x) % config.block.y,
                 i / (config.block.x * config.block.y));
    f.shared_calls = 0;
    f.started = f.parked;  // a parked fiber resumes where it parked; any other starts afresh
    if (f.parked) continue;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;  // fiber_main never returns
    makecontext(&f.ctx, &fiber_main, 0);
  }
  run_block(b);
  if (b.error) std::rethrow_exception(b.error);
  check_canaries(where(b, nullptr), b.shared, b.shared_sizes, b.dynamic.get(), config.shared_bytes);
}

// ---- Thread mode: one OS thread per CUDA thread ----------------------------------------------
//
// All of a block's synchronization goes through one mutex and one condition variable (what
// ThreadSanitizer understands as happens-before); shared-memory accesses between them are plain,
// so an access a missing barrier leaves unordered is a race it reports. Waiting threads are
// counted; when every live thread of the block waits and no barrier or collective can complete,
// that is a deadlock, reported like the fiber mode's. A failure wakes every waiter, which unwinds
// its kernel body with Abort.

struct Abort {};

struct TWarp {
  unsigned waiting = 0;  // lanes waiting at a collective
  unsigned exited = 0;   // lanes that returned
  unsigned mask[kWarpSize] = {};
  unsigned long gen[kWarpSize] = {};  // bumped when the lane is released
  std::uint64_t slot[kWarpSize] = {};
};

struct TBlock;
struct TThread {
  TBlock* block = nullptr;
  dim3 tid;
  unsigned linear = 0;
  std::size_t shared_calls = 0;
};

struct TBlock {
  const LaunchConfig* config = nullptr;
  const std::function<void()>* body = nullptr;
  dim3 block_idx;
  unsigned n = 0;
  std::mutex mu;
  std::condition_variable cv;
  unsigned alive = 0;
  unsigned blocked = 0;  // threads waiting and not yet released
  unsigned at_barrier = 0;
  unsigned long barrier_gen = 0;
  std::vector<TWarp> warps;
  std::vector<TThread> threads;
  const TThread* exited = nullptr;  // the latest thread to return
  bool failed = false;
  std::string error;          // a kernel bug found here
  std::exception_ptr thrown;  // or the first exception a thread threw
  std::vector<std::unique_ptr<std::byte[]>> shared;
  std::vector<std::size_t> shared_sizes;
  std::size_t shared_total = 0;
  std::unique_ptr<std::byte[]> dynamic;
};

thread_local TThread* g_thread = nullptr;

std::string where_t(const TBlock& b, const TThread* t) {
  return place(b.config->kernel, b.block_idx, t != nullptr ? &t->tid : nullptr);
}

// Records a kernel bug (the first one wins) and wakes everyone; the caller holds the lock.
void fail_locked(TBlock& b, const std::string& what) {
  if (!b.failed) b.error = what;
  b.failed = true;
  b.cv.notify_all();
}

std::string hex_mask(unsigned m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", m);
  return buf;
}

// Releases every complete warp collective; the caller holds the lock.
void release_warps_locked(TBlock& b) {
  for (TWarp& w : b.warps) {
    for (unsigned l = 0; l < kWarpSize; ++l) {
      if ((w.waiting >> l & 1u) == 0) continue;
      const unsigned need = w.mask[l];
      if ((need & ~w.waiting) != 0) continue;
      bool same = true;
      for (unsigned k = 0; k < kWarpSize; ++k)
        if ((need >> k & 1u) != 0) same = same && w.mask[k] == need;
      if (!same) continue;
      w.waiting &= ~need;
      for (unsigned k = 0; k < kWarpSize; ++k)
        if ((need >> k & 1u) != 0) ++w.gen[k];
      b.blocked -= static_cast<unsigned>(std::popcount(need));
      b.cv.notify_all();
    }
  }
}

// After a thread starts waiting or exits: everyone left waits and nobody can be released.
void check_deadlock_locked(TBlock& b) {
  if (b.failed || b.alive == 0 || b.blocked != b.alive) return;
  const TThread* warp_waiter = nullptr;
  for (const TThread& t : b.threads)
    if (b.warps[t.linear / kWarpSize].waiting >> (t.linear % kWarpSize) & 1u) warp_waiter = &t;
  fail_locked(b, std::string(b.config->kernel) + ": deadlock: " + std::to_string(b.at_barrier) +
                     " threads wait at __syncthreads" +
                     (warp_waiter ? " while " + where_t(b, warp_waiter) +
                                        " waits for its warp (a collective some lanes of its "
                                        "mask never reach)"
                                  : std::string()));
}

TThread& current_thread() {
  if (g_thread == nullptr)
    throw SimError("a SIMT primitive was called outside a kernel launched by kvscope::sim::launch");
  return *g_thread;
}

void t_sync_block() {
  TThread& t = current_thread();
  TBlock& b = *t.block;
  std::unique_lock<std::mutex> lock(b.mu);
  if (b.failed) throw Abort{};
  const unsigned long gen = b.barrier_gen;
  ++b.at_barrier;
  ++b.blocked;
  if (b.at_barrier == b.alive && b.alive < b.n) {  // the others returned: divergent code
    fail_locked(b, where_t(b, b.exited) + " exited while " + std::to_string(b.at_barrier) +
                       " threads of its block wait at __syncthreads (" + where_t(b, &t) +
                       "): a barrier in divergent code");
    throw Abort{};
  }
  if (b.at_barrier == b.alive) {
    b.blocked -= b.at_barrier;
    b.at_barrier = 0;
    ++b.barrier_gen;
    b.cv.notify_all();
    return;
  }
  check_deadlock_locked(b);
  b.cv.wait(lock, [&] { return b.failed || b.barrier_gen != gen; });
  if (b.barrier_gen == gen) throw Abort{};
}

void t_sync_warp(unsigned mask) {
  TThread& t = current_thread();
  TBlock& b = *t.block;
  std::unique_lock<std::mutex> lock(b.mu);
  if (b.failed) throw Abort{};
  const unsigned lane = t.linear % kWarpSize, w0 = t.linear / kWarpSize * kWarpSize;
  TWarp& w = b.warps[t.linear / kWarpSize];
  if ((mask >> lane & 1u) == 0) {
    fail_locked(b, where_t(b, &t) + ": a warp collective's mask leaves out the calling lane " +
                       std::to_string(lane));
    throw Abort{};
  }
  for (unsigned k = 0; k < kWarpSize; ++k) {
    if ((mask >> k & 1u) == 0) continue;
    if (w0 + k >= b.n || (w.exited >> k & 1u) != 0) {
      fail_locked(b, where_t(b, &t) + ": a warp collective's mask 0x" + hex_mask(mask) +
                         " names lane " + std::to_string(k) + ", which " +
                         (w0 + k >= b.n ? "does not exist" : "has exited"));
      throw Abort{};
    }
  }
  const unsigned long gen = w.gen[lane];
  w.mask[lane] = mask;
  w.waiting |= 1u << lane;
  ++b.blocked;
  release_warps_locked(b);
  if (w.gen[lane] != gen) return;
  check_deadlock_locked(b);
  b.cv.wait(lock, [&] { return b.failed || w.gen[lane] != gen; });
  if (w.gen[lane] == gen) throw Abort{};
}

std::uint64_t t_exchange(unsigned mask, std::uint64_t bits, int src) {
  TThread& t = current_thread();
  TBlock& b = *t.block;
  TWarp& w = b.warps[t.linear / kWarpSize];
  if (src < 0 || src >= kWarpSize || (mask >> src & 1u) == 0) {
    std::lock_guard<std::mutex> lock(b.mu);
    fail_locked(b, where_t(b, &t) + ": shuffle from lane " + std::to_string(src) +
                       ", outside the mask (its value is undefined on a GPU)");
    throw Abort{};
  }
  w.slot[t.linear % kWarpSize] = bits;  // ordered by the collective's lock
  t_sync_warp(mask);
  const std::uint64_t got = w.slot[src];
  t_sync_warp(mask);
  return got;
}

void* t_shared_alloc(std::size_t bytes, std::size_t align) {
  TThread& t = current_thread();
  TBlock& b = *t.block;
  std::lock_guard<std::mutex> lock(b.mu);
  const std::size_t k = t.shared_calls++;
  if (k == b.shared.size()) {
    b.shared_total += bytes;
    if (b.shared_total > kMaxSharedBytes) {
      fail_locked(b, where_t(b, &t) + ": " + std::to_string(b.shared_total) +
                         " bytes of shared memory (static and dynamic) exceed 48 KiB");
      throw Abort{};
    }
    if (align > alignof(std::max_align_t)) {
      fail_locked(b, where_t(b, &t) + ": shared alignment above 16 bytes is not modelled");
      throw Abort{};
    }
    b.shared.push_back(guarded(bytes));
    b.shared_sizes.push_back(bytes);
  } else if (b.shared_sizes[k] != bytes) {
    fail_locked(b, where_t(b, &t) + ": shared allocation " + std::to_string(k) + " is " +
                       std::to_string(bytes) + " bytes here and " +
                       std::to_string(b.shared_sizes[k]) +
                       " in another thread (declarations must not depend on the thread)");
    throw Abort{};
  }
  return b.shared[k].get();
}

// The body of one CUDA thread's OS thread.
void* t_main(void* arg) {
  TThread& t = *static_cast<TThread*>(arg);
  TBlock& b = *t.block;
  g_thread = &t;
  try {
    (*b.body)();
  } catch (const Abort&) {
  } catch (...) {
    std::lock_guard<std::mutex> lock(b.mu);
    if (!b.failed && !b.thrown) b.thrown = std::current_exception();
    b.failed = true;
    b.cv.notify_all();
  }
  g_thread = nullptr;
  std::lock_guard<std::mutex> lock(b.mu);
  --b.alive;
  b.exited = &t;
  b.warps[t.linear / kWarpSize].exited |= 1u << (t.linear % kWarpSize);
  if (!b.failed && b.at_barrier > 0 && b.at_barrier == b.alive) {
    fail_locked(b, where_t(b, &t) + " exited while " + std::to_string(b.at_barrier) +
                       " threads of its block wait at __syncthreads: a barrier in divergent code");
  }
  // A lane that exits may leave a collective waiting for it forever.
  for (const TWarp& w : b.warps) {
    if (b.failed) break;
    for (unsigned l = 0; l < kWarpSize; ++l) {
      if ((w.waiting >> l & 1u) != 0 && (w.mask[l] & w.exited) != 0) {
        const unsigned gone = static_cast<unsigned>(std::countr_zero(w.mask[l] & w.exited));
        fail_locked(b, std::string(b.config->kernel) + ": a warp collective's mask 0x" +
                           hex_mask(w.mask[l]) + " names lane " + std::to_string(gone) +
                           ", which has exited");
        break;
      }
    }
  }
  check_deadlock_locked(b);
  b.cv.notify_all();
  return nullptr;
}

void run_block_threads(const LaunchConfig& config, const std::function<void()>& body, dim3 idx) {
  TBlock b;
  b.config = &config;
  b.body = &body;
  b.block_idx = idx;
  b.n = config.block.x * config.block.y * config.block.z;
  b.alive = b.n;
  b.warps.resize((b.n + kWarpSize - 1) / kWarpSize);
  b.threads.resize(b.n);
  b.shared_total = config.shared_bytes;
  b.dynamic = guarded(config.shared_bytes);
  for (unsigned i = 0; i < b.n; ++i) {
    TThread& t = b.threads[i];
    t.block = &b;
    t.linear = i;
    t.tid = dim3(i % config.block.x, (i / config.block.x) % config.block.y,
                 i / (config.block.x * config.block.y));
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes * 2);
  std::vector<pthread_t> ids(b.n);
  unsigned started = 0;
  for (; started < b.n; ++started) {
    if (pthread_create(&ids[started], &attr, &t_main, &b.threads[started]) != 0) break;
  }
  pthread_attr_destroy(&attr);
  if (started < b.n) {
    std::lock_guard<std::mutex> lock(b.mu);
    b.alive -= b.n - started;  // never started: they count as gone
    fail_locked(b, std::string(config.kernel) + ": could not start " + std::to_string(b.n) +
                       " OS threads for one block (thread mode)");
  }
  for (unsigned i = 0; i < started; ++i) pthread_join(ids[i], nullptr);
  if (b.thrown) std::rethrow_exception(b.thrown);
  if (b.failed) throw SimError(b.error);
  check_canaries(where_t(b, nullptr), b.shared, b.shared_sizes, b.dynamic.get(),
                 config.shared_bytes);
}

std::atomic<Mode>& mode_ref() {
  static std::atomic<Mode> m{[] {
    const char* env = std::getenv("KVSCOPE_SIM_MODE");
    return env != nullptr && std::string(env) == "threads" ? Mode::kThreads : Mode::kFibers;
  }()};
  return m;
}

// The grid and block of the launch being run, for thread mode's OS threads (fiber mode keeps
// them thread-local on the launching thread).
dim3 g_t_grid, g_t_block;

}  // namespace

void set_mode(Mode m) {
  mode_ref().store(m);
}

Mode mode() {
  return mode_ref().load();
}

void launch(const LaunchConfig& config, const std::function<void()>& body) {
  check_launch(config);
  if (g_block != nullptr || g_thread != nullptr)
    throw SimError(std::string(config.kernel) + ": nested launch");
  trace_launch(config);  // memory_trace.h: a no-op unless a recorder is installed
  if (mode() == Mode::kThreads) {
    g_t_grid = config.grid;
    g_t_block = config.block;
    for (unsigned bz = 0; bz < config.grid.z; ++bz)
      for (unsigned by = 0; by < config.grid.y; ++by)
        for (unsigned bx = 0; bx < config.grid.x; ++bx)
          run_block_threads(config, body, dim3(bx, by, bz));
    return;
  }
  const unsigned n = config.block.x * config.block.y * config.block.z;
  Block b;
  b.config = &config;
  b.body = &body;
  b.warps.resize((n + kWarpSize - 1) / kWarpSize);
  // Fibers (and their stacks) outlive the launch: a forward pass makes thousands of launches.
  // This OS thread's pool holds as many as its largest block; a stack is not value-initialized,
  // so its pages are touched only as deep as it grows.
  thread_local std::vector<std::unique_ptr<Fiber>> pool;
  while (pool.size() < n) {
    pool.push_back(std::make_unique<Fiber>());
    pool.back()->stack = std::make_unique_for_overwrite<char[]>(kStackBytes);
  }
  b.fibers.resize(n);
  for (unsigned i = 0; i < n; ++i) b.fibers[i] = pool[i].get();
  g_grid_dim = config.grid;
  g_block_dim = config.block;
  struct Reset {
    ~Reset() { g_block = nullptr; }
  } reset;
  g_block = &b;
  for (unsigned bz = 0; bz < config.grid.z; ++bz) {
    for (unsigned by = 0; by < config.grid.y; ++by) {
      for (unsigned bx = 0; bx < config.grid.x; ++bx) {
        run_one_block(b, dim3(bx, by, bz));
      }
    }
  }
}

const dim3& thread_idx() {
  if (g_thread != nullptr) return g_thread->tid;
  return block().current->tid;
}
const dim3& block_idx() {
  if (g_thread != nullptr) return g_thread->block->block_idx;
  return block().block_idx;
}
const dim3& block_dim() {
  return g_thread != nullptr ? g_t_block : g_block_dim;
}
const dim3& grid_dim() {
  return g_thread != nullptr ? g_t_grid : g_grid_dim;
}

unsigned lane_id() {
  if (g_thread != nullptr) return g_thread->linear % kWarpSize;
  return block().current->linear % kWarpSize;
}

void sync_block() {
  if (g_thread != nullptr) return t_sync_block();
  Block& b = block();
  Fiber& f = *b.current;
  f.state = State::kAtBarrier;
  yield_to_scheduler(b, f);
}

void sync_warp(unsigned mask) {
  if (g_thread != nullptr) return t_sync_warp(mask);
  Block& b = block();
  Fiber& f = *b.current;
  const unsigned lane = f.linear % kWarpSize;
  if ((mask >> lane & 1u) == 0) {
    throw SimError(where(b, &f) + ": a warp collective's mask leaves out the calling lane " +
                   std::to_string(lane));
  }
  f.warp_mask = mask;
  f.state = State::kAtWarp;
  yield_to_scheduler(b, f);
}

std::uint64_t exchange(unsigned mask, std::uint64_t bits, int src) {
  if (g_thread != nullptr) return t_exchange(mask, bits, src);
  Block& b = block();
  Fiber& f = *b.current;
  Warp& w = b.warps[f.linear / kWarpSize];
  if (src < 0 || src >= kWarpSize || (mask >> src & 1u) == 0) {
    throw SimError(where(b, &f) + ": shuffle from lane " + std::to_string(src) +
                   ", outside the mask (its value is undefined on a GPU)");
  }
  w.slot[f.linear % kWarpSize] = bits;
  sync_warp(mask);  // every lane has deposited
  const std::uint64_t got = w.slot[src];
  sync_warp(mask);  // every lane has read before any deposits again
  return got;
}

unsigned ballot(unsigned mask, bool pred) {
  unsigned out = 0;
  for (int l = 0; l < kWarpSize; ++l) {
    if ((mask >> l & 1u) == 0) continue;
    // Each lane's predicate, one exchange per lane of the mask (slow and simple).
    const std::uint64_t p = exchange(mask, pred ? 1 : 0, l);
    if (p != 0) out |= 1u << l;
  }
  return out;
}

void* shared_alloc(std::size_t bytes, std::size_t align) {
  if (g_thread != nullptr) return t_shared_alloc(bytes, align);
  Block& b = block();
  Fiber& f = *b.current;
  const std::size_t k = f.shared_calls++;
  if (k == b.shared.size()) {
    b.shared_total += bytes;
    if (b.shared_total > kMaxSharedBytes) {
      throw SimError(where(b, &f) + ": " + std::to_string(b.shared_total) +
                     " bytes of shared memory (static and dynamic) exceed 48 KiB");
    }
    // new[] aligns to alignof(std::max_align_t) (16), enough for every type kernels share.
    if (align > alignof(std::max_align_t))
      throw SimError(where(b, &f) + ": shared alignment above 16 bytes is not modelled");
    b.shared.push_back(guarded(bytes));
    b.shared_sizes.push_back(bytes);
  } else if (b.shared_sizes[k] != bytes) {
    throw SimError(where(b, &f) + ": shared allocation " + std::to_string(k) + " is " +
                   std::to_string(bytes) + " bytes here and " + std::to_string(b.shared_sizes[k]) +
                   " in another thread (declarations must not depend on the thread)");
  }
  return b.shared[k].get();
}

void* dynamic_shared() {
  if (g_thread != nullptr) return g_thread->block->dynamic.get();
  return block().dynamic.get();
}

}  // namespace kvscope::sim
