// A tenant's shared-memory segment, daemon side: an anonymous memfd (no name in /dev/shm, so
// only holders of the fd can reach it), sealed against resizing so that the tenant cannot make
// our mapping fault (SIGBUS) by truncating it, and mapped once.
//
// Thread safety: immutable after create(); the mapped bytes are shared with a hostile peer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "schema/segment_layout.hpp"

namespace nexus::daemon {

class TenantSegment {
 public:
  // nullptr and *error set on failure (out of memory, fd limit).
  static std::unique_ptr<TenantSegment> create(const schema::SegmentLayout& layout,
                                               std::uint64_t session_id, std::string* error);
  ~TenantSegment();
  TenantSegment(const TenantSegment&) = delete;
  TenantSegment& operator=(const TenantSegment&) = delete;

  // The fd to pass to the tenant; close_fd() after passing it (the mapping keeps the memory).
  int fd() const { return fd_; }
  void close_fd();

  const schema::SegmentLayout& layout() const { return layout_; }
  void* request_ring() const { return base_ + layout_.request_ring_offset; }
  void* response_ring() const { return base_ + layout_.response_ring_offset; }
  const std::uint8_t* client_arena() const { return base_ + layout_.client_arena_offset; }
  // Only for writing results the tenant asked for into its own arena (environment observations),
  // at places checked against the arena's bounds.
  std::uint8_t* client_arena_for_results() const { return base_ + layout_.client_arena_offset; }
  // Where replies too large for the response ring go (OutputArena allocates it).
  std::uint8_t* output_arena() const { return base_ + layout_.output_arena_offset; }

 private:
  TenantSegment(int fd, std::uint8_t* base, const schema::SegmentLayout& layout)
      : fd_(fd), base_(base), layout_(layout) {}
  int fd_;
  std::uint8_t* base_;
  schema::SegmentLayout layout_;  // private copy: the header in the segment is never re-read
};

}  // namespace nexus::daemon
