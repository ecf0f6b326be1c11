#pragma once
// How every command reads its command line (Boost.Program_options), one rule for all: each
// argument is an option (--name value or a switch), so a stray positional argument is an error,
// and an explicitly empty value (--save '') is an error too, never taken for "not given".
#include <boost/program_options.hpp>
#include <set>
#include <string>

#include "tapegrad/cli/cli.h"

namespace tg::cli {

// Parses and stores `args` against `options`. A positional argument or an empty string value is a
// tg::Error naming it; unless --help was given, po::notify then runs (required options, the
// values written to their variables).
boost::program_options::variables_map parse_command_line(
    const Args& args, const boost::program_options::options_description& options);

// The options typed on the command line (not those only defaulted), without the dashes.
std::set<std::string> given_options(const boost::program_options::variables_map& vm);

// --threads, as every command that computes reads it (the thread policy: runtime/threads.h):
// the help line, which says what 0 means, and the option itself, stored into `threads`.
extern const char* const kThreadsHelp;
void add_threads_option(boost::program_options::options_description& options, int& threads);
// Checks a --threads value (a tg::Error naming the flag outside [0, kMaxThreads]) and sets the
// thread count to it.
void use_threads_option(int threads);

}  // namespace tg::cli
