// The command line with --device cuda, end to end: training on the GPU and on the CPU from the same
// seed, a GPU checkpoint evaluated, sampled and resumed on either device, gradcheck, bench and info.
// (On the emulated device this runs the CLI built against the emulation; on a GPU, the real one.)
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_support.h"

namespace tg::testing {
namespace {

std::string repeated_text() {
  std::string text;
  for (int i = 0; i < 30; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  return text;
}

nlohmann::json last_json_line(const CliResult& result) {
  INFO("stderr: " << result.err << "stdout: " << result.out);
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(lines_of(result.out).back());
}

}  // namespace

TEST_CASE("cuda cli: train, eval, sample and resume across devices", "[cuda][cli]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), repeated_text());
  const std::string train = "train --task charlm --data " + dir.file("text.txt") +
                            " --context 16 --dim 16 --heads 2 --layers 1 --batch 4 --steps 6"
                            " --dropout 0.1 --seed 5 --threads 1 --json";
  const nlohmann::json on_gpu = last_json_line(run_cli(train + " --device cuda --save " + dir.file("gpu.st"), dir));
  const nlohmann::json on_cpu = last_json_line(run_cli(train + " --save " + dir.file("cpu.st"), dir));
  const double gpu_loss = on_gpu["train_loss"], cpu_loss = on_cpu["train_loss"];
  REQUIRE(std::abs(gpu_loss - cpu_loss) <= 1e-3 * std::abs(cpu_loss));  // same seed, same dropout

  // The GPU checkpoint, evaluated on the CPU (the default) and on the GPU.
  const std::string eval = "eval --json --load " + dir.file("gpu.st") + " --data " + dir.file("text.txt");
  const double eval_cpu = last_json_line(run_cli(eval, dir))["loss"];
  const double eval_gpu = last_json_line(run_cli(eval + " --device cuda", dir))["loss"];
  REQUIRE(std::abs(eval_cpu - eval_gpu) <= 1e-4 * std::abs(eval_cpu));

  const CliResult sampled = run_cli("sample --load " + dir.file("gpu.st") +
                                    " --prompt 'the ' --tokens 12 --device cuda", dir);
  INFO(sampled.err);
  REQUIRE(sampled.exit_code == 0);
  REQUIRE(sampled.out.rfind("the ", 0) == 0);

  // A run started on the GPU continues on the CPU, and the other way round.
  REQUIRE(run_cli("train --resume " + dir.file("gpu.st") + " --steps 8 --save " + dir.file("r1.st"), dir).exit_code == 0);
  REQUIRE(run_cli("train --resume " + dir.file("cpu.st") + " --steps 8 --device cuda --save " +
                  dir.file("r2.st"), dir).exit_code == 0);
}

TEST_CASE("cuda cli: gradcheck, bench and info on the device", "[cuda][cli]") {
  TempDir dir;
  const nlohmann::json checks = last_json_line(run_cli("gradcheck --device cuda --filter matmul --json", dir));
  REQUIRE(checks["device"] == "cuda:0");
  REQUIRE(checks["passed"] == true);
  REQUIRE(checks["checks"].size() > 0);

  const nlohmann::json bench = last_json_line(
      run_cli("bench --workload textcls-small --device cuda --steps 2 --warmup 1 --json", dir));
  REQUIRE(bench["device"] == "cuda:0");
  REQUIRE(bench["peak_bytes"].get<int64_t>() > 0);  // the GPU's allocator counters

  const CliResult info = run_cli("info", dir);
  REQUIRE(info.exit_code == 0);
  REQUIRE_THAT(info.out, Catch::Contains("cuda:0  ") && Catch::Contains("compute capability"));
}

}  // namespace tg::testing

namespace tg::testing {

TEST_CASE("cuda cli: a trace on the device has a kernels track with every op", "[cuda][cli][trace]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), "the quick brown fox jumps over the lazy dog. the end. ");
  const CliResult result = run_cli("train --task charlm --data " + dir.file("text.txt") +
                                   " --context 8 --dim 8 --heads 2 --layers 1 --batch 2 --steps 2"
                                   " --device cuda --threads 1 --profile-trace " + dir.file("t.json"), dir);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const nlohmann::json trace = nlohmann::json::parse(read_bytes(dir.file("t.json")));
  int64_t host_ops = 0, device_ops = 0;
  bool device_track_named = false;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["tid"] == 2) device_track_named = event["args"]["name"] == "kernels on cuda:0";
    if (event["ph"] != "X") continue;
    if (event["cat"] == "kernel") {
      ++device_ops;
      REQUIRE(event["tid"] == 2);
    } else if (event["cat"] == "forward" || (event["cat"] == "backward" && event["name"] != "backward()")) {
      ++host_ops;
    }
  }
  REQUIRE(device_track_named);
  REQUIRE(host_ops > 0);
  REQUIRE(device_ops == host_ops);  // every op and backward node, once more on the device's track
  REQUIRE(std::string(trace["metadata"]["device"]) == "cuda:0");
}

}  // namespace tg::testing
