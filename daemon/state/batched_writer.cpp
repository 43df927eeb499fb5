#include "daemon/state/batched_writer.hpp"

#include "daemon/log/log_text.hpp"
#include "daemon/state/private_files.hpp"

namespace nexus::daemon {

BatchedWriter::BatchedWriter(std::filesystem::path path, std::function<std::string()> render)
    : path_(std::move(path)), render_(std::move(render)), thread_([this] { run(); }) {}

BatchedWriter::~BatchedWriter() {
  flush();
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchedWriter::changed() {
  {
    std::lock_guard lk(mu_);
    ++changes_;
  }
  cv_.notify_all();
}

bool BatchedWriter::flush() {
  std::unique_lock lk(mu_);
  const auto target = changes_;
  cv_.wait(lk, [&] { return attempted_ >= target || stop_; });
  return written_ >= target;
}

std::uint64_t BatchedWriter::writes() const {
  std::lock_guard lk(mu_);
  return writes_;
}

void BatchedWriter::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    // Wakes for a change, and every second while a failed write waits for its retry.
    cv_.wait_for(lk, std::chrono::seconds(1), [&] { return changes_ > attempted_ || stop_; });
    const bool pending = changes_ > written_;
    if (!pending) {
      if (stop_) return;
      continue;
    }
    const auto generation = changes_;
    lk.unlock();
    std::string error;
    try {
      write_private_file(path_, render_());  // renders what holds now: every change up to `generation`
    } catch (const std::exception& e) {
      error = e.what();
    }
    lk.lock();
    attempted_ = std::max(attempted_, generation);
    if (error.empty()) {
      written_ = std::max(written_, generation);
      ++writes_;
    } else {
      log_text(LogLevel::Error, "state_write_failed", "path=" + path_.string() + " reason=\"" + error + "\"");
    }
    cv_.notify_all();
    if (stop_ && changes_ <= attempted_) return;
  }
}

}  // namespace nexus::daemon
