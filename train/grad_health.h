#pragma once
// Gradient health judged (`tapegrad train`): the gradient norms a run measures, turned into
// findings that name the parameters, one line each. Pure: it sees numbers, never tensors.
//
//   exploding   every step, the global gradient norm (all parameters together, unscaled, before
//               --clip) is not finite, or jumped to more than kExplodingJump (100) times the
//               previous step's, or rose above kExplodingOverFirst (1000) times the run's first
//               step's. One finding a run (a run that exploded says so once, at the first step);
//               it names the parameters with the largest gradients at that step.
//   vanishing   on --grad-stats records, a parameter's ||grad|| / ||weight|| below
//               kVanishingRatio (1e-7) on every record of a stretch of at least kVanishingSteps
//               (50) steps and kVanishingRecords (3) records. Once a parameter.
//   zero        at the end of the run: a parameter whose gradient was exactly 0 (or missing) on
//               every record.
//   by construction  a key projection's bias (a name ending in "k_proj.bias") whose gradient is
//               exactly 0 or below kVanishingRatio of its weights: a note, not a warning. Softmax
//               is unchanged by adding one constant to every score of a query row, and the key
//               bias b adds q.b to each score of row q, so its true gradient is 0; what is
//               measured is rounding. (Where the scores are no softmax over keys that each
//               carry the bias -- Performer's kernel, Linformer's projected keys -- the key bias
//               learns, and its gradient is not that small.)
//
// Why these thresholds: healthy runs of docs/cli.md's recipes keep their global norm within 6x of
// the first step's and change it by at most 6x between steps (measured: textcls, charlm,
// timeseries); 100x in one step or 1000x overall is two orders of magnitude past that. The level
// is relative to the first step, not absolute, because the scale of a gradient is the loss's: an
// unnormalised regression starts near 1e6 and trains. A ratio of 1e-7 is f32's resolution
// (epsilon 1.19e-7): SGD at a learning rate <= 1 would move such weights by less than their own
// rounding.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tg::train {

inline constexpr double kExplodingJump = 100;        // x the previous step's global norm
inline constexpr double kExplodingOverFirst = 1000;  // x the first step's global norm
inline constexpr double kVanishingRatio = 1e-7;      // ||grad|| / ||weight||
inline constexpr int64_t kVanishingSteps = 50;       // the stretch, in steps
inline constexpr int64_t kVanishingRecords = 3;      // ... and in --grad-stats records

enum class GradIssue { exploding, vanishing, zero, missing, zero_by_construction };

// One finding: what, where it was first seen, which parameters, and its text (no prefix): its
// headline ("exploding gradients at step 2"), a colon, and the details.
struct GradFinding {
  GradIssue issue = GradIssue::exploding;
  int64_t step = 0;
  std::vector<std::string> parameters;
  std::string headline, text;
  bool is_note() const { return issue == GradIssue::zero_by_construction; }
  // The line printed when it is found: "tapegrad train: warning: <text>" ("note:" for a note).
  std::string line() const;
};

// One parameter's norms: its gradient's (has_grad false: none after backward) and its weights'.
struct ParameterNorms {
  std::string name;
  bool has_grad = false;
  double grad_norm = 0, weight_norm = 0;
};

// Whether `name` is the bias of a key projection (see "by construction" above).
bool is_key_projection_bias(const std::string& name);

class GradHealthJudge {
 public:
  // The parameters' norms at this moment, measured only when a finding needs them.
  using NormsNow = std::function<std::vector<ParameterNorms>()>;

  // Each step's global norm, in order. Returns the exploding finding when this step makes it.
  std::optional<GradFinding> observe_global_norm(int64_t step, double norm,
                                                 const NormsNow& norms_now);
  // A --grad-stats record: every parameter's norms at `step`. Returns the findings it makes.
  std::vector<GradFinding> observe_record(int64_t step, const std::vector<ParameterNorms>& record);
  // The end of the run: the zero and missing findings (which need every record). Returns them;
  // a second call returns nothing.
  std::vector<GradFinding> finish();

  // Every finding of the run, in the order they were made.
  const std::vector<GradFinding>& findings() const { return findings_; }
  // The end-of-run summary: "gradient health: 1 warning, 1 note" and a line a finding (its
  // headline and the parameters it names); empty when there is none.
  std::vector<std::string> summary() const;

 private:
  // What the records said of one parameter so far.
  struct ParameterRecord {
    int64_t records = 0, zero = 0, missing = 0;
    int64_t tiny_first_step = 0, tiny_records = 0;  // the current stretch below the ratio
    double tiny_largest_ratio = 0;
    bool reported = false;  // vanishing or by construction said already
  };
  void judge_parameter(int64_t step, const ParameterNorms& norms,
                       std::vector<std::string>& vanishing, std::vector<std::string>& by_design);
  std::vector<GradFinding> record_findings(int64_t step, const std::vector<std::string>& vanishing,
                                           const std::vector<std::string>& by_design);
  GradFinding add(GradIssue issue, int64_t step, const std::vector<std::string>& parameters,
                  const std::string& headline, const std::string& detail);

  double first_norm_ = 0, previous_norm_ = 0;  // 0: none yet
  int64_t previous_step_ = 0;
  bool exploded_ = false;
  int64_t records_ = 0, last_record_step_ = 0;
  bool finished_ = false;
  std::vector<std::string> order_;                 // parameter names, first seen first
  std::map<std::string, ParameterRecord> parameters_;
  std::map<std::string, std::string> ratio_text_;  // a note on the ratio, per parameter named
  std::vector<GradFinding> findings_;
};

}  // namespace tg::train
