// The textbook switch of autograd/textbook.h: a count of open scopes. The kernels and modules
// that have a fast twin ask textbook_mode() where they choose (runtime/features.cpp,
// runtime/thread_pool.cpp, cpu/fast/blas.cpp, cpu/fast/attention.cpp, nn/attention.cpp).
#include "tapegrad/autograd/textbook.h"

#include <atomic>

namespace tg {
namespace {
std::atomic<int> open_textbooks{0};  // Textbook objects alive, on every thread
}  // namespace

bool textbook_mode() { return open_textbooks.load(std::memory_order_relaxed) > 0; }

Textbook::Textbook() { open_textbooks.fetch_add(1); }
Textbook::~Textbook() { open_textbooks.fetch_sub(1); }

}  // namespace tg
