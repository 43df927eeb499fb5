// A job's record on the wire (JobInfo in nexus.fbs): shared by the tenant's JobStatusReply and
// the control socket's StatusReply.
// In ipc, which owns the wire; master includes it for JobStatusReply.
#pragma once
#include <flatbuffers/flatbuffers.h>

#include "daemon/metrics/service_status.hpp"
#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

inline flatbuffers::Offset<wire::JobInfo> job_info(flatbuffers::FlatBufferBuilder& fbb, const JobInfo& j) {
  return wire::CreateJobInfo(fbb, j.id, fbb.CreateString(j.tenant), fbb.CreateString(j.kind),
                             fbb.CreateString(job_state_name(j.state)), fbb.CreateString(j.error), j.done, j.total, j.loss,
                             j.success_rate, j.mean_return, j.version, j.seconds);
}

// RlStatusReply's words for an RL job's state: RL's own (done and stopped for finished and
// cancelled).
constexpr const char* rl_state_name(JobState s) {
  switch (s) {
    case JobState::Finished: return "done";
    case JobState::Cancelled: return "stopped";
    default: return job_state_name(s);
  }
}

}  // namespace nexus::daemon
