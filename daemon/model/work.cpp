#include "daemon/model/work.hpp"

namespace nexus::model::detail {
namespace {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

const Observation* observation_of(const Request& r) {
  if (const auto* s = std::get_if<op::SftStep>(&r.op)) return &s->obs;
  if (const auto* p = std::get_if<op::Predict>(&r.op)) return &p->obs;
  if (const auto* f = std::get_if<op::Features>(&r.op)) return &f->obs;
  return nullptr;
}

}  // namespace

const std::string& tenant_of(const Work& w) {
  return std::visit(Overload{[](const TenantWork& t) -> const std::string& { return t.request.tenant; },
                             [](const auto& x) -> const std::string& { return x.tenant; }},
                    w);
}

Clock::time_point arrival_of(const Work& w) {
  return std::visit(Overload{[](const TenantWork& t) { return t.request.arrival; },
                             [](const auto& x) { return x.arrival; }},
                    w);
}

bool is_inference(const Work& w) {
  if (std::holds_alternative<ActWork>(w)) return true;
  const auto* t = std::get_if<TenantWork>(&w);
  return t && (std::holds_alternative<op::Predict>(t->request.op) || std::holds_alternative<op::Features>(t->request.op));
}

bool needs_slot(const Work& w) {
  const auto* t = std::get_if<TenantWork>(&w);
  return !(t && std::holds_alternative<op::Features>(t->request.op));
}

bool is_batchable(const Work& w) {
  if (std::holds_alternative<ActWork>(w) || std::holds_alternative<MicroWork>(w)) return true;
  const auto* t = std::get_if<TenantWork>(&w);
  return t && observation_of(t->request) != nullptr;
}

std::uint32_t samples_of(const Work& w) {
  if (const auto* a = std::get_if<ActWork>(&w)) return static_cast<std::uint32_t>(a->images.size(0));
  if (const auto* m = std::get_if<MicroWork>(&w))
    return static_cast<std::uint32_t>(std::min(m->chain->micro, m->chain->n - m->chain->next));
  const auto* t = std::get_if<TenantWork>(&w);
  const Observation* obs = t ? observation_of(t->request) : nullptr;
  if (!obs || obs->images.shape.size() != 5) return 1;
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(obs->images.shape[0], 1, 4096));
}

std::uint64_t key_of(const Work& w) {
  if (const auto* a = std::get_if<ActWork>(&w)) return static_cast<std::uint64_t>(a->images.size(1));
  if (const auto* m = std::get_if<MicroWork>(&w)) return static_cast<std::uint64_t>(m->chain->images.size(1));
  const auto* t = std::get_if<TenantWork>(&w);
  const Observation* obs = t ? observation_of(t->request) : nullptr;
  if (!obs || obs->images.shape.size() != 5) return 0;
  return static_cast<std::uint64_t>(std::clamp<std::int64_t>(obs->images.shape[1], 0, 64));  // views
}

bool cancelled(const Work& w) {
  const Request* r = nullptr;
  if (const auto* t = std::get_if<TenantWork>(&w)) r = &t->request;
  if (const auto* m = std::get_if<MicroWork>(&w)) r = &m->chain->request;
  return r && r->alive && !r->alive->load();
}

void fail(Work& w, Fault fault, const std::string& reason) {
  std::visit(Overload{[&](TenantWork& t) { t.request.done(Failure{fault, reason}); },
                      [&](ActWork& a) { a.done.set_exception(std::make_exception_ptr(std::runtime_error(reason))); },
                      [&](SlotWork& s) { s.done.set_exception(std::make_exception_ptr(std::runtime_error(reason))); },
                      [&](MicroWork& m) { m.chain->request.done(Failure{fault, reason}); }},
             w);
}

}  // namespace nexus::model::detail
