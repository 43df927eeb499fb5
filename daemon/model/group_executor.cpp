#include "daemon/model/group_executor.hpp"

#include "daemon/log/log_text.hpp"
#include "daemon/model/devices.hpp"

namespace nexus::model::detail {

using daemon::log_text;
using daemon::LogLevel;
void answer(Bound& b, Result r) {
  if (b.chain) return b.chain->request.done(std::move(r));
  std::get<TenantWork>(*b.work).request.done(std::move(r));
}

namespace {

// An SFT step too big for one turn becomes a StepChain: bound once (`b`, the whole batch), its
// Work replaced in place by the chain's first micro-batch.
Bound start_chain(Work& w, Bound whole, std::int64_t micro) {
  auto chain = std::make_shared<StepChain>();
  chain->request = std::move(std::get<TenantWork>(w).request);
  chain->images = whole.images, chain->tokens = whole.tokens, chain->mask = whole.mask;
  chain->state = whole.state, chain->actions = whole.actions;
  chain->n = whole.n, chain->micro = micro, chain->gflop = whole.gflop;
  const auto tenant = chain->request.tenant;
  const auto arrival = chain->request.arrival;
  w = MicroWork{std::move(chain), tenant, arrival};
  return micro_bound(w, whole.slot);
}

}  // namespace

GroupExecutor::GroupExecutor(const GroupExecutorParts& p)
    : backbone_(p.backbone),
      adaptable_(dynamic_cast<AdaptableBackbone*>(&p.backbone)),
      device_(p.device),
      slots_(p.slots),
      cost_(p.cost),
      deterministic_(p.deterministic),
      accounting_(p.accounting),
      stats_(p.stats),
      profile_(p.profile),
      stats_mu_(p.stats_mu) {}

GroupExecutor::Ran GroupExecutor::run(std::vector<Work>& group, metrics::Service service, std::int64_t split_above) {
  Ran ran;
  continuations_ = &ran.continuations;
  std::vector<Bound> bound;
  bound.reserve(group.size());
  for (auto& w : group) {
    if (cancelled(w)) continue;  // its tenant left: nobody to answer
    std::string refused;
    SlotEntry* slot = needs_slot(w) ? slots_.find(tenant_of(w), &refused) : nullptr;
    if (!slot && needs_slot(w)) {
      if (refused.empty()) fail(w, Fault::NotRegistered, "register the tenant (head and data schema) first");
      else fail(w, Fault::OverQuota, refused);
      continue;
    }
    if (std::holds_alternative<MicroWork>(w)) {
      bound.push_back(micro_bound(w, slot));
      bound.back().adapter = slot->trainer->adapter();
      key_rows(bound.back());
      look_up(bound.back());
      continue;
    }
    Bound b;
    if (auto f = bind(w, slot, backbone_.config(), cost_, b)) {
      fail(w, f->fault, f->reason);
      continue;
    }
    if (!resolve_adapter(b, slot)) continue;
    key_rows(b);
    // Split by what the backbone would run: a step most of whose rows are cached stays whole.
    if (b.kind == Bound::Kind::Sft && split_above > 0 && rows_to_run(b) > split_above) {
      b = start_chain(w, std::move(b), split_above);
      key_rows(b);  // its first micro-batch's
      std::lock_guard lk(stats_mu_);
      ++stats_.split_steps;
    }
    look_up(b);
    bound.push_back(std::move(b));
  }
  if (bound.empty()) return ran;
  if (!deterministic_) {
    for (auto& round : adapter_rounds(bound)) pass(round, service, ran);
    continuations_ = nullptr;
    return ran;
  }
  // Deterministic mode: each request gets a backbone pass of its own, so its features are
  // computed by exactly the same operations on exactly the same shapes whoever else is queued.
  // The price is the grouping itself (nexus-bench group measures it): see docs/design/model.md.
  for (auto& b : bound) pass({&b, 1}, service, ran);
  continuations_ = nullptr;
  return ran;
}

bool GroupExecutor::forward(std::span<Bound> bound, VLAFeature& features, std::string& error) {
  std::vector<torch::Tensor> images, tokens, masks;
  AdapterBatch adapters;  // each adapted member's samples, where they sit in the group's batch
  bool training = false;
  std::int64_t offset = 0;
  for (auto& b : bound) {
    if (b.pass_rows() == 0) continue;  // every row cached
    if (b.cache_plan) {                // only the rows the cache does not hold
      const auto rows = torch::tensor(b.missing, torch::kInt64);
      images.push_back(b.images.index_select(0, rows)), tokens.push_back(b.tokens.index_select(0, rows));
      masks.push_back(b.mask.index_select(0, rows));
    } else {
      images.push_back(b.images), tokens.push_back(b.tokens), masks.push_back(b.mask);
    }
    if (b.adapter) adapters.segments.push_back({offset, b.n, b.adapter});
    training = training || b.trains_adapter();
    offset += b.pass_rows();
  }
  try {
    torch::NoGradGuard no_grad;
    const auto p0 = sched::Clock::now();
    // The one copy of the inputs: packing the group batch (on a GPU into page-locked memory,
    // then one copy per input queued without waiting: group_pack's place, gpu.md).
    const auto dev_img = pack_rows(images, device_), dev_tokens = pack_rows(tokens, device_),
               dev_masks = pack_rows(masks, device_);
    const double pack_s = std::chrono::duration<double>(sched::Clock::now() - p0).count();
    if (!adapters.empty() && !adaptable_) throw std::runtime_error("this backbone takes no adapters");
    if (adapters.empty())
      features = backbone_.forward(dev_img, dev_tokens, dev_masks);
    else
      features = adaptable_->forward_adapted(dev_img, dev_tokens, dev_masks, adapters, training);
    std::lock_guard lk(stats_mu_);
    profile_.copy_s += pack_s;
    profile_.backbone_s -= pack_s;  // pass() adds the whole pass's time
    // images, tokens (int32) and mask (one byte) of every sample, packed once
    stats_.input_bytes_packed += static_cast<std::uint64_t>(dev_img.numel()) +
                                 static_cast<std::uint64_t>(dev_img.size(0) * 5 * backbone_.config().max_tokens);
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

void GroupExecutor::pass(std::span<Bound> bound, metrics::Service service, Ran& ran) {
  const auto t0 = sched::Clock::now();
  VLAFeature features;
  std::string error;
  std::int64_t samples = 0;  // through the backbone (rows the feature cache held are not)
  for (auto& b : bound) samples += b.pass_rows();
  if (samples > 0 && !forward(bound, features, error)) {
    if (bound.size() > 1) {  // find the member it fails on; the others go on alone
      {
        std::lock_guard lk(stats_mu_);
        ++stats_.rerun_groups;
      }
      log_text(LogLevel::Warn, "group_rerun", "members=" + std::to_string(bound.size()) + " reason=\"" + error + "\"");
      for (auto& b : bound) pass({&b, 1}, service, ran);
      return;
    }
    fail(*bound[0].work, Fault::Internal, "backbone: " + error);
    return;
  }
  const auto t1 = sched::Clock::now();
  const double backbone_s = std::chrono::duration<double>(t1 - t0).count();
  ran.samples += samples;
  {
    // Counted before any reply goes out: a tenant that has its answer sees it in the status.
    std::lock_guard lk(stats_mu_);
    stats_.groups += samples > 0 ? 1 : 0;
    stats_.grouped_requests += bound.size();
    stats_.samples += static_cast<std::uint64_t>(samples);
    stats_.backbone_seconds += backbone_s;
    profile_.backbone_s += backbone_s;
  }
  // Partition: each member gets narrow() views of the group's features, no copy. Members that
  // train an adapter get the views that carry its graph; everyone else a detached view, so that
  // no other member's backward can reach into the pass.
  std::vector<PendingPrediction> predictions;
  std::vector<DeferredStep> deferred;
  const VLAFeature plain = features.pooled.defined() && features.pooled.requires_grad()
                               ? VLAFeature{features.tokens.detach(), features.pooled.detach(), features.mask}
                               : features;
  std::int64_t offset = 0;
  for (auto& b : bound) {
    const auto h0 = sched::Clock::now();
    const VLAFeature& src = b.trains_adapter() ? features : plain;
    const auto rows = b.pass_rows();
    VLAFeature f;
    if (rows > 0)
      f = {src.tokens.narrow(0, offset, rows), src.pooled.narrow(0, offset, rows), src.mask.narrow(0, offset, rows)};
    offset += rows;
    try {
      f = member_features(b, f);
    } catch (const std::exception& e) {
      fail(*b.work, Fault::Internal, std::string("feature cache: ") + e.what());
      continue;
    }
    if (b.trains_adapter()) defer_step(b, f, deferred);
    else run_head(b, f, predictions);
    const double head_s = std::chrono::duration<double>(sched::Clock::now() - h0).count();
    const double seconds =
        (samples > 0 ? backbone_s * static_cast<double>(rows) / static_cast<double>(samples) : 0.0) + head_s;
    ran.charged[b.tenant] += seconds;
    if (accounting_) {
      const bool sft = b.kind == Bound::Kind::Sft || (b.kind == Bound::Kind::Micro && b.offset + b.n == b.chain->n);
      const bool training = b.kind == Bound::Kind::Sft || b.kind == Bound::Kind::Micro;
      accounting_->charge(b.tenant, service, seconds, static_cast<std::uint64_t>(b.n), sft ? 1 : 0, training ? 0 : 1);
    }
    std::lock_guard lk(stats_mu_);
    stats_.head_seconds += head_s;
    profile_.heads_s += head_s;  // the optimizer's part is moved out per turn (Replica::execute)
  }
  if (!deferred.empty()) backward_deferred(deferred, service, ran);
  const auto c0 = sched::Clock::now();
  answer_predictions(predictions);
  std::lock_guard lk(stats_mu_);
  profile_.copy_s += std::chrono::duration<double>(sched::Clock::now() - c0).count();
}

}  // namespace nexus::model::detail
