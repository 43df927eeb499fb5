// A tenant slot's persistent form: its digest (a diagnostic), the size and the writing of its
// checkpoint (safetensors + a JSON sidecar, private to the tenant's user), and loading one back.
// Split from tenant_slot.cpp, which keeps the training and serving paths.
#include <cstring>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "daemon/model/devices.hpp"
#include "daemon/model/safetensors.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "daemon/state/private_files.hpp"

namespace nexus::model {

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
  f.tensors.emplace("rng", to_safetensor(rng_.get_state()));
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
      {"rng_device", "cpu"},  // the generator's kind, on every device (devices.hpp)
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
    if (manifest.value("rng_device", "cpu") == "cpu") {
      slot->rng_.set_state(rng_state);
    } else {  // a CUDA Philox state, saved before every slot's stream was a CPU one (see header)
      slot->rng_ = seeded_generator(fnv(kFnvBasis, rng_state));
    }
    slot->steps_ = manifest.at("steps");
    // Published versions (checkpoints from before they were saved have none).
    for (const std::uint64_t v : manifest.value("versions", std::vector<std::uint64_t>{})) {
      auto copy = [&] {
        const auto lock = lock_global_generator();  // overwritten below, but drawn: devices.hpp
        return make_head(spec, feature_dim);
      }();
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
