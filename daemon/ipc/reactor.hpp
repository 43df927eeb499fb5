// The daemon's I/O reactor: one thread, one epoll set, every tenant.
//
// It accepts control connections, attaches tenants (segment + doorbells passed over
// SCM_RIGHTS), drains every request ring round-robin (at most kMaxPerRound messages per tenant
// per pass, so no tenant can starve another), answers on the response rings, and detaches a
// tenant the moment its socket reports EOF.
//
// Waiting: after the last piece of work the reactor busy-polls the rings for `config.spin`
// (lowest latency), then marks every request ring "consumer sleeping", re-checks, and blocks in
// epoll_wait on the listener, the tenants' sockets and their doorbells (see schema/ring.hpp).
//
// Nothing proportional to a tenant's data or to a disk runs on the reactor: digests and the
// metrics textfile go to the IoPool (io_pool.hpp), the tenant bindings to their own writer
// (tenant_registry.hpp), and systemd's watchdog is pinged from a thread that checks the reactor
// still turns (watchdog.hpp).
//
// Thread safety: run() on one thread; request_stop() from any thread or a signal handler.
#pragma once
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/ipc/decode/reply_builder.hpp"
#include "daemon/ipc/decode/request_decoder.hpp"
#include "daemon/ipc/io_pool.hpp"
#include "daemon/ipc/service_port.hpp"
#include "daemon/ipc/regions.hpp"
#include "daemon/ipc/tenant_session.hpp"
#include "daemon/ipc/watchdog.hpp"
#include "daemon/ipc/tenant_registry.hpp"
#include "nexus/wire/nexus_generated.h"
#include "schema/control_frame.hpp"

namespace nexus::daemon {

class Reactor {
 public:
  static constexpr int kMaxPerRound = 32;

  // `services` may be null (no model service: service requests get an Internal error). A
  // tenant may have config.max_in_flight requests handed to them and unanswered: that bounds
  // its share of their queues and of the daemon's memory, whatever it floods its ring with.
  Reactor(DaemonConfig config, int listen_fd, ServicePort* services = nullptr);

  // Thread-safe: a reply produced off the reactor thread (the services' threads).
  void post_completion(std::uint64_t session_id, std::vector<std::uint8_t> reply);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  // Serves until request_stop().
  void run();
  // Async-signal-safe: for SIGTERM/SIGINT handlers (any thread may take a process signal:
  // libraries start threads before main, so blocking signals there is not enough).
  void request_stop() const;

 private:
  // Per-event work budgets: no peer keeps the reactor busy for long, whatever it sends.
  static constexpr int kFramesPerEvent = 8;           // control frames read per readiness event
  static constexpr int kReadsPerEvent = 16;           // recvmsg calls on a tenant's socket per event
  static constexpr std::size_t kMaxQueuedReplyBytes = 256 * 1024;  // per connection; beyond: closed

  struct Connection {  // accepted, not (yet) attached: attach, status, metrics, cancel, release
    std::uint64_t id;
    int fd;
    ucred peer;
    std::chrono::steady_clock::time_point accepted_at;
    schema::FrameAccumulator frames;
    // Replies the peer has not read yet (length-prefixed frames). While any wait, the connection
    // is watched for writability only: its next requests stay in its own socket buffer.
    std::deque<std::vector<std::uint8_t>> out;
    std::size_t out_bytes = 0, out_sent = 0;  // out_sent: bytes of out.front() already sent
    bool closing = false;                     // close once `out` is flushed
  };
  enum class Tag : std::uint64_t { Listener = 1, Stop, Connection, TenantSocket, Doorbell, Completion };

  // reactor.cpp: events and lifecycle; reactor_connections.cpp: accept_all, on_connection,
  // close_connection, expire_handshakes, send_control and flush_out (connections not yet attached)
  bool handle_events(int timeout_ms);  // false once a stop signal arrived
  void accept_all();
  void on_connection(std::uint64_t id, std::uint32_t events);
  void close_connection(std::uint64_t id);
  void expire_handshakes();  // closes connections that did not attach within the deadline
  void unwatch(int fd);      // removes fd from the epoll set: before every close
  // Sends a control frame without ever waiting: what the socket does not take is queued on the
  // connection (up to kMaxQueuedReplyBytes; beyond, the connection is closed).
  void send_control(Connection& c, std::span<const std::uint8_t> frame);
  bool flush_out(Connection& c);  // false: the peer is gone or over its queue cap
  void detach(std::uint64_t id, const char* why);
  void watch(int fd, Tag tag, std::uint64_t id, bool add);

