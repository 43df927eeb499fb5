#include "daemon/model/tenant_slot.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "daemon/model/devices.hpp"
#include "daemon/model/safetensors.hpp"
#include "daemon/state/private_files.hpp"

namespace nexus::model {

TenantSlot::TenantSlot(const HeadSpec& spec, const OptimizerConfig& opt, std::int64_t feature_dim,
                       std::uint64_t seed, torch::Device device)
    : config_(opt),
      feature_dim_(feature_dim),
      device_(device),
      rng_(seeded_generator(device, seed)),
      inference_rng_(seeded_generator(device, seed ^ 0x9E3779B97F4A7C15ull)) {
  {
    // Head initialisation draws from the global generator: make it a function of the seed.
    static std::mutex init_mu;
    std::lock_guard lock(init_mu);
    torch::manual_seed(seed);
    head_ = make_head(spec, feature_dim);
  }
  head_->to(device_);
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      head_->parameters(), torch::optim::AdamWOptions(opt.lr)
                               .betas({opt.beta1, opt.beta2})
                               .weight_decay(opt.weight_decay));
}

void TenantSlot::check_inputs(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor* actions) const {
  const auto& s = head_->spec();
  const auto n = f.pooled.size(0);
  if (s.state_dim > 0) {
    if (!state.defined() || state.dim() != 2 || state.size(0) != n || state.size(1) != s.state_dim)
      throw SlotError(true, "state must be [" + std::to_string(n) + ", " + std::to_string(s.state_dim) + "]");
    // Device tensors were checked on their host copies (request_binding.cpp): no sync here.
    if (state.is_cpu() && !torch::isfinite(state).all().item<bool>()) throw SlotError(false, "state holds NaN or Inf");
  }
  if (actions) {
    if (!actions->defined() || actions->dim() != 3 || actions->size(0) != n || actions->size(1) != s.chunk ||
        actions->size(2) != s.action_dim)
      throw SlotError(true, "actions must be [" + std::to_string(n) + ", " + std::to_string(s.chunk) + ", " +
                                std::to_string(s.action_dim) + "]");
    if (actions->is_cpu() && !torch::isfinite(*actions).all().item<bool>())
      throw SlotError(false, "actions hold NaN or Inf");
  }
}

StepResult TenantSlot::sft_step(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor& actions) {
  check_inputs(f, state, &actions);
  return policy_step([&](ActionHead& head) {
    try {
      return head.loss(f, state, actions.to(torch::kFloat32), rng_);
    } catch (const c10::Error& e) {
      throw SlotError(true, e.what_without_backtrace());
    }
  });
}

torch::Tensor TenantSlot::predict(const VLAFeature& f, const torch::Tensor& state, std::uint64_t version) {
  check_inputs(f, state, nullptr);
  ActionHead* head = head_.get();
  if (version != 0) {
    auto it = versions_.find(version);
    if (it == versions_.end()) throw std::out_of_range("version " + std::to_string(version) + " was never published, or is no longer kept");
    head = it->second.get();
  }
  torch::NoGradGuard no_grad;
  head->eval();
  try {
    return head->predict(f, state, inference_rng_);  // never the training stream: see header
  } catch (const c10::Error& e) {
    throw SlotError(true, e.what_without_backtrace());
  }
}

TenantSlot::Acted TenantSlot::act(const VLAFeature& f, const torch::Tensor& state) {
  check_inputs(f, state, nullptr);
  if (head_->spec().kind != "gaussian") throw SlotError(true, "RL needs a gaussian head, this slot has " + head_->spec().kind);
  ActionHead* head = versions_.empty() ? head_.get() : versions_.rbegin()->second.get();
  torch::NoGradGuard no_grad;
  auto out = gaussian_outputs(*head, f, state);
  auto noise = torch::randn(out.mean.sizes(), rng_, out.mean.options());
  auto actions = out.mean + torch::exp(out.log_std) * noise;
  return {actions, gaussian_log_prob(out, actions), latest_version()};
}

