// Environment sessions and RL jobs in nexusd, used through nexus::Client.
//
//   auto envs = client->env_open("reach", 8);                       // 8 sessions, yours only
//   auto images = client->alloc(DType::UInt8, {8, 1, H, H, 3});     // observations land here
//   auto state = client->alloc(DType::Float32, {8, envs.state_dim});
//   client->env_reset(envs.ids, seeds, images, state);             // then predict on them
//   auto r = client->env_step(envs.ids, actions, images, state);    // rewards, done, success
//
//   client->rl_start({.algorithm = "ppo", .task = "reach", .iterations = 100});
//   while (client->rl_status().state == "running") ...              // the daemon drives it
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nexus {

struct EnvSessions {
  std::vector<std::uint64_t> ids;
  std::int32_t image_size = 0, state_dim = 0, action_dim = 0, max_steps = 0;
};

// Per session. error non-empty: no new observation for it; failed: the session broke (not your
// input) and stays broken: close it and open another. done: the episode ended, either by the
// task (terminated: done and not truncated) or by its limit (truncated: the state is not
// terminal, so a learner bootstraps from its value). engines: the rollout engine that served
// the session ("": nexusd itself). interrupted non-empty: the session's engine was lost, so its
// episode was truncated there (the last observation repeats); reset it and it goes on elsewhere.
struct EnvStepResult {
  std::vector<float> reward;
  std::vector<bool> done, success, failed, truncated;
  std::vector<std::string> instructions, errors, engines, interrupted;
};

// A demonstration file (robomimic/LIBERO HDF5) loaded into nexusd, which samples SFT batches
// from it (Client::dataset_load, Client::dataset_sft_step).
struct DatasetOptions {
  std::uint64_t seed = 0;                 // nexusd's sampling order
  std::vector<std::string> views;         // camera keys under obs/, in view order (empty: the layout's)
  std::vector<std::string> state_keys;    // proprio keys under obs/, concatenated (empty: the layout's)
  // Train on each action and state column's (x - mean) / std over the training demos; predict
  // with the dataset's name to give state and get actions in the file's units.
  bool normalize = false;
  std::string instruction;                // for files that name none (robomimic's often do not)
};

struct DatasetInfo {
  std::uint32_t episodes = 0, train_episodes = 0, valid_episodes = 0;  // valid: /mask/valid, held out
  std::uint64_t samples = 0;  // steps over the training episodes
  std::int32_t state_dim = 0, action_dim = 0;
  std::string layout;         // nexus, robomimic, libero, or named (keys given)
  std::vector<std::string> views, state_keys;
  std::int32_t source_image_size = 0;  // as stored; nexusd resized the views to the backbone's
  bool normalized = false;
  std::vector<float> action_mean, action_std, state_mean, state_std;  // when normalized
};

struct RlOptions {
  std::string algorithm = "ppo";  // ppo or grpo
  std::string task = "reach";
  std::int32_t sessions = 16;     // grpo: a multiple of group_size
  std::int32_t horizon = 32;      // ppo: steps per rollout record
  std::int32_t group_size = 8;    // grpo: episodes per start state
  std::int32_t iterations = 50;   // updates; each publishes a policy version
  std::int32_t max_steps = 0;     // episode limit (0: the task's)
  std::uint64_t seed = 1;
  std::int32_t epochs = 4;
  std::int32_t minibatch = 256;
  double clip = 0.2, gamma = 0.99, lambda = 0.95, entropy = 0.0, value_lr = 1e-3;
  std::int32_t max_staleness = 2;  // records older than this many versions are
  bool downweight_stale = false;   // dropped (false) or down-weighted (true)
  std::int32_t queue_capacity = 2; // Training Queue depth between rollouts and updates
  // Demonstrations the policy should stay near (DAPG's behaviour-cloning term): a dataset this
  // tenant loaded (dataset_load, one camera, not normalised), its weight (0: none) and steps per update.
  std::string demo_dataset;
  double demo_weight = 0;
  std::int32_t demo_batch = 128;
  // Collect a record, wait for its update, then collect the next with the new version: every
  // record on-policy, whatever the threads' timing, at the price of the overlap (default:
  // rollouts go on during updates, and timing decides which version acted when).
  bool synchronous = false;
};

struct RlStatus {
  std::string state;  // running, done, failed, stopped
  std::string error;
  std::int32_t iterations = 0;
  std::uint64_t version = 0, first_version = 0;
  std::uint64_t env_steps = 0, episodes = 0;
  double recent_success = 0, recent_return = 0;  // training episodes (sampled actions), last 100
  double policy_loss = 0, value_loss = 0, entropy = 0;
  std::uint64_t records_dropped = 0, records_downweighted = 0;
  double demo_loss = 0;  // the behaviour-cloning term's last value (0 without one)
  std::uint64_t records_behind = 0;  // records an older version had acted on (0 when synchronous)
  // Where its steps ran: per rollout engine ("": nexusd itself), and episodes cut short because
  // their engine was lost (the job went on; those episodes count as truncated).
  std::map<std::string, std::uint64_t> engine_steps;
  std::uint64_t interrupted_episodes = 0;
  // Adapter tenants (HeadSpec::adapter): update minibatches that ran as parts, each in a turn of
  // its own beside other tenants (bounded training turns), and the most bytes of observations its
  // records may hold at once (a job over 512 MiB is refused at start). 0 for a head-only tenant.
  std::uint64_t split_minibatches = 0, observation_bytes = 0;
  double seconds = 0;
};

// Jobs the daemon runs for this tenant (Client::job_start): SFT on a dataset you loaded, or an
// evaluation of a published version (the latest by default; never the live head).
struct JobSpec {
  std::string kind = "sft";       // sft or eval
  std::string dataset;            // sft: a name you passed to dataset_load
  std::int32_t steps = 100;       // sft
  std::int32_t batch = 32;        // sft
  std::int32_t chunk = 1;         // sft: your head's chunk
  std::string task = "reach";     // eval
  std::uint64_t version = 0;      // eval: 0 = the latest published version
  std::int32_t episodes = 50;     // eval
  std::uint64_t seed = 0;         // eval: episode i is reset with seed + i
};

struct JobInfo {
  std::uint64_t id = 0;
  std::string tenant, kind;
  std::string state;              // queued, running, finished, failed, cancelled
  std::string error;
  std::int64_t done = 0, total = 0;
  double loss = 0, success_rate = 0, mean_return = 0;
  std::uint64_t version = 0;
  double seconds = 0;
};

}  // namespace nexus
