#pragma once
// The tapegrad subcommands. Each takes its own arguments (after the subcommand name) and
// returns the process exit code; bad input throws tg::Error (main prints it and exits 2).
#include <string>
#include <vector>

#include "tapegrad/autograd/gradcheck.h"

namespace tg::cli {

using Args = std::vector<std::string>;

int info(const Args& args);
int analyze(const Args& args);         // `tapegrad analyze heads`
int gradcheck(const Args& args);
int plot(const Args& args);
int plot_attention(const Args& args);  // `tapegrad plot attention`
int plot_tape(const Args& args);       // `tapegrad plot tape`
int bench(const Args& args);
int train(const Args& args);
int eval(const Args& args);
int sample(const Args& args);
int quantize(const Args& args);
int export_weights(const Args& args);  // `tapegrad export` (export is a C++ keyword)

// The version, as CMake's project() states it.
const char* version();

// Every case of the gradcheck registry (ops, then nn).
std::vector<GradcheckCase> all_gradcheck_cases();

}  // namespace tg::cli
