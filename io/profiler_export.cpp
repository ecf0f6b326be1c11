// Profiler::export_chrome_trace, defined here beside the atomic file writes it uses rather than
// in runtime/profiler.cpp: runtime/ sits below io/ and may not include it, and a second copy of
// the temporary-file-and-rename dance would be one more place for it to go wrong.
#include "tapegrad/autograd/error.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/runtime/profiler.h"
#include "tapegrad/runtime/trace.h"

namespace tg {

void Profiler::export_chrome_trace(const std::string& path) const {
  TG_CHECK(trace_ != nullptr, "Profiler::export_chrome_trace: '", path, "' not written: this Profiler "
           "records no trace (made without ProfilerOptions, or with record_trace = false)");
  write_file_atomically(path, trace_->trace_json(), "Profiler::export_chrome_trace");
}

}  // namespace tg
