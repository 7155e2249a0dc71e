// std::vector storage aligned to a 64-byte cache line. The CPU kernels load 32-byte vectors from
// activation rows; malloc's 16-byte alignment lets half of those loads straddle two cache lines,
// and whether they do changed with the allocation (measured: 16 sequences of SmolLM2's shape ran
// a decode step in 74 or 110 ms depending on where the buffers landed).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace kvscope {

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};

  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>& /*other*/) noexcept {}  // NOLINT: rebinding

  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t /*n*/) noexcept { ::operator delete(p, kAlign); }

  template <class U>
  bool operator==(const CacheLineAllocator<U>& /*other*/) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace kvscope
