// The model service: one resident, frozen backbone for every tenant, the tenants' slots (head,
// optimizer, versions), and the executor thread that group-batches their requests.
//
// The reactor hands over model requests (register, sft_step, predict, publish) as ModelWork and
// gets replies back through the Completion callback (called on the executor thread; it must
// only queue). Inputs are read in place from the tenant's client arena: the work item holds the
// segment's mapping alive, so a tenant that detaches mid-request cannot unmap it under us.
//
// Thread safety: submit(), tenant_detached() and stats() from any thread; the slots and the
// backbone are touched by the executor thread only.
// This header is torch-free on purpose: the reactor's translation units never include LibTorch.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/ipc/model_port.hpp"
#include "daemon/model/backbone_config.hpp"
#include "daemon/sched/group_batcher.hpp"

namespace nexus::daemon {

struct ModelConfig {
  std::string backbone = "tiny";
  std::string weights;          // safetensors; empty: the seeded initialisation (logged as such)
  sched::BatchPolicy batch;
  int torch_threads = 0;        // 0: all cores
  std::string state_dir = "/var/lib/nexus";  // checkpoints under <state_dir>/checkpoints/<tenant>/
  // Per-sample backbone results independent of who else is queued: one backbone pass per
  // request (no grouping) and deterministic algorithms. A tenant's losses are then bitwise the
  // same alone or among others.
  bool deterministic = false;
  std::map<std::string, std::string> external_envs;  // name -> socket of its simulator process
};

class ModelService : public ModelPort {
 public:
  using Completion = std::function<void(std::uint64_t session_id, std::vector<std::uint8_t> reply)>;

  // Loads the backbone (throws std::runtime_error) and starts the executor thread.
  ModelService(const ModelConfig& config, Completion complete);
  ~ModelService();
  ModelService(const ModelService&) = delete;
  ModelService& operator=(const ModelService&) = delete;

  void submit(ModelWork work) override;
  void tenant_detached(const std::string& tenant) override;
  ModelStats stats() const override;
  std::string backbone_name() const override;
  const model::BackboneConfig& backbone() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nexus::daemon
