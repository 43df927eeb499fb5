// Errors reported by libnexus. Every failure a tenant can see is an nexus::Error with a code
// (the same numbering as nexus.fbs ErrorCode) and a sentence saying what happened.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace nexus {

enum class ErrorCode : std::uint16_t {
  None = 0,
  BadMessage,
  BadLengthPrefix,
  RingCorrupt,
  MessageTooLarge,
  UnsupportedVersion,
  WrongMessageType,
  TensorOutOfBounds,
  BadTensor,
  PermissionDenied,
  AlreadyAttached,
  SegmentTooLarge,
  TooManyTenants,
  Busy,
  WouldBlock,
  Timeout,
  DaemonGone,
  Internal,
  NotRegistered,   // a model request before register_tenant()
  BadBatch,        // shapes or numbers the tenant's head refuses (NaN/Inf too)
  UnknownVersion,  // a policy version this tenant never published
  UnknownSession,  // an environment session this tenant does not hold
  EnvFailed,       // an environment request refused as a whole (see the message)
  JobFailed,       // an RL job that could not start, or none to report on
  BadDataset,      // a dataset file that is not a valid demonstration file
  OverBudget,      // a request whose estimated cost is over the daemon's per-request budget
  QuotaExceeded,   // a resource bound (datasets, request memory, tenants per user) is reached
  UnknownJob,      // a job id that is not yours
  Cancelled,       // the work was cancelled before it finished
  UnknownRegion,   // a region id this tenant has not registered (or has unregistered)
  LimitExceeded,   // a count bound is reached (jobs queued or running, per tenant or in all)
  // Client-side codes, never on the wire:
  ArenaFull = 1000,      // the client arena has no room for the tensor
  ConnectFailed = 1001,  // nothing listens on the socket path
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& reason)
      : std::runtime_error(std::string(error_code_name(code)) + ": " + reason), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace nexus
