#pragma once
// Puts a trace on disk for Profiler::export_chrome_trace (runtime/profiler.h): never half a file,
// and a file that was there stays byte for byte when the write fails.
//
// The text goes to a temporary next to the target (".<name>.tmp-XXXXXX", so the rename never
// crosses file systems), which is written whole, fsync'ed and renamed over the target; any failure
// removes the temporary. Only a regular file, or a name that does not exist yet, is replaced: a
// directory, FIFO, socket or device at the path is refused before anything is written. A symbolic
// link is followed, as a shell's `>` follows it, and stays a link.
//
// The command line's outputs go through io/file_io.h's AtomicFile, which also sweeps the
// temporaries of a process that died mid-save; runtime/ sits below io/ (docs/architecture.md) and
// writes one file in one call, so this is the short form of the same steps.
#include <string>
#include <string_view>

namespace tg {

// Replaces `path` with `text`; tg::Error starting with `what` and naming the path and the reason
// otherwise.
void write_trace_file(const std::string& path, std::string_view text, const std::string& what);

}  // namespace tg
