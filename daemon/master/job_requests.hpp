// Jobs' requests off the wire and their refusals back onto it: the one place where a JobSpec or
// an RlStartRequest (already checked by ipc's decoder) becomes daemon/jobs' typed request.
#pragma once
#include "daemon/jobs/job_registry.hpp"
#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

JobRequest job_request(const wire::JobSpec& spec);
RlJobSpec rl_job_spec(const wire::RlStartRequest& r);
wire::ErrorCode wire_code(JobRefusal refusal);

}  // namespace nexus::daemon
