// StableVector: an append-only array whose elements never move once written. When it grows it
// copies into a larger buffer and keeps the old one alive, so a span handed out earlier stays
// valid (and unchanged) for the vector's whole lifetime. Memory overhead is at most 2x.
// Not synchronized by itself: the Timeline guards size/pointer publication with its mutex.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace kvscope {

template <typename T>
class StableVector {
 public:
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  std::span<const T> span() const { return {data_.get(), size_}; }
  std::span<const T> span(std::size_t first, std::size_t last) const {
    return {data_.get() + first, last - first};
  }

  void push_back(const T& value) {
    if (size_ == capacity_) grow();
    data_[size_] = value;
    ++size_;
  }

  void reserve(std::size_t n) {
    if (n > capacity_) grow_to(n);
  }

 private:
  void grow() { grow_to(std::max<std::size_t>(1024, capacity_ * 2)); }
  void grow_to(std::size_t n) {
    auto next = std::make_unique<T[]>(n);
    std::copy(data_.get(), data_.get() + size_, next.get());
    if (data_) retired_.push_back(std::move(data_));  // earlier spans still point here
    data_ = std::move(next);
    capacity_ = n;
  }
  std::unique_ptr<T[]> data_;                  // [capacity_], elements [0, size_) are final
  std::vector<std::unique_ptr<T[]>> retired_;  // older buffers, kept alive for readers' spans
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace kvscope
