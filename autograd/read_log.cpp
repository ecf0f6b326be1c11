// ReadLog: the storages a stretch of code read, for checkpoint's in-place check.
#include "tapegrad/autograd/read_log.h"

#include "tapegrad/autograd/error.h"

namespace tg {
namespace {
thread_local ReadLog* open_log = nullptr;  // the innermost log open on this thread
}

void note_reads(const Tensor* first, const Tensor* last) {
  if (open_log == nullptr) return;  // the common case: nobody is logging
  for (const Tensor* t = first; t != last; ++t) {
    if (t->defined()) open_log->note(*t);
  }
}

ReadLog::ReadLog() : outer_(open_log) { open_log = this; }

ReadLog::~ReadLog() {
  if (open_) detach_from_thread();
}

void ReadLog::detach_from_thread() {
  open_log = outer_;  // logs are scopes: the innermost closes first
  open_ = false;
}

void ReadLog::note(const Tensor& t) {
  const std::shared_ptr<Storage>& storage = t.storage();
  auto [entry, inserted] = index_.try_emplace(storage.get(), reads_.size());
  if (inserted) reads_.push_back({storage, t.shape(), 0});
  else if (reads_[entry->second].storage.expired()) reads_[entry->second] = {storage, t.shape(), 0};
  if (outer_) outer_->note(t);
}

std::vector<StorageRead> ReadLog::close() {
  if (open_) detach_from_thread();
  std::vector<StorageRead> alive;
  for (StorageRead& read : reads_) {
    const std::shared_ptr<Storage> storage = read.storage.lock();
    if (!storage) continue;  // a temporary of the stretch
    read.version = storage->version();
    alive.push_back(std::move(read));
  }
  reads_.clear();
  index_.clear();
  return alive;
}

void check_reads_unchanged(const std::vector<StorageRead>& reads, const char* op) {
  for (const StorageRead& read : reads) {
    const std::shared_ptr<Storage> storage = read.storage.lock();
    if (!storage || storage->version() == read.version) continue;
    fail("backward: one of the variables needed for gradient computation has been modified by "
         "an in-place operation: '", op, "' read a tensor of shape ", shape_str(read.shape),
         " at version ", read.version, ", now version ", storage->version());
  }
}

}  // namespace tg
