// plot/training_log.h: the training log and the --grad-stats log read back as series, the values
// against the text written here, and one tg::Error naming the file, the line and the cell (or the
// caller's `what` for a file that cannot be read). `tapegrad plot loss` and `plot grads` read them
// through the binary in tests/plot/test_plot.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tapegrad/plot/training_log.h"
#include "tests/support/temp_files.h"

using Catch::Matchers::Contains;

TEST_CASE("read_training_log: loss at every row, val_loss where evaluated, blank lines skipped",
          "[plot][training_log]") {
  tg::testing::TempDir dir;
  const std::string path = dir.file("log.csv");
  tg::testing::write_bytes(path,
                           "step,epoch,loss,lr,ms,val_loss,val_accuracy,loss_scale,skipped\r\n"
                           "1,0,2.5,0.01,3.0,,,1,0\n"
                           "\n"
                           "2,0,2.25,0.01,3.1,2.4,,1,0\n"
                           "3,0,1e-1,0.01,3.2,,,1,0\n");
  const std::vector<tg::plot::Series> series = tg::plot::read_training_log(path);
  REQUIRE(series.size() == 2);
  CHECK(series[0].name == "train loss");
  CHECK(series[0].x == std::vector<double>{1, 2, 3});
  CHECK(series[0].y == std::vector<double>{2.5, 2.25, 0.1});
  CHECK(series[1].name == "validation loss");
  CHECK(series[1].x == std::vector<double>{2});
  CHECK(series[1].y == std::vector<double>{2.4});

  // Without any evaluation, one series.
  tg::testing::write_bytes(path, "step,loss\n1,3\n2,2\n");
  CHECK(tg::plot::read_training_log(path).size() == 1);
}

TEST_CASE("read_training_log and read_grad_stats name the file, the line and the cell they refuse",
          "[plot][training_log]") {
  tg::testing::TempDir dir;
  const std::string path = dir.file("log.csv");
  tg::testing::write_bytes(path, "step,loss\n1,2\n2,oops\n");
  CHECK_THROWS_WITH(tg::plot::read_training_log(path),
                    Contains("log '" + path + "' line 3: loss 'oops'"));
  tg::testing::write_bytes(path, "step,loss\n1,2,3\n");
  CHECK_THROWS_WITH(tg::plot::read_training_log(path),
                    Contains("line 2: 3 fields, the header has 2"));
  tg::testing::write_bytes(path, "step,value\n1,2\n");
  CHECK_THROWS_WITH(tg::plot::read_training_log(path), Contains("has no step and loss columns"));
  tg::testing::write_bytes(path, "step,name,mean_abs_grad\n");
  CHECK_THROWS_WITH(tg::plot::read_grad_stats(path), Contains("has a header but no rows"));
  // A file that cannot be read: the caller's `what` starts the message.
  CHECK_THROWS_WITH(tg::plot::read_training_log(dir.file("missing.csv")),
                    Contains("read_training_log") && Contains("missing.csv"));
  CHECK_THROWS_WITH(tg::plot::read_grad_stats(dir.path.string(), "--log"),
                    Contains("--log") && Contains("directory"));
}

TEST_CASE("read_grad_stats: one series a parameter, empty and non-finite cells as gaps",
          "[plot][training_log]") {
  tg::testing::TempDir dir;
  const std::string path = dir.file("grads.csv");
  tg::testing::write_bytes(path,
                           "step,name,mean_abs_grad,grad_norm\n"
                           "1,w,0.5,1\n"
                           "1,b,0.25,1\n"
                           "2,w,NaN,1\n"
                           "2,b,,1\n"
                           "3,w,inf,1\n"
                           "3,b,0.125,1\n");
  const std::vector<tg::plot::Series> series = tg::plot::read_grad_stats(path);
  REQUIRE(series.size() == 2);
  CHECK(series[0].name == "w");
  CHECK(series[1].name == "b");
  CHECK(series[0].x == std::vector<double>{1, 2, 3});
  CHECK(series[0].y[0] == 0.5);
  CHECK(std::isnan(series[0].y[1]));
  CHECK(std::isnan(series[0].y[2]));
  CHECK(series[1].y[0] == 0.25);
  CHECK(std::isnan(series[1].y[1]));
  CHECK(series[1].y[2] == 0.125);
}
