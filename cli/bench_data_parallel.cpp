#include "tapegrad/cli/bench_data_parallel.h"

#include <algorithm>
#include <cstdio>

#include "tapegrad/distributed/communicator.h"

namespace tg::train {

BenchDataParallel::BenchDataParallel(const std::vector<Tensor>& params) {
  if (!dist::launched_by_mpi() || params.empty()) return;
  dist::Communicator& comm = dist::world();
  if (comm.size() > 1) sync_ = std::make_unique<dist::GradientSync>(comm, params);
}

int BenchDataParallel::rank() const { return active() ? dist::world().rank() : 0; }

std::function<void()> BenchDataParallel::step_beginner() {
  if (!active()) return nullptr;
  return [this] { sync_->begin_step(); };
}

std::function<void()> BenchDataParallel::reducer() {
  if (!active()) return nullptr;
  return [this] { sync_->average(); };
}

void BenchDataParallel::start_timing() {
  if (active()) at_start_ = sync_->stats();
}

nlohmann::json BenchDataParallel::finish_timing(int steps, double ms_per_step, double tokens_per_step) {
  if (!active()) return {};
  dist::Communicator& comm = dist::world();
  const int ranks = comm.size();
  const dist::SyncStats& now = sync_->stats();
  const double comm_ms = (now.seconds - at_start_.seconds) * 1e3 / steps;  // per step
  const double exposed_ms = (now.exposed_seconds - at_start_.exposed_seconds) * 1e3 / steps;
  const double bytes = static_cast<double>(now.bytes - at_start_.bytes) / steps;
  // Each rank fills its own slot; the sum gathers every rank's figures on every rank.
  std::vector<double> tokens(ranks, 0.0), comm_ms_of(ranks, 0.0), step_ms(ranks, 0.0), exposed_of(ranks, 0.0);
  exposed_of[comm.rank()] = exposed_ms;
  tokens[comm.rank()] = tokens_per_step / (ms_per_step / 1e3);
  comm_ms_of[comm.rank()] = comm_ms;
  step_ms[comm.rank()] = ms_per_step;
  for (std::vector<double>* values : {&tokens, &comm_ms_of, &step_ms, &exposed_of}) {
    comm.allreduce(values->data(), ranks, dist::Reduce::sum);
  }
  double aggregate = 0;
  for (const double t : tokens) aggregate += t;
  const auto mean = [&](const std::vector<double>& values) {
    double sum = 0;
    for (const double v : values) sum += v;
    return sum / ranks;
  };
  const double mean_comm_ms = mean(comm_ms_of), mean_exposed_ms = mean(exposed_of);
  const double slowest_ms = *std::max_element(step_ms.begin(), step_ms.end());
  return {{"ranks", ranks},
          {"communicator", comm.name()},
          {"rank_tokens_per_s", tokens},
          {"rank_ms_per_step", step_ms},
          {"aggregate_tokens_per_s", aggregate},
          {"allreduce_ms_per_step", mean_comm_ms},
          {"allreduce_fraction", mean_comm_ms / slowest_ms},
          {"allreduce_after_backward_ms_per_step", mean_exposed_ms},
          {"allreduce_bytes_per_step", bytes},
          {"allreduce_mb_per_s", mean_comm_ms > 0 ? bytes / (mean_comm_ms / 1e3) / 1e6 : 0.0}};
}

void BenchDataParallel::print(const nlohmann::json& report) {
  if (report.empty()) return;
  std::printf("ranks        %d (%s), each its own batch of the workload (weak scaling)\n",
              report["ranks"].get<int>(), report["communicator"].get<std::string>().c_str());
  const auto tokens = report["rank_tokens_per_s"].get<std::vector<double>>();
  const auto step_ms = report["rank_ms_per_step"].get<std::vector<double>>();
  for (size_t r = 0; r < tokens.size(); ++r) {
    std::printf("  rank %zu     %.0f tokens/s (%.3f ms/step)\n", r, tokens[r], step_ms[r]);
  }
  std::printf("aggregate    %.0f tokens/s\n", report["aggregate_tokens_per_s"].get<double>());
  std::printf("allreduce    %.3f ms/step in communication (%.0f%% of the step), %.3f ms of it after "
              "backward; %.2f MB per rank per step, %.0f MB/s\n",
              report["allreduce_ms_per_step"].get<double>(), 100 * report["allreduce_fraction"].get<double>(),
              report["allreduce_after_backward_ms_per_step"].get<double>(),
              report["allreduce_bytes_per_step"].get<double>() / 1e6, report["allreduce_mb_per_s"].get<double>());
}

}  // namespace tg::train
