#pragma once
// The CSV logs that training writes, read back as line-chart series (plot/png.h's Series): the
// training log of `tapegrad train --log` (one row a step: step,epoch,loss,lr,ms,val_loss,...,
// train/trainer.cpp writes it) and the gradient sizes of `--grad-stats` (one row a parameter a
// step: step,name,mean_abs_grad,..., train/grad_stats.h). `tapegrad plot loss` and `plot grads`
// draw them, and so can a program of its own (plot/plot.h's loss_curves).
//
// The reading is strict: a header that names a column twice, a row with more or fewer fields than
// the header, or a cell that is not a finite decimal number (io/strict_numbers.h) is a tg::Error
// naming the file, the line and the cell. Blank lines are skipped. The file must be a regular
// file (a FIFO is refused, never waited on); `what` starts the message when it is not
// ("--log: 'runs/fifo' is a FIFO, not a regular file").
#include <string>
#include <vector>

#include "tapegrad/plot/png.h"

namespace tg::plot {

// The training loss at every row ("train loss") and, when any row has a val_loss cell that is not
// empty, the validation loss at those rows ("validation loss"), both against step. The header
// must name step and loss; other columns are ignored.
std::vector<Series> read_training_log(const std::string& path,
                                      const std::string& what = "read_training_log");

// mean |grad| of each parameter against step, one series a parameter name, in the order the file
// first names them. An empty cell (no gradient that step) and NaN, inf and -inf, as
// train/grad_stats.cpp spells them, are NaN: a gap in the line.
std::vector<Series> read_grad_stats(const std::string& path,
                                    const std::string& what = "read_grad_stats");

}  // namespace tg::plot
