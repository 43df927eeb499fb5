// The frozen-feature cache in a group pass (GroupExecutor's; docs/design/cache.md).
//
// Which rows: only a dataset SFT step's (its keys come from the dataset store, which digested
// what the backbone reads of each sample); a tenant's own batch from its arena has no keys, since
// it could rewrite the bytes under a key. Not an adapter tenant's: its adapter changes every
// block's output, so no row of its features is the frozen backbone's.
// A step is split into micro-batches by the rows the cache does not hold (a step whose rows are
// mostly cached stays whole); each micro-batch then looks its own rows up.
#include "daemon/model/group_executor.hpp"

namespace nexus::model::detail {

void GroupExecutor::key_rows(Bound& b) {
  if (!cache_ || b.adapter || (b.kind != Bound::Kind::Sft && b.kind != Bound::Kind::Micro)) return;
  const Request& request = b.kind == Bound::Kind::Micro ? b.chain->request : std::get<TenantWork>(*b.work).request;
  const auto& samples = std::get<op::SftStep>(request.op).sample_keys;
  const auto first = static_cast<std::size_t>(b.kind == Bound::Kind::Micro ? b.offset : 0);
  if (samples.size() < first + static_cast<std::size_t>(b.n)) return;  // not a dataset's batch
  // The owner with the name: a released name's next owner must not read the last one's entries.
  const auto scope = std::to_string(request.uid) + "/" + b.tenant;
  b.cache_keys.reserve(static_cast<std::size_t>(b.n));
  for (std::size_t i = 0; i < static_cast<std::size_t>(b.n); ++i)
    b.cache_keys.push_back(cache_->key(backbone_digest_, scope, samples[first + i]));
}

std::int64_t GroupExecutor::rows_to_run(const Bound& b) const {
  if (b.cache_keys.empty()) return b.n;
  return b.n - static_cast<std::int64_t>(cache_->present(b.cache_keys));
}

void GroupExecutor::look_up(Bound& b) {
  if (b.cache_keys.empty()) return;
  b.found.resize(static_cast<std::size_t>(b.n));
  for (std::size_t i = 0; i < b.found.size(); ++i) {
    if (auto f = cache_->find(b.cache_keys[i])) b.found[i] = std::move(*f), b.cache_plan = true;
    else b.missing.push_back(static_cast<std::int64_t>(i));
  }
  if (!b.cache_plan) b.found.clear(), b.missing.clear();
}

VLAFeature GroupExecutor::member_features(Bound& b, const VLAFeature& computed) {
  if (b.cache_keys.empty()) return computed;
  // Keep what the pass computed (host copies: the pass's tensors are views of the group's batch).
  for (std::int64_t j = 0; j < b.pass_rows(); ++j) {
    const auto row = b.cache_plan ? b.missing[static_cast<std::size_t>(j)] : j;
    cache_->insert(b.cache_keys[static_cast<std::size_t>(row)], b.tenant,
                   {computed.tokens[j], computed.pooled[j], computed.mask[j]});
  }
  if (!b.cache_plan) return computed;
  // The step's features in its own row order: found rows from the cache, the others from the pass.
  std::vector<torch::Tensor> tokens, pooled, mask;
  std::size_t next_missing = 0;
  for (std::size_t i = 0; i < b.found.size(); ++i) {
    if (b.found[i].tokens.defined()) {
      tokens.push_back(on_device(b.found[i].tokens)), pooled.push_back(on_device(b.found[i].pooled));
      mask.push_back(on_device(b.found[i].mask));
    } else {
      const auto j = static_cast<std::int64_t>(next_missing++);
      tokens.push_back(computed.tokens[j]), pooled.push_back(computed.pooled[j]), mask.push_back(computed.mask[j]);
    }
  }
  return {torch::stack(tokens), torch::stack(pooled), torch::stack(mask)};
}

}  // namespace nexus::model::detail
