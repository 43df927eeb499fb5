#include "daemon/model/slot_leases.hpp"

#include <algorithm>

namespace nexus::model::detail {

namespace {
bool overlaps(const std::set<std::string>& a, const std::set<std::string>& b) {
  return std::any_of(a.begin(), a.end(), [&](const std::string& n) { return b.count(n) > 0; });
}
}  // namespace

SlotLease::~SlotLease() {
  if (leases_) leases_->release(names_);
}

SlotLease SlotLeases::lease(const std::vector<std::string>& tenants) {
  std::set<std::string> names(tenants.begin(), tenants.end());
  MutexLock lk(mu_);
  const auto ticket = next_ticket_++;
  waiting_.push_back({ticket, &names});
  while (!free_for(ticket, names)) cv_.wait(lk.native());
  waiting_.erase(std::find_if(waiting_.begin(), waiting_.end(), [&](const Waiter& w) { return w.ticket == ticket; }));
  leased_.insert(names.begin(), names.end());
  // A later waiter that waited only behind this one's claim (not its lease) may go now.
  cv_.notify_all();
  return SlotLease(this, std::move(names));
}

bool SlotLeases::free_for(std::uint64_t ticket, const std::set<std::string>& names) const {
  for (const auto& n : names)
    if (leased_.count(n)) return false;
  for (const auto& w : waiting_) {
    if (w.ticket == ticket) break;  // earlier waiters only
    if (overlaps(*w.names, names)) return false;
  }
  return true;
}

bool SlotLeases::busy(const std::string& tenant) const {
  MutexLock lk(mu_);
  return leased_.count(tenant) > 0;
}

std::size_t SlotLeases::waiting() const {
  MutexLock lk(mu_);
  return waiting_.size();
}

void SlotLeases::release(const std::set<std::string>& names) {
  {
    MutexLock lk(mu_);
    for (const auto& n : names) leased_.erase(leased_.find(n));
  }
  cv_.notify_all();
}

}  // namespace nexus::model::detail
