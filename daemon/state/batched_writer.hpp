// Writes one private file (write_private_file: atomic, fsync'd) from a thread of its own, so that
// the thread that changes what the file holds never waits for a disk or renders the file.
// changed() only marks the file dirty; the writer renders it (the owner's `render`, called on
// the writer's thread, never under the writer's lock) and writes it. Changes made while a write
// is in progress are coalesced into the next one: a burst of N changes costs about two writes.
//
// A failed write (a full disk, say) is logged and retried every second, and at the next change:
// the newest contents are never dropped, only late.
//
// Thread safety: every member may be called from any thread; `render` must synchronize with
// whoever changes its data. The destructor writes the last change (flush), then joins.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace nexus::daemon {

class BatchedWriter {
 public:
  BatchedWriter(std::filesystem::path path, std::function<std::string()> render);
  ~BatchedWriter();
  BatchedWriter(const BatchedWriter&) = delete;
  BatchedWriter& operator=(const BatchedWriter&) = delete;

  void changed();
  // Waits until every change made before the call is on disk, or a write of it failed; true if
  // it is on disk.
  bool flush();
  std::uint64_t writes() const;  // completed writes (tests: bursts coalesce)

 private:
  void run();

  const std::filesystem::path path_;
  const std::function<std::string()> render_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t changes_ = 0;    // GUARDED_BY(mu_): changes so far
  std::uint64_t written_ = 0;    // GUARDED_BY(mu_): changes on disk
  std::uint64_t attempted_ = 0;  // GUARDED_BY(mu_): changes a write was tried for
  std::uint64_t writes_ = 0;     // GUARDED_BY(mu_)
  bool stop_ = false;            // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace nexus::daemon