  // reactor_control.cpp: attach, status, metrics and cancel on the control socket
  bool handle_control_frame(std::uint64_t id, Connection& c, std::span<const std::uint8_t> frame);
  bool attach(std::uint64_t id, Connection& c, const wire::AttachRequest& req);
  void send_status(Connection& c, double usage_since_s);
  void send_metrics(Connection& c);
  void cancel_job(Connection& c, std::uint64_t job);
  void release_tenant(Connection& c, const std::string& name);
  void drain(Connection& c);  // root or nexusd's own user: a clean stop, as SIGTERM
  void scale(Connection& c, const wire::ScaleRequest& r);  // root or nexusd's own user
  std::string metrics_text() const;
  void write_metrics_textfile();  // every config.metrics_interval, when configured
  void refuse(Connection& c, bool attach_reply, wire::ErrorCode code, const std::string& reason);

  // reactor_serve.cpp: the request rings
  bool poll_rings();
  bool serve(TenantSession& s);
  void handle_message(TenantSession& s, std::span<const std::uint8_t> message);
  void push_reply(TenantSession& s, std::span<const std::uint8_t> reply);
  void push_large_reply(TenantSession& s, std::span<const std::uint8_t> reply);
  void flush_pending(TenantSession& s);
  // Reads what the tenant's socket holds (up to kReadsPerEvent reads), keeping the descriptors
  // it carries; false at EOF.
  bool collect_offered_fds(TenantSession& s);
  // Hands a request the table routes to a service to the Master (`message`: its verified bytes).
  void submit_service_request(TenantSession& s, const DecodedRequest& req, std::span<const std::uint8_t> message,
                              int fd = -1);
  void drain_completions();
  void digest(TenantSession& s, std::uint64_t request_id, std::uint64_t offset, std::uint64_t bytes);  // on io_
  // reactor_regions.cpp: memory a tenant registers ([ipc] allow_device_regions)
  void register_region(TenantSession& s, std::uint64_t request_id, const wire::RegisterRegionRequest& req);
  void unregister_region(TenantSession& s, std::uint64_t request_id, std::uint32_t region);

  const DaemonConfig config_;
  const int listen_fd_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  int epoll_ = -1;
  int stop_fd_ = -1;  // eventfd: request_stop() rings it
  int reserve_fd_ = -1;  // /dev/null, given up to accept-and-close a connection when out of descriptors
  std::chrono::steady_clock::time_point last_emfile_log_{};
  std::chrono::steady_clock::time_point listener_paused_until_{};  // set: the listener is out of the epoll set
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Connection> connections_;
  std::map<std::uint64_t, std::unique_ptr<TenantSession>> sessions_;
  std::map<std::uint64_t, std::uint64_t> session_ids_;  // session_id -> key in sessions_
  ServicePort* const services_;
  int completion_fd_ = -1;  // eventfd: the executor rings it after queueing a completion
  std::mutex completions_mu_;
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> completions_;  // GUARDED_BY(completions_mu_)
  std::atomic<bool> completions_waiting_{false};
  bool any_broken_ = false;  // some session has broken == true: detach it after this pass
  TenantRegistry registry_;
  ReplyBuilder replies_;
  std::unique_ptr<RegionImporter> host_importer_ = host_region_importer();
  std::unique_ptr<RegionImporter> cuda_importer_ = cuda_region_importer();
  std::vector<std::uint8_t> scratch_;  // private copy of the message being decoded
  std::chrono::steady_clock::time_point next_textfile_{};
  std::shared_ptr<std::atomic<bool>> textfile_busy_ = std::make_shared<std::atomic<bool>>(false);
  std::uint64_t message_bytes_copied_ = 0;
  Watchdog watchdog_;
  std::unique_ptr<IoPool> io_;  // reset first in the destructor: its tasks post completions
};

}  // namespace nexus::daemon
