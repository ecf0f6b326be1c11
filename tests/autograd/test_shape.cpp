// Shape (autograd/shape.h): the std::vector<int64_t> operations it offers give what the vector
// gives, entry for entry, and it refuses a 17th dim with tg::Error instead of writing past its
// inline array.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/shape.h"

using tg::Shape;

namespace {

std::vector<int64_t> as_vector(const Shape& shape) { return {shape.begin(), shape.end()}; }

}  // namespace

TEST_CASE("Shape: each vector operation gives what std::vector<int64_t> gives", "[shape]") {
  std::vector<int64_t> vector{2, 3, 5};
  Shape shape{2, 3, 5};
  REQUIRE(as_vector(shape) == vector);
  REQUIRE(shape.size() == 3);
  REQUIRE(shape.front() == 2);
  REQUIRE(shape.back() == 5);

  vector.insert(vector.begin() + 1, 7), shape.insert(shape.begin() + 1, 7);
  REQUIRE(as_vector(shape) == vector);  // 2 7 3 5
  vector.insert(vector.end(), {11, 13}), shape.insert(shape.end(), {11, 13});
  REQUIRE(as_vector(shape) == vector);
  vector.insert(vector.begin(), vector.begin() + 2, vector.begin() + 4);
  const Shape middle(shape.begin() + 2, shape.begin() + 4);
  shape.insert(shape.begin(), middle.begin(), middle.end());
  REQUIRE(as_vector(shape) == vector);  // 3 5 2 7 3 5 11 13
  vector.erase(vector.begin() + 2), shape.erase(shape.begin() + 2);
  REQUIRE(as_vector(shape) == vector);
  vector.erase(vector.begin() + 1, vector.begin() + 4), shape.erase(shape.begin() + 1, shape.begin() + 4);
  REQUIRE(as_vector(shape) == vector);
  vector.push_back(17), shape.push_back(17);
  vector.pop_back(), vector.pop_back(), shape.pop_back(), shape.pop_back();
  REQUIRE(as_vector(shape) == vector);
  vector.resize(6, 4), shape.resize(6, 4);
  REQUIRE(as_vector(shape) == vector);
  vector.resize(2), shape.resize(2);
  REQUIRE(as_vector(shape) == vector);
  vector.assign({9, 8, 7}), shape.assign(vector.begin(), vector.end());
  REQUIRE(as_vector(shape) == vector);
  REQUIRE(std::vector<int64_t>(shape.rbegin(), shape.rend()) == std::vector<int64_t>{7, 8, 9});

  // Copies and conversions both ways; comparisons as the vector's.
  const Shape copy = shape;
  REQUIRE(copy == shape);
  REQUIRE(static_cast<std::vector<int64_t>>(copy) == vector);
  REQUIRE(Shape(vector) == shape);
  REQUIRE(Shape(3, 1) == Shape{1, 1, 1});
  REQUIRE(Shape{1, 2} < Shape{1, 3});
  REQUIRE(Shape{1, 2} < Shape{1, 2, 0});
  REQUIRE(Shape{} < Shape{0});
  REQUIRE_FALSE(Shape{2} == Shape{2, 1});
  shape.clear();
  REQUIRE(shape.empty());
  REQUIRE(Shape() == shape);
}

TEST_CASE("Shape: a 17th dim is a tg::Error, whichever way it comes", "[shape][error]") {
  Shape full(tg::kMaxRank, 1);
  REQUIRE(full.size() == tg::kMaxRank);
  REQUIRE_THROWS_AS(full.push_back(1), tg::Error);
  REQUIRE_THROWS_WITH(full.insert(full.begin(), 1), Catch::Contains("17 dims"));
  REQUIRE(full.size() == tg::kMaxRank);  // a refused dim leaves the shape as it was
  REQUIRE_THROWS_AS(Shape(tg::kMaxRank + 1, 0), tg::Error);
  REQUIRE_THROWS_AS(Shape(std::vector<int64_t>(100, 1)), tg::Error);
  Shape empty_shape;
  REQUIRE_THROWS_AS(empty_shape.resize(tg::kMaxRank + 1), tg::Error);
  const std::vector<int64_t> many(40, 2);
  REQUIRE_THROWS_WITH(empty_shape.assign(many.begin(), many.end()), Catch::Contains("17 dims"));
}
