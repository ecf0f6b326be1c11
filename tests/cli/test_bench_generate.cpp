// `tapegrad bench --workload generate` (cli/bench_generate.cpp), run as a program: one JSON row per
// context with the cached and uncached figures and peak bytes. No timing assertions (the machines
// are noisy); the allocator's peaks are deterministic: the cache's bytes grow with the context
// linearly, below the uncached path's.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_support.h"
#include "tests/support/run_command.h"

namespace {

using tg::testing::run_command;

std::string tapegrad() { return std::string("'") + TAPEGRAD_BIN + "'"; }

}  // namespace

TEST_CASE("bench generate: a row per context, cached and uncached, peaks linear in the context", "[bench][generation]") {
  const auto [output, code] = run_command(tapegrad() + " bench --workload generate --max-seq 512 "
                                          "--steps 1 --warmup 0 --threads 1 --json 2>/dev/null");
  INFO(output);
  REQUIRE(code == 0);
  std::vector<nlohmann::json> rows;
  for (const std::string& line : tg::testing::lines_of(output)) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 2);
  REQUIRE(rows[0].at("context") == 128);
  REQUIRE(rows[0].at("new_tokens") == 256);  // after a 64-token prompt, past two window restarts
  REQUIRE(rows[1].at("context") == 512);
  REQUIRE(rows[1].at("new_tokens") == 448);  // the context grows to 512
  for (const nlohmann::json& row : rows) {
    REQUIRE(row.at("tokens_per_s").get<double>() > 0);
    REQUIRE(row.at("uncached_tokens_per_s").get<double>() > 0);
    REQUIRE(row.at("peak_bytes").get<int64_t>() > 0);
    REQUIRE(row.at("peak_bytes").get<int64_t>() < row.at("uncached_peak_bytes").get<int64_t>());
  }
  // 4 times the context: the cache 4 times larger, the rest the same; quadratic would be 16 times
  const double growth = rows[1].at("peak_bytes").get<double>() / rows[0].at("peak_bytes").get<double>();
  REQUIRE(growth > 1.5);
  REQUIRE(growth < 4.0);
}

TEST_CASE("bench generate: --max-seq outside [128, 2048], and flags of other workloads, exit 2", "[bench][generation]") {
  for (const std::string& flags : {std::string("--max-seq 64"), std::string("--max-seq 4096"),
                                   std::string("--int8"), std::string("--path explicit")}) {
    const auto [output, code] =
        run_command(tapegrad() + " bench --workload generate " + flags + " 2>&1 1>/dev/null");
    INFO(flags << ": " << output);
    REQUIRE(code == 2);
    REQUIRE(tg::testing::lines_of(output).size() == 1);
  }
}