TenantSlot::Accumulation TenantSlot::begin_step(std::int64_t total) {
  head_->train();
  optimizer_->zero_grad();
  Accumulation acc;
  acc.total = total;
  acc.noise = head_->draw_noise(total, rng_, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  return acc;
}

void TenantSlot::micro_step(Accumulation& acc, const VLAFeature& f, const torch::Tensor& state,
                            const torch::Tensor& actions, std::int64_t offset) {
  micro_loss(acc, f, state, actions, offset).backward();  // gradients add up across micro-batches
}

torch::Tensor TenantSlot::micro_loss(Accumulation& acc, const VLAFeature& f, const torch::Tensor& state,
                                     const torch::Tensor& actions, std::int64_t offset) {
  check_inputs(f, state, &actions);
  const auto n = actions.size(0);
  head_->train();
  torch::Tensor loss;
  try {
    const auto noise = acc.noise.defined() ? acc.noise.narrow(0, offset, n) : acc.noise;
    // The whole batch's loss is the mean over its samples: this micro-batch's share is n / total.
    loss = head_->loss_drawn(f, state, actions.to(torch::kFloat32), noise) *
           (static_cast<double>(n) / static_cast<double>(acc.total));
  } catch (const c10::Error& e) {
    throw SlotError(true, e.what_without_backtrace());
  }
  acc.losses.push_back(loss.detach());
  return loss;
}

torch::Tensor TenantSlot::step_loss(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor& actions) {
  check_inputs(f, state, &actions);
  head_->train();
  optimizer_->zero_grad();
  try {
    return head_->loss(f, state, actions.to(torch::kFloat32), rng_);
  } catch (const c10::Error& e) {
    throw SlotError(true, e.what_without_backtrace());
  }
}

const LoraAdapterImpl* TenantSlot::adapter(std::uint64_t version) const {
  if (version == 0) return head_->adapter();
  auto it = versions_.find(version);
  if (it == versions_.end()) throw std::out_of_range("version " + std::to_string(version) + " was never published, or is no longer kept");
  return it->second->adapter();
}

const LoraAdapterImpl* TenantSlot::acting_adapter() const {
  return versions_.empty() ? head_->adapter() : versions_.rbegin()->second->adapter();
}

StepResult TenantSlot::finish_step(Accumulation& acc) {
  return apply_gradients(torch::stack(acc.losses).sum());
}

StepResult TenantSlot::policy_step(const std::function<torch::Tensor(ActionHead&)>& loss_of) {
  head_->train();
  optimizer_->zero_grad();
  auto loss = loss_of(*head_);
  loss.backward();  // a NaN loss only makes NaN gradients: they are dropped below, never applied
  return apply_gradients(loss);
}

static thread_local double optimizer_seconds = 0;
double optimizer_seconds_this_thread() { return optimizer_seconds; }

StepResult TenantSlot::apply_gradients(const torch::Tensor& loss) {
  struct Timed {  // however the step ends (a NaN throws)
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    ~Timed() { optimizer_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); }
  } timed;
  const auto norm = clip_gradients(head_->parameters(), config_.grad_clip);
  // The step's one host synchronisation: loss and norm, read together, before the update.
  // Read in place from the host copy: no .item() (tests/model/devices_test.cpp counts them).
  const auto result =
      torch::stack({loss.detach().to(torch::kFloat32).reshape({}), norm.to(torch::kFloat32)}).to(torch::kCPU).contiguous();
  const double loss_value = result.data_ptr<float>()[0], norm_value = result.data_ptr<float>()[1];
  if (!std::isfinite(loss_value) || !std::isfinite(norm_value)) {
    optimizer_->zero_grad();
    throw SlotError(false, std::isfinite(loss_value) ? "gradient is NaN or Inf; no update made"
                                                     : "loss is NaN or Inf; no update made");
  }
  optimizer_->step();
  return StepResult{loss_value, config_.grad_clip > 0 ? norm_value : 0.0, ++steps_};
}

