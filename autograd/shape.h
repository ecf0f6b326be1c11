#pragma once
// Shape: a tensor's dims, or its strides. It reads as a std::vector<int64_t> (size, [], begin/end,
// push_back, insert, erase, ==), and it converts to and from one, but it keeps its at most
// kMaxRank entries inline: making a tensor, or a view of one, allocates its shape and strides
// nowhere. With std::vector every view took three heap blocks (the impl, its shape, its strides)
// and every shape copy one more, which was about 1,500 mallocs a generated token, a sixth of its
// time at a 512-position context (docs/design-notes.md).
//
// A shape of more than kMaxRank dims is a tg::Error here, so no tensor can have one.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <vector>

namespace tg {

// The most dims a tensor may have, so that a shape read from a file cannot make per-dim work
// unbounded.
inline constexpr size_t kMaxRank = 16;

[[noreturn]] void throw_rank_error(size_t rank);  // "a shape of 17 dims: a tensor has at most 16"

class Shape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Shape() = default;
  Shape(const Shape& other) : rank_(other.rank_) { std::copy_n(other.dims_.begin(), rank_, dims_.begin()); }
  Shape& operator=(const Shape& other) {
    rank_ = other.rank_;
    std::copy_n(other.dims_.begin(), rank_, dims_.begin());
    return *this;
  }
  Shape(std::initializer_list<int64_t> dims) : Shape(dims.begin(), dims.end()) {}
  explicit Shape(size_t count, int64_t value = 0) { resize(count, value); }
  template <std::input_iterator It>
  Shape(It first, It last) { assign(first, last); }
  Shape(const std::vector<int64_t>& dims) : Shape(dims.begin(), dims.end()) {}  // NOLINT: implicit
  operator std::vector<int64_t>() const { return {begin(), end()}; }            // NOLINT: implicit

  size_t size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  int64_t* data() { return dims_.data(); }
  const int64_t* data() const { return dims_.data(); }
  int64_t& operator[](size_t i) { return dims_[i]; }
  const int64_t& operator[](size_t i) const { return dims_[i]; }
  int64_t& front() { return dims_[0]; }
  const int64_t& front() const { return dims_[0]; }
  int64_t& back() { return dims_[rank_ - 1]; }
  const int64_t& back() const { return dims_[rank_ - 1]; }

  iterator begin() { return data(); }
  iterator end() { return data() + rank_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + rank_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  void push_back(int64_t dim) {
    if (rank_ == kMaxRank) throw_rank_error(rank_ + 1);
    dims_[rank_++] = dim;
  }
  void pop_back() { --rank_; }
  void clear() { rank_ = 0; }
  void resize(size_t count, int64_t value = 0) {
    if (count > kMaxRank) throw_rank_error(count);
    for (size_t i = rank_; i < count; ++i) dims_[i] = value;
    rank_ = count;
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    clear();
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  iterator insert(const_iterator position, int64_t dim) { return insert(position, &dim, &dim + 1); }
  template <std::input_iterator It>
  iterator insert(const_iterator position, It first, It last) {  // appended (checked), then rotated
    const size_t at = static_cast<size_t>(position - begin()), old_rank = rank_;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
    std::rotate(begin() + at, begin() + old_rank, end());
    return begin() + at;
  }
  iterator insert(const_iterator position, std::initializer_list<int64_t> dims) {
    return insert(position, dims.begin(), dims.end());
  }
  iterator erase(const_iterator position) { return erase(position, position + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - begin()), count = static_cast<size_t>(last - first);
    std::copy(begin() + at + count, end(), begin() + at);
    rank_ -= count;
    return begin() + at;
  }

  friend bool operator==(const Shape& a, const Shape& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend auto operator<=>(const Shape& a, const Shape& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  std::array<int64_t, kMaxRank> dims_;  // the first rank_ are the shape's; the rest never read
  size_t rank_ = 0;
};

}  // namespace tg
