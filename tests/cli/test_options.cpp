// The options every command shares (cli/options.h): --threads on every command that computes,
// one definition, 0 for the cores available; a count outside [0, kMaxThreads] is one error line.
#include <string>
#include <vector>

#include "tapegrad/runtime/features.h"
#include "tests/cli/cli_support.h"

using namespace tg::testing;
using Catch::Contains;

namespace {

// A tiny charlm trained once, with its log and gradient statistics, and each command that
// computes run on it; `tag` makes each run's output files its own.
struct ThreadsFixture {
  TempDir dir;
  std::string text = dir.file("text.txt"), model = dir.file("lm.st"), log = dir.file("log.csv"),
              grads = dir.file("grads.csv");
  std::string train_args() const {
    return "train --task charlm --context 8 --dim 8 --heads 2 --batch 4 --seed 3 --warmup 0 "
           "--data " + text;
  }
  ThreadsFixture() {
    write_bytes(text, small_text());
    const CliResult trained = run_cli(train_args() + " --threads 1 --steps 2 --save " + model +
                                          " --log " + log + " --grad-stats " + grads, dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
  }
  std::vector<std::string> commands(const std::string& tag) const {
    return {
        train_args() + " --steps 1",
        "eval --load " + model + " --data " + text,
        "sample --load " + model + " --prompt the --tokens 5",
        "bench --workload textcls-small --steps 1 --warmup 0",
        "gradcheck --filter softmax",
        "plot pe --dim 4 --len 4 --out " + dir.file("pe" + tag + ".png"),
        "plot loss --log " + log + " --out " + dir.file("loss" + tag + ".png"),
        "plot grads --log " + grads + " --out " + dir.file("grads" + tag + ".png"),
        "plot attention --load " + model + " --text the --out " + dir.file("attn" + tag + ".png"),
        "analyze heads --load " + model + " --data " + text + " --samples 2",
        "quantize --load " + model + " --mode dynamic --out " + dir.file("q" + tag + ".st"),
    };
  }
};

}  // namespace

TEST_CASE("The --threads flag: every computing command takes it, 0 meaning the cores available",
          "[cli][threads]") {
  ThreadsFixture f;
  for (const char* threads : {"1", "2", "0"}) {
    for (const std::string& command : f.commands(std::string("-") + threads)) {
      const std::string line = command + " --threads " + threads;
      INFO(line);
      const CliResult result = run_cli(line, f.dir);
      INFO(result.err);
      REQUIRE(result.exit_code == 0);
    }
  }
  // Each help says what 0 means.
  for (const std::string& command : f.commands("-help")) {
    const std::string name = command.substr(0, command.find(" --"));
    INFO(name);
    const CliResult help = run_cli(name + " --help", f.dir);
    REQUIRE(help.exit_code == 0);
    REQUIRE_THAT(help.out, Contains("--threads") && Contains("0: the cores this process may use"));
  }
}

TEST_CASE("The --threads flag: a count outside [0, 1024] is one error line on every command",
          "[cli][threads]") {
  ThreadsFixture f;
  for (const std::string& command : f.commands("-bad")) {
    for (const char* threads : {"-1", "1025", "100000"}) {
      INFO(command << " --threads " << threads);
      require_one_line_error(run_cli(command + " --threads " + threads, f.dir), "--threads");
    }
  }
  REQUIRE_FALSE(std::filesystem::exists(f.dir.file("q-bad.st")));
  REQUIRE_FALSE(std::filesystem::exists(f.dir.file("pe-bad.png")));
}

TEST_CASE("info: the thread count and where it came from", "[cli][threads]") {
  TempDir dir;
  const CliResult info = run_cli("info", dir);
  REQUIRE(info.exit_code == 0);
  REQUIRE_THAT(info.out, Contains("threads:  ") && Contains("(the default: ") &&
                             Contains("in the affinity mask") && Contains("1 (OpenBLAS)"));
  REQUIRE_THAT(info.out, !Contains("OpenMP"));
}

TEST_CASE("info: which int8 kernels run, TAPEGRAD_INT8_KERNEL, and a bad value",
          "[cli][quantize]") {
  TempDir dir;
  const CliResult plain = run_cli("info", dir, "TAPEGRAD_INT8_KERNEL=plain");
  REQUIRE(plain.exit_code == 0);
  REQUIRE_THAT(plain.out,
               Contains("int8:     plain loops") && Contains("TAPEGRAD_INT8_KERNEL=plain"));
  const CliResult best = run_cli("info", dir, "env -u TAPEGRAD_INT8_KERNEL");
  REQUIRE(best.exit_code == 0);
  REQUIRE_THAT(best.out, Contains("int8:     ") && Contains("the best this CPU has"));
  const CliResult bad = run_cli("info", dir, "TAPEGRAD_INT8_KERNEL=sse");
  require_one_line_error(bad, "TAPEGRAD_INT8_KERNEL='sse': expected avx2, vnni or plain");
  REQUIRE(bad.out.empty());
}

TEST_CASE("info: which attention tile products run, TAPEGRAD_ATTENTION_TILES, and a bad value",
          "[cli][attention]") {
  TempDir dir;
  const CliResult forced = run_cli("info", dir, "TAPEGRAD_ATTENTION_TILES=avx2");
  REQUIRE(forced.exit_code == 0);
  if (tg::cpu::cpu_has_avx2_fma()) {
    REQUIRE_THAT(forced.out, Contains("tiles:    attention on AVX2 tile products") &&
                                 Contains("TAPEGRAD_ATTENTION_TILES=avx2"));
  }
  const CliResult wide = run_cli("info", dir, "TAPEGRAD_ATTENTION_TILES=avx512");
  if (tg::cpu::cpu_has_avx2_fma() && tg::cpu::cpu_has_avx512f()) {
    REQUIRE(wide.exit_code == 0);
    REQUIRE_THAT(wide.out, Contains("attention on AVX-512 tile products"));
  } else if (tg::cpu::cpu_has_avx2_fma()) {
    require_one_line_error(wide, "TAPEGRAD_ATTENTION_TILES=avx512: this CPU has no AVX-512 F");
  }
  const CliResult bad = run_cli("info", dir, "TAPEGRAD_ATTENTION_TILES=sse");
  if (tg::cpu::cpu_has_avx2_fma()) {
    require_one_line_error(bad, "TAPEGRAD_ATTENTION_TILES='sse': expected avx2 or avx512");
    REQUIRE(bad.out.empty());
  }
}

TEST_CASE("TAPEGRAD_MAX_CPU_ISA=avx2 runs what a CPU without AVX-512 runs; a bad value is one line",
          "[cli][attention]") {
  TempDir dir;
  const CliResult capped = run_cli("info", dir, "env -u TAPEGRAD_ATTENTION_TILES -u TAPEGRAD_INT8_KERNEL TAPEGRAD_MAX_CPU_ISA=avx2");
  INFO(capped.out << capped.err);
  REQUIRE(capped.exit_code == 0);
  if (tg::cpu::cpu_has_avx2_fma()) {
    // every AVX-512 choice falls back: the tiles, GELU (not named) and the int8 product
    REQUIRE_THAT(capped.out, Contains("CPU fast paths AVX2 + FMA (AVX-512 hidden: TAPEGRAD_MAX_CPU_ISA=avx2)") &&
                                 Contains("tiles:    attention on AVX2 tile products") &&
                                 !Contains("VNNI"));
  }
  const CliResult uncapped = run_cli("info", dir, "env -u TAPEGRAD_ATTENTION_TILES -u TAPEGRAD_INT8_KERNEL TAPEGRAD_MAX_CPU_ISA=avx512");
  REQUIRE(uncapped.exit_code == 0);
  if (tg::cpu::cpu_has_avx2_fma() && tg::cpu::cpu_has_avx512f()) {
    REQUIRE_THAT(uncapped.out, Contains("AVX-512 F (GELU)") && Contains("AVX-512 tile products"));
  }
  // AVX-512 asked for by name under the cap is the tiles' own error
  const CliResult both = run_cli("info", dir, "TAPEGRAD_MAX_CPU_ISA=avx2 TAPEGRAD_ATTENTION_TILES=avx512");
  if (tg::cpu::cpu_has_avx2_fma()) {
    require_one_line_error(both, "TAPEGRAD_ATTENTION_TILES=avx512: this CPU has no AVX-512 F");
  }
  // a bad value stops every command before it starts, in one line
  for (const char* command : {"info", "gradcheck --filter gelu"}) {
    const CliResult bad = run_cli(command, dir, "TAPEGRAD_MAX_CPU_ISA=sse4");
    require_one_line_error(bad, "TAPEGRAD_MAX_CPU_ISA='sse4': expected avx2 or avx512");
    REQUIRE(bad.out.empty());
  }
}
