#pragma once
// How every command reads its command line (Boost.Program_options), one rule for all: each
// argument is an option (--name value or a switch), so a stray positional argument is an error,
// and an explicitly empty value (--save '') is an error too, never taken for "not given".
#include <boost/program_options.hpp>
#include <memory>
#include <set>
#include <string>

#include "tapegrad/autograd/textbook.h"
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

// --textbook, on every command that takes --threads (autograd/textbook.h): the run takes the code
// the reading path shows (the plain CPU kernels, explicit attention written with ops, one
// thread). add_textbook_option declares the switch, stored into `textbook`; open_textbook opens
// the tg::Textbook scope the command's run holds (null when the switch is off). The scope governs
// the CPU backend, so a --device cuda[:N] with it is a tg::Error.
extern const char* const kTextbookHelp;
void add_textbook_option(boost::program_options::options_description& options, bool& textbook);
std::unique_ptr<Textbook> open_textbook(bool textbook, const std::string& device = "cpu");

}  // namespace tg::cli
