// Binding a request to its tenant's slot before it runs: shapes and dtypes against the slot's
// schema and the backbone's geometry, a private copy of every number the backbone or the head
// consumes (token ids in range, state and actions finite: a tenant that rewrites its arena
// afterwards changes nothing we read), and the request's estimated cost against the budget.
//
// Limits on what a tenant may register live here too: heads are small by design, and these
// bound the daemon's memory and a single request's work.
#pragma once
#include <torch/torch.h>

#include <optional>
#include <string>

#include "daemon/model/backbone.hpp"
#include "daemon/model/feature_cache.hpp"
#include "daemon/model/work.hpp"

namespace nexus::model::detail {

inline constexpr std::int64_t kMaxSamplesPerRequest = 4096;
inline constexpr std::int32_t kMaxActionDim = 64, kMaxChunk = 64, kMaxStateDim = 1024, kMaxHidden = 4096,
                              kMaxFlowSteps = 100, kMaxTokenQueries = 16;
// The built-in tokenizer's vocabulary (one token per byte); a TorchScript backbone declares
// none, and its own forward() must cope with any int32 (it is the user's module).
inline constexpr std::int64_t kByteVocabulary = 256;

struct SlotEntry;  // slot_registry.hpp
}  // namespace nexus::model::detail
namespace nexus::model {
class LoraAdapterImpl;  // lora.hpp
}  // namespace nexus::model
namespace nexus::model::detail {

// A batchable work item made ready for a group pass.
struct Bound {
  // Micro: rows [offset, offset + n) of a StepChain (an SFT step split into bounded turns).
  enum class Kind { Sft, Predict, Features, Act, Micro } kind = Kind::Predict;
  Work* work = nullptr;
  SlotEntry* slot = nullptr;                  // null for features (no head)
  std::string tenant;
  std::int64_t n = 0;
  std::uint64_t version = 0;                  // predict
  torch::Tensor images;                       // uint8, read in place (the pack copies it)
  torch::Tensor tokens, mask, state, actions; // private copies (mask as bool)
  torch::Tensor out;                          // features: where they go (the tenant's memory)
  double gflop = 0;                           // estimated cost
  std::shared_ptr<StepChain> chain;           // micro
  std::int64_t offset = 0;                    // micro: the first row of the chain's batch
  // The tenant's adapter this pass applies to its samples (null: none): the live one for
  // training and features, the version's for predict, the acting version's for RL acting.
  const LoraAdapterImpl* adapter = nullptr;
  bool trains_adapter() const { return adapter != nullptr && (kind == Kind::Sft || kind == Kind::Micro); }
  // The frozen-feature cache (group_cache.cpp): each row's key (empty: not cached). With a plan
  // (some rows found), `found` holds the found rows' features (the others undefined) and the
  // backbone pass computes only the `missing` rows, in order.
  std::vector<daemon::ContentDigest> cache_keys;
  bool cache_plan = false;
  std::vector<CachedFeature> found;
  std::vector<std::int64_t> missing;
  std::int64_t pass_rows() const { return cache_plan ? static_cast<std::int64_t>(missing.size()) : n; }
};

// The next micro-batch of `chain` as a bound member of a group pass (rows of its bound batch,
// no copy); advances chain.next.
Bound micro_bound(Work& w, SlotEntry* slot);

struct CostModel {
  double backbone_gflop_per_sample = 0;  // 2 x parameters x sequence length
  double budget_gflop = 0;               // refused above this
  std::int64_t vocabulary = 0;           // 0: token ids unchecked (a user backbone)
};
CostModel make_cost_model(Backbone& backbone, const BackboneConfig& config, double budget_gflop, bool builtin);

// Binds `w` (TenantWork with SftStep, Predict or Features, or ActWork) to `slot` (null only for
// Features); nullopt when ready, else the failure to answer with.
std::optional<Failure> bind(Work& w, SlotEntry* slot, const BackboneConfig& bb, const CostModel& cost, Bound& out);

// The head's estimated cost for n samples (training: forward and backward; flow predict: every
// Euler step), in GFLOP.
double head_gflop(const HeadSpec& spec, std::int64_t feature_dim, std::int64_t n, bool training);

// Checks a registration against the limits above and the backbone; nullopt when acceptable.
std::optional<Failure> check_registration(const op::Register& r, const BackboneConfig& bb);

}  // namespace nexus::model::detail
