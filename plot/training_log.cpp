#include "tapegrad/plot/training_log.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/io/quoted_text.h"
#include "tapegrad/io/strict_numbers.h"

namespace tg::plot {

namespace {

// One line of a CSV log, its fields trimmed of spaces and tabs (the logs quote nothing).
std::vector<std::string> split_csv_line(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) {
    const size_t first = field.find_first_not_of(" \t");
    const size_t last = field.find_last_not_of(" \t");
    fields.push_back(first == std::string::npos ? "" : field.substr(first, last - first + 1));
  }
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

// The header's fields, each named once: with two "loss" columns, which one would be drawn?
void check_log_header(const std::vector<std::string>& header, const std::string& path) {
  std::map<std::string, size_t> first_field;  // name -> its first field, 0-based
  for (size_t f = 0; f < header.size(); ++f) {
    const auto [first, added] = first_field.emplace(header[f], f);
    TG_CHECK(added, "log '", path, "' line 1: fields ", first->second + 1, " and ", f + 1,
             " are both named ", quoted_text(header[f]));
  }
}

// The header's column named `name`, or -1.
int64_t column_of(const std::vector<std::string>& header, const std::string& name) {
  const auto at = std::find(header.begin(), header.end(), name);
  return at == header.end() ? -1 : at - header.begin();
}

// A cell of a log as a finite decimal number (io/strict_numbers.h), or a tg::Error naming it.
double log_number(const std::string& text, const std::string& path, int64_t line_number,
                  const char* name) {
  std::string why;
  const std::optional<double> value = train::read_finite_double(text, &why);
  if (!value) {
    fail("log '", path, "' line ", line_number, ": ", name, " ", quoted_text(text), " ", why);
  }
  return *value;
}

// The fields of the next row that is not blank, checked against the header's count; false at
// the end of the file.
bool next_row(std::istream& in, const std::vector<std::string>& header, const std::string& path,
              int64_t& line_number, std::vector<std::string>& fields) {
  std::string line;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
    fields = split_csv_line(line);
    TG_CHECK(fields.size() == header.size(), "log '", path, "' line ", line_number, ": ",
             fields.size(), " fields, the header has ", header.size());
    return true;
  }
  return false;
}

}  // namespace

std::vector<Series> read_training_log(const std::string& path, const std::string& what) {
  std::istringstream in(read_regular_file(path, what));  // a FIFO is refused, never waited on
  std::string line;
  TG_CHECK(static_cast<bool>(std::getline(in, line)), "log '", path,
           "' is empty (expected a CSV header with step and loss columns)");
  const std::vector<std::string> header = split_csv_line(line);
  check_log_header(header, path);
  const int64_t step_col = column_of(header, "step"), loss_col = column_of(header, "loss");
  const int64_t val_col = column_of(header, "val_loss");
  TG_CHECK(step_col >= 0 && loss_col >= 0, "log '", path, "' line 1: the header ",
           quoted_text(line), " has no step and loss columns (is this a training log?)");

  Series train{"train loss", {}, {}}, validation{"validation loss", {}, {}};
  int64_t line_number = 1;
  std::vector<std::string> fields;
  while (next_row(in, header, path, line_number, fields)) {
    const double step = log_number(fields[step_col], path, line_number, "step");
    train.x.push_back(step);
    train.y.push_back(log_number(fields[loss_col], path, line_number, "loss"));
    if (val_col >= 0 && !fields[val_col].empty()) {  // evaluated at this step
      validation.x.push_back(step);
      validation.y.push_back(log_number(fields[val_col], path, line_number, "val_loss"));
    }
  }
  TG_CHECK(!train.x.empty(), "log '", path, "' has a header but no rows");
  std::vector<Series> series{std::move(train)};
  if (!validation.x.empty()) series.push_back(std::move(validation));
  return series;
}

std::vector<Series> read_grad_stats(const std::string& path, const std::string& what) {
  std::istringstream in(read_regular_file(path, what));
  std::string line;
  TG_CHECK(static_cast<bool>(std::getline(in, line)), "log '", path,
           "' is empty (expected the CSV header of --grad-stats: step,name,mean_abs_grad,...)");
  const std::vector<std::string> header = split_csv_line(line);
  check_log_header(header, path);
  const int64_t step_col = column_of(header, "step"), name_col = column_of(header, "name");
  const int64_t grad_col = column_of(header, "mean_abs_grad");
  TG_CHECK(step_col >= 0 && name_col >= 0 && grad_col >= 0, "log '", path, "' line 1: the header ",
           quoted_text(line), " has no step, name and mean_abs_grad columns (is this a "
           "--grad-stats file?)");
  std::vector<Series> series;
  std::map<std::string, size_t> index_of;  // parameter name -> its series
  int64_t line_number = 1;
  std::vector<std::string> fields;
  while (next_row(in, header, path, line_number, fields)) {
    const double step = log_number(fields[step_col], path, line_number, "step");
    // An empty cell (no gradient) or NaN/inf as train/grad_stats.cpp spells them is a gap.
    const std::string& grad_text = fields[grad_col];
    const bool gap =
        grad_text.empty() || grad_text == "NaN" || grad_text == "inf" || grad_text == "-inf";
    const double grad =
        gap ? std::nan("") : log_number(grad_text, path, line_number, "mean_abs_grad");
    const auto [entry, added] = index_of.try_emplace(fields[name_col], series.size());
    if (added) series.push_back({fields[name_col], {}, {}});
    series[entry->second].x.push_back(step);
    series[entry->second].y.push_back(grad);
  }
  TG_CHECK(!series.empty(), "log '", path, "' has a header but no rows");
  return series;
}

}  // namespace tg::plot
