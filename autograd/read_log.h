#pragma once
// ReadLog: which storages a stretch of code read, and their versions when it ended. What
// checkpoint (autograd/checkpoint.h) needs to notice an in-place write between its forward and
// its backward to a tensor its fn captured (a module's weight), which no tape node saved: fn ran
// under no_grad.
//
// How it sees the reads: every op hands its inputs to record() -- also under no_grad, where
// record() just returns -- and record() asks any_requires_grad() about them first (tape.h). That
// one function notes each input's storage in the log open on the thread. So no op changes, and a
// thread without an open log pays one thread_local pointer test per op.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

// One storage an op read, with the shape it was read as (for the error message) and its version.
struct StorageRead {
  std::weak_ptr<Storage> storage;  // weak: the log keeps nothing alive
  Shape shape;
  uint64_t version = 0;
};

// Notes each defined tensor of [first, last) in the log open on this thread, if any: what
// any_requires_grad() calls with every op's inputs (tape.cpp).
void note_reads(const Tensor* first, const Tensor* last);

// tg::Error, as backward()'s for a saved tensor (tape.h), if a storage read has been written since
// (its version moved on): "'<op>' read a tensor of shape [..] at version N, now version M". A
// storage that no longer exists is skipped: nothing can read it again.
void check_reads_unchanged(const std::vector<StorageRead>& reads, const char* op);

// Open from construction to close() on this thread. Logs nest: while one is open inside another,
// a read is noted in both.
class ReadLog {
 public:
  ReadLog();
  ~ReadLog();  // closes the log if close() was not called (an exception inside the stretch)
  ReadLog(const ReadLog&) = delete;
  ReadLog& operator=(const ReadLog&) = delete;

  // Closes the log and returns the storages read that are still alive -- the ones that existed
  // before the stretch or outlive it; its own temporaries are gone -- each at its version now,
  // so that in-place writes the stretch made itself count as before, not since.
  std::vector<StorageRead> close();

  void note(const Tensor& t);

 private:
  void detach_from_thread();

  std::vector<StorageRead> reads_;
  // Where each storage's entry is, by address: an address is reused only after its storage died,
  // and then the entry's weak_ptr has expired (note() takes the new storage in its place).
  std::unordered_map<const Storage*, size_t> index_;
  ReadLog* outer_;
  bool open_ = true;
};

}  // namespace tg