std::uint64_t TenantSlot::publish() {
  auto copy = make_head(head_->spec(), feature_dim_);
  copy->to(device_);
  {
    torch::NoGradGuard no_grad;
    auto src = head_->parameters();
    auto dst = copy->parameters();
    for (std::size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  for (auto& p : copy->parameters()) p.set_requires_grad(false);
  copy->eval();
  const std::uint64_t v = ++published_;
  versions_.emplace(v, std::move(copy));
  return v;
}

std::size_t TenantSlot::retain(std::size_t keep, const std::set<std::uint64_t>& pinned) {
  keep = std::max<std::size_t>(keep, 1);
  std::vector<std::uint64_t> drop;
  std::size_t newer = 0;  // versions newer than the one looked at
  for (auto it = versions_.rbegin(); it != versions_.rend(); ++it, ++newer)
    if (newer >= keep && !pinned.count(it->first)) drop.push_back(it->first);
  for (auto v : drop) versions_.erase(v);
  return drop.size();
}

namespace {

// The optimizer's per-parameter state is keyed by the parameter's TensorImpl address: as a
// pointer in LibTorch 2.x, as its printed form in 1.13 (the Debian fallback).
template <class Map>
typename Map::key_type state_key(const Map&, const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << p.unsafeGetTensorImpl();
    return os.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

SafeTensor to_safetensor(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kCPU).contiguous();
  SafeTensor st;
  if (c.scalar_type() == torch::kFloat32) st.dtype = "F32";
  else if (c.scalar_type() == torch::kUInt8) st.dtype = "U8";
  else throw std::runtime_error("checkpoint: unsupported tensor type");
  st.shape = c.sizes().vec();
  st.data.resize(static_cast<std::size_t>(c.nbytes()));
  std::memcpy(st.data.data(), c.data_ptr(), st.data.size());
  return st;
}

torch::Tensor from_safetensor(const SafeTensor& st, const std::vector<std::int64_t>& shape, const char* dtype,
                              const std::string& what) {
  if (st.dtype != dtype || st.shape != shape)
    throw std::runtime_error("checkpoint: " + what + " has another dtype or shape than this head's");
  const auto type = std::string(dtype) == "F32" ? torch::kFloat32 : torch::kUInt8;
  return torch::from_blob(const_cast<std::uint8_t*>(st.data.data()), shape, type).clone();
}

// FNV-1a over a tensor's bytes, continuing from `h` (start: kFnvBasis). Copies to the host: it
// serves the digest (a diagnostic) and the reseed at load, never a step.
constexpr std::uint64_t kFnvBasis = 14695981039346656037ull;
std::uint64_t fnv(std::uint64_t h, const torch::Tensor& t) {
  const auto c = t.detach().to(torch::kCPU).contiguous();
  const auto* p = static_cast<const std::uint8_t*>(c.data_ptr());
  for (std::size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

TenantSlot::Digest TenantSlot::digest() const {
  Digest d{kFnvBasis, kFnvBasis, steps_};
  auto& state = optimizer_->state();
  for (const auto& item : head_->named_parameters()) {
    d.parameters = fnv(d.parameters, item.value());
    auto it = state.find(state_key(state, item.value()));
    if (it == state.end()) continue;
    const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    d.optimizer = fnv(fnv(d.optimizer, st.exp_avg()), st.exp_avg_sq());
    d.optimizer = (d.optimizer ^ static_cast<std::uint64_t>(st.step())) * 1099511628211ull;
  }
  // Everything else a checkpoint holds: the training RNG, and the published versions kept.
  d.optimizer = fnv(d.optimizer, rng_.get_state());
  for (const auto& [version, head] : versions_) {
    d.parameters = (d.parameters ^ version) * 1099511628211ull;
    for (const auto& item : head->named_parameters()) d.parameters = fnv(d.parameters, item.value());
  }
  return d;
}

std::uint64_t TenantSlot::checkpoint_bytes() const {
  std::uint64_t params = 0;
  for (const auto& p : head_->parameters()) params += p.nbytes();
  // The live head, its two AdamW moments, each version kept; and the RNG state and the manifests.
  return params * (3 + versions_.size()) + static_cast<std::uint64_t>(rng_.get_state().nbytes()) + 16384;
}

void TenantSlot::save(const std::string& path, const nlohmann::json& extra) const {
  SafeTensorsFile f;
  auto params = head_->named_parameters();
  auto& state = optimizer_->state();
  std::int64_t adam_step = 0;
  for (const auto& item : params) {
    f.tensors.emplace("head." + item.key(), to_safetensor(item.value()));
    auto it = state.find(state_key(state, item.value()));
    if (it == state.end()) continue;  // no step taken yet
    const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    f.tensors.emplace("adamw.exp_avg." + item.key(), to_safetensor(st.exp_avg()));
    f.tensors.emplace("adamw.exp_avg_sq." + item.key(), to_safetensor(st.exp_avg_sq()));
    adam_step = st.step();
  }
  f.tensors.emplace("rng", to_safetensor(rng_.get_state()));  // the host form of either kind
  std::vector<std::uint64_t> versions;
  for (const auto& [v, head] : versions_) {
    versions.push_back(v);
    for (const auto& item : head->named_parameters())
      f.tensors.emplace("version." + std::to_string(v) + "." + item.key(), to_safetensor(item.value()));
  }
  const auto& h = head_->spec();
  nlohmann::json manifest = {
      {"format", "nexus-slot-v1"},
      {"head", {{"kind", h.kind}, {"state_dim", h.state_dim}, {"action_dim", h.action_dim}, {"chunk", h.chunk},
                {"hidden", h.hidden}, {"flow_steps", h.flow_steps}, {"flow_noise", h.flow_noise},
                {"token_queries", h.token_queries}}},
      {"optimizer", {{"lr", config_.lr}, {"beta1", config_.beta1}, {"beta2", config_.beta2},
                     {"weight_decay", config_.weight_decay}, {"grad_clip", config_.grad_clip}}},
      {"steps", steps_},
      {"rng_device", device_.is_cuda() ? "cuda" : "cpu"},
      {"adamw_step", adam_step},
      {"versions", versions},
      {"published", published_},
      {"extra", extra}};
  if (h.adapter.rank > 0) manifest["head"]["adapter"] = adapter_to_json(h.adapter);
  f.metadata["nexus.manifest"] = manifest.dump();
  // Private to the daemon's user, each file written atomically: after a crash a checkpoint is
  // the previous one or this one (the manifest inside the .safetensors is the one loads read).
  write_safetensors(path + ".safetensors", f, 0600);
  daemon::write_private_file(path + ".json", manifest.dump(2) + "\n", 0600);
}

TenantSlot::Loaded TenantSlot::load(const std::string& path, std::int64_t feature_dim, torch::Device device) {
  const SafeTensorsFile f = read_safetensors(path + ".safetensors");
  auto m = f.metadata.find("nexus.manifest");
  if (m == f.metadata.end()) throw std::runtime_error("checkpoint " + path + ": no manifest");
  const auto manifest = nlohmann::json::parse(m->second, nullptr, false);
  if (manifest.is_discarded() || manifest.value("format", "") != "nexus-slot-v1")
    throw std::runtime_error("checkpoint " + path + ": not a nexus-slot-v1 manifest");
  try {
    const auto& h = manifest.at("head");
    HeadSpec spec{h.at("kind"), h.at("state_dim"), h.at("action_dim"), h.at("chunk"),
                  h.at("hidden"), h.at("flow_steps"), h.at("flow_noise"),
                  h.value("token_queries", std::int64_t{0}),  // absent in checkpoints written before it
                  adapter_from_json(h)};
    const auto& o = manifest.at("optimizer");
    OptimizerConfig opt{o.at("lr"), o.at("beta1"), o.at("beta2"), o.at("weight_decay"), o.at("grad_clip")};
    auto slot = std::make_unique<TenantSlot>(spec, opt, feature_dim, 0, device);
    torch::NoGradGuard no_grad;
    auto& state = slot->optimizer_->state();
    const std::int64_t adam_step = manifest.at("adamw_step");
    for (auto& item : slot->head_->named_parameters()) {
      auto get = [&](const std::string& name) -> const SafeTensor& {
        auto it = f.tensors.find(name);
        if (it == f.tensors.end()) throw std::runtime_error("checkpoint " + path + ": no tensor " + name);
        return it->second;
      };
      const auto shape = item.value().sizes().vec();
      item.value().copy_(from_safetensor(get("head." + item.key()), shape, "F32", item.key()));
      if (adam_step > 0) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(adam_step);
        st->exp_avg(from_safetensor(get("adamw.exp_avg." + item.key()), shape, "F32", item.key()).to(device));
        st->exp_avg_sq(from_safetensor(get("adamw.exp_avg_sq." + item.key()), shape, "F32", item.key()).to(device));
        state[state_key(state, item.value())] = std::move(st);
      }
    }
    auto rng = f.tensors.find("rng");
    if (rng == f.tensors.end()) throw std::runtime_error("checkpoint " + path + ": no rng state");
    const auto rng_state = from_safetensor(rng->second, rng->second.shape, "U8", "rng");
    if (manifest.value("rng_device", "cpu") == (device.is_cuda() ? "cuda" : "cpu")) {
      slot->rng_.set_state(rng_state);
    } else {  // another kind of generator's state: reseed from it (see header)
      slot->rng_ = seeded_generator(device, fnv(kFnvBasis, rng_state));
    }
    slot->steps_ = manifest.at("steps");
    // Published versions (checkpoints from before they were saved have none).
    for (const std::uint64_t v : manifest.value("versions", std::vector<std::uint64_t>{})) {
      auto copy = make_head(spec, feature_dim);
      copy->to(device);
      for (auto& item : copy->named_parameters()) {
        const auto name = "version." + std::to_string(v) + "." + item.key();
        auto it = f.tensors.find(name);
        if (it == f.tensors.end()) throw std::runtime_error("checkpoint " + path + ": no tensor " + name);
        item.value().copy_(from_safetensor(it->second, item.value().sizes().vec(), "F32", name));
        item.value().set_requires_grad(false);
      }
      copy->eval();
      slot->versions_.emplace(v, std::move(copy));
    }
    slot->published_ = manifest.value("published", slot->versions_.empty() ? 0 : slot->versions_.rbegin()->first);
    return {std::move(slot), manifest};
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("checkpoint " + path + ": bad manifest (" + e.what() + ")");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("checkpoint " + path + ": " + e.what());
  } catch (const c10::Error& e) {
    throw std::runtime_error("checkpoint " + path + ": " + e.what_without_backtrace());
  }
}

}  // namespace nexus::model
