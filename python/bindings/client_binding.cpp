// nexus.Client and its futures. Every call that waits on nexusd releases the GIL, so other
// Python threads (and an asyncio loop awaiting a future) run meanwhile.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "native.hpp"

namespace nexus::python {
namespace {

// A reply that may not have arrived. Holds the request's input tensors until it has (the
// daemon reads them in place: freeing one early would let the arena reuse its bytes), and
// the session, which the underlying nexus::Future must not outlive.
template <class T>
struct PyFuture {
  PyFuture(std::shared_ptr<Session> s, Future<T> f, py::tuple in)
      : session(std::move(s)), future(f), inputs(std::move(in)) {}
  std::shared_ptr<Session> session;
  Future<T> future;
  py::tuple inputs;
  std::mutex mutex;  // one waiter drives the reply; a second waits for the first
  std::optional<T> value;

  bool done() {
    std::lock_guard lock(mutex);
    return value.has_value() || future.ready();
  }
  T result(std::optional<double> timeout) {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex);
    if (!value) value = future.get(timeout ? std::optional(timeout_of(*timeout)) : std::nullopt);
    return *value;
  }
};

py::array_t<float> prediction_array(Prediction p) {
  auto* owned = new std::vector<float>(std::move(p.actions));
  py::capsule free_it(owned, [](void* v) { delete static_cast<std::vector<float>*>(v); });
  std::vector<py::ssize_t> shape(p.shape.begin(), p.shape.end());
  return py::array_t<float>(shape, owned->data(), free_it);
}

template <class T, class Out = T>
void bind_future(py::module_& m, const char* name, Out (*convert)(T)) {
  py::class_<PyFuture<T>, std::shared_ptr<PyFuture<T>>>(m, name, "A reply that may not have arrived yet.")
      .def("done", &PyFuture<T>::done, "Whether the reply has arrived (never waits).")
      .def("result", [convert](PyFuture<T>& f, std::optional<double> timeout) { return convert(f.result(timeout)); },
           py::arg("timeout") = py::none(),
           "Waits for the reply (at most `timeout` seconds, else the client's) and returns it; raises nexus.Error.")
      .def_property_readonly("request_id", [](const PyFuture<T>& f) { return f.future.request_id(); });
}

class PyClient {
 public:
  explicit PyClient(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  Client& client() const {
    if (!session_) throw py::value_error("this nexus.Client is closed");
    return *session_->client;
  }
  const std::shared_ptr<Session>& session() const {
    client();
    return session_;
  }
  // A tensor of this attachment: another client's offsets would name bytes of this arena.
  const Tensor& mine(const PyTensor& t, const char* what) const {
    if (t.session != session()) throw py::value_error(std::string(what) + " belongs to another nexus.Client's arena");
    return t.tensor;
  }
  Observation observation(const PyTensor& images, const PyTensor& tokens, const PyTensor& mask,
                          const PyTensor* state) const {
    return {&mine(images, "images"), &mine(tokens, "tokens"), &mine(mask, "token_mask"),
            state ? &mine(*state, "state") : nullptr};
  }
  void close() { session_.reset(); }

 private:
  std::shared_ptr<Session> session_;
};

// Runs f(Client&) without the GIL. The session is copied first, with the GIL held: a close()
// on another thread then cannot end the attachment under the call.
template <class F>
auto unlocked(const PyClient& self, F&& f) {
  const std::shared_ptr<Session> session = self.session();
  py::gil_scoped_release release;
  return f(*session->client);
}

std::shared_ptr<PyTensor> wrap(const PyClient& c, Tensor t) {
  return std::make_shared<PyTensor>(PyTensor{c.session(), std::move(t)});
}

// A region of this process's memory that nexusd maps too; its tensors belong to the attachment
// that registered it (their ids mean nothing to another).
struct PyRegion {
  std::shared_ptr<Session> session;
  Region region;
};

DType dtype_of(py::object dtype) {
  return dtype_from_name(py::isinstance<py::str>(dtype) ? dtype.cast<std::string>()
                                                        : py::str(py::dtype::from_args(dtype).attr("name")).cast<std::string>());
}

ClientOptions client_options(const std::string& tenant, const std::string& socket_path, std::uint32_t ring_bytes,
                             std::uint64_t client_arena_bytes, std::uint64_t output_arena_bytes,
                             const std::string& wait, double timeout, bool block_when_full) {
  ClientOptions o;
  o.tenant = tenant;
  o.socket_path = socket_path;
  o.ring_bytes = ring_bytes;
  o.client_arena_bytes = client_arena_bytes;
  o.output_arena_bytes = output_arena_bytes;
  if (wait == "adaptive") o.wait = WaitMode::Adaptive;
  else if (wait == "spin") o.wait = WaitMode::Spin;
  else if (wait == "block") o.wait = WaitMode::Block;
  else throw py::value_error("wait is adaptive, spin or block");
  o.timeout = timeout_of(timeout);
  o.block_when_full = block_when_full;
  return o;
}

template <class T>
T as_is(T r) {
  return r;
}

void bind_model_calls(py::class_<PyClient>& c) {
  using T = const PyTensor&;
  c.def("register", [](PyClient& self, const TenantSpec& spec) {
     return unlocked(self, [&](Client& c) { return c.register_tenant(spec); });
   }, py::arg("spec"), "Creates (or replaces) this tenant's slot: head, optimizer, views.")
      .def("backbone", [](PyClient& self) { return unlocked(self, [&](Client& c) { return c.backbone(); }); })
      .def("sft_step_async", [](PyClient& self, py::object images, py::object tokens, py::object mask,
                                py::object actions, py::object state) {
        const PyTensor* st = state.is_none() ? nullptr : &state.cast<PyTensor&>();
        const auto obs = self.observation(images.cast<T>(), tokens.cast<T>(), mask.cast<T>(), st);
        const Tensor& a = self.mine(actions.cast<T>(), "actions");
        auto f = unlocked(self, [&](Client& c) { return c.sft_step_async(obs, a); });
        return std::make_shared<PyFuture<SftResult>>(self.session(), f, py::make_tuple(images, tokens, mask, actions, state));
      }, py::arg("images"), py::arg("tokens"), py::arg("token_mask"), py::arg("actions"), py::arg("state") = py::none())
      .def("predict_async", [](PyClient& self, py::object images, py::object tokens, py::object mask,
                               py::object state, std::uint64_t version, const std::string& dataset) {
        const PyTensor* st = state.is_none() ? nullptr : &state.cast<PyTensor&>();
        const auto obs = self.observation(images.cast<T>(), tokens.cast<T>(), mask.cast<T>(), st);
        auto f = unlocked(self, [&](Client& c) { return c.predict_async(obs, version, dataset); });
        return std::make_shared<PyFuture<Prediction>>(self.session(), f, py::make_tuple(images, tokens, mask, state));
      }, py::arg("images"), py::arg("tokens"), py::arg("token_mask"), py::arg("state") = py::none(),
         py::arg("version") = 0, py::arg("dataset") = "")
      .def("features_async", [](PyClient& self, py::object images, py::object tokens, py::object mask, py::object out) {
        const auto obs = self.observation(images.cast<T>(), tokens.cast<T>(), mask.cast<T>(), nullptr);
        const Tensor& o = self.mine(out.cast<T>(), "out");
        auto f = unlocked(self, [&](Client& c) { return c.features_async(obs, o); });
        return std::make_shared<PyFuture<FeaturesResult>>(self.session(), f, py::make_tuple(images, tokens, mask, out));
      }, py::arg("images"), py::arg("tokens"), py::arg("token_mask"), py::arg("out"),
         "Features mode: the backbone's pooled features, float32 [n, dim], written by nexusd into `out`.")
      .def("register_host_region", [](PyClient& self, std::uint64_t nbytes) {
        auto region = unlocked(self, [&](Client& c) { return c.register_host_region(nbytes); });
        return PyRegion{self.session(), std::move(region)};
      }, py::arg("nbytes"), "Memory of yours that nexusd maps too (needs [ipc] allow_device_regions).")
      .def("register_device_region", [](PyClient& self, std::uint64_t nbytes, int device) {
        auto region = unlocked(self, [&](Client& c) { return c.register_device_region(nbytes, device); });
        return PyRegion{self.session(), std::move(region)};
      }, py::arg("nbytes"), py::arg("device") = 0,
         "CUDA memory of yours on `device` that nexusd maps too (cuMemCreate; raises WrongMessageType without a driver).")
      .def("unregister_region", [](PyClient& self, const PyRegion& r) {
        if (r.session != self.session()) throw py::value_error("region belongs to another nexus.Client");
        unlocked(self, [&](Client& c) { c.unregister_region(r.region); });
      }, py::arg("region"))
      .def("publish", [](PyClient& self) { return unlocked(self, [&](Client& c) { return c.publish(); }); })
      .def("slot_digest", [](PyClient& self) { return unlocked(self, [&](Client& c) { return c.slot_digest(); }); })
      .def("save", [](PyClient& self, const std::string& tag) { return unlocked(self, [&](Client& c) { return c.save(tag); }); }, py::arg("tag"))
      .def("load", [](PyClient& self, const std::string& tag) { return unlocked(self, [&](Client& c) { return c.load(tag); }); }, py::arg("tag"))
      .def("digest_async", [](PyClient& self, py::object t) {
        const Tensor& tensor = self.mine(t.cast<T>(), "tensor");
        auto f = unlocked(self, [&](Client& c) { return c.digest_async(tensor); });
        return std::make_shared<PyFuture<DigestResult>>(self.session(), f, py::make_tuple(t));
      }, py::arg("tensor"), "FNV-1a of the tensor's bytes as nexusd reads them in place.")
      .def("ping", [](PyClient& self, py::bytes payload) {
        const std::string bytes = payload;
        std::vector<std::uint8_t> echo;
        echo = unlocked(self, [&](Client& c) {
          return c.ping({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
        });
        return py::bytes(reinterpret_cast<const char*>(echo.data()), echo.size());
      }, py::arg("payload"));
}

void bind_env_calls(py::class_<PyClient>& c) {
  using T = const PyTensor&;
  c.def("dataset_load", [](PyClient& self, const std::string& name, const std::string& path, std::uint64_t seed,
                           std::vector<std::string> views, std::vector<std::string> state_keys, bool normalize,
                           const std::string& instruction) {
     DatasetOptions o{seed, std::move(views), std::move(state_keys), normalize, instruction};
     return unlocked(self, [&](Client& c) { return c.dataset_load(name, path, o); });
   }, py::arg("name"), py::arg("path"), py::arg("seed") = 0, py::arg("views") = std::vector<std::string>{},
      py::arg("state_keys") = std::vector<std::string>{}, py::arg("normalize") = false, py::arg("instruction") = "",
      "Opens `path` here, with your permissions, and hands nexusd the open file.")
      .def("dataset_sft_step_async", [](PyClient& self, const std::string& name, std::int32_t batch, std::int32_t chunk) {
        auto f = unlocked(self, [&](Client& c) { return c.dataset_sft_step_async(name, batch, chunk); });
        return std::make_shared<PyFuture<SftResult>>(self.session(), f, py::tuple());
      }, py::arg("name"), py::arg("batch"), py::arg("chunk") = 1)
      .def("env_open", [](PyClient& self, const std::string& task, std::int32_t count, std::int32_t max_steps) {
        return unlocked(self, [&](Client& c) { return c.env_open(task, count, max_steps); });
      }, py::arg("task"), py::arg("count"), py::arg("max_steps") = 0)
      .def("env_reset", [](PyClient& self, std::vector<std::uint64_t> ids, std::vector<std::uint64_t> seeds,
                           T images, T state) {
        const Tensor& i = self.mine(images, "images");
        const Tensor& s = self.mine(state, "state");
        return unlocked(self, [&](Client& c) { return c.env_reset(ids, seeds, i, s); });
      }, py::arg("ids"), py::arg("seeds"), py::arg("images"), py::arg("state"))
      .def("env_step", [](PyClient& self, std::vector<std::uint64_t> ids,
                          py::array_t<float, py::array::c_style | py::array::forcecast> actions, T images, T state) {
        const Tensor& i = self.mine(images, "images");
        const Tensor& s = self.mine(state, "state");
        const std::vector<float> a(actions.data(), actions.data() + actions.size());
        return unlocked(self, [&](Client& c) { return c.env_step(ids, a, i, s); });
      }, py::arg("ids"), py::arg("actions"), py::arg("images"), py::arg("state"))
      .def("env_close", [](PyClient& self, std::vector<std::uint64_t> ids) { return unlocked(self, [&](Client& c) { return c.env_close(ids); }); }, py::arg("ids"))
      .def("rl_start", [](PyClient& self, const RlOptions& o) { return unlocked(self, [&](Client& c) { return c.rl_start(o); }); }, py::arg("options"))
      .def("rl_status", [](PyClient& self, bool stop) { return unlocked(self, [&](Client& c) { return c.rl_status(stop); }); }, py::arg("stop") = false)
      .def("job_start", [](PyClient& self, const JobSpec& s) { return unlocked(self, [&](Client& c) { return c.job_start(s); }); }, py::arg("spec"))
      .def("job", [](PyClient& self, std::uint64_t id) { return unlocked(self, [&](Client& c) { return c.job(id); }); }, py::arg("id"))
      .def("jobs", [](PyClient& self) { return unlocked(self, [&](Client& c) { return c.jobs(); }); })
      .def("job_cancel", [](PyClient& self, std::uint64_t id) { return unlocked(self, [&](Client& c) { return c.job_cancel(id); }); }, py::arg("id"));
}

}  // namespace

void bind_client(py::module_& m) {
  bind_tensor(m);
  bind_future<SftResult>(m, "SftFuture", &as_is<SftResult>);
  bind_future<Prediction, py::array_t<float>>(m, "PredictionFuture", &prediction_array);
  bind_future<DigestResult>(m, "DigestFuture", &as_is<DigestResult>);
  bind_future<FeaturesResult>(m, "FeaturesFuture", &as_is<FeaturesResult>);
  py::class_<PyRegion>(m, "Region", "Memory of yours that nexusd maps too (Client.register_host_region, "
                                    "Client.register_device_region).")
      .def_property_readonly("id", [](const PyRegion& r) { return r.region.id(); })
      .def_property_readonly("nbytes", [](const PyRegion& r) { return r.region.bytes(); })
      .def_property_readonly("device", [](const PyRegion& r) { return r.region.device(); },
                             "-1 for host memory, else the CUDA device the region is on.")
      .def_property_readonly("device_address", [](const PyRegion& r) { return r.region.device_address(); })
      .def("tensor", [](const PyRegion& r, py::object dtype, std::vector<std::int64_t> shape, std::uint64_t offset) {
        return std::make_shared<PyTensor>(
            PyTensor{r.session, r.region.tensor(dtype_of(dtype), std::move(shape), offset)});
      }, py::arg("dtype"), py::arg("shape"), py::arg("offset"),
         "A tensor at `offset` in the region (no copy; in a CUDA region only .torch() views it).");

  py::class_<PyClient> c(m, "Client", "A tenant's attachment to nexusd (Client.attach).");
  c.def_static("attach", [](const std::string& tenant, const std::string& socket_path, std::uint32_t ring_bytes,
                            std::uint64_t client_arena_bytes, std::uint64_t output_arena_bytes, const std::string& wait,
                            double timeout, bool block_when_full) {
     const auto o = client_options(tenant, socket_path, ring_bytes, client_arena_bytes, output_arena_bytes, wait,
                                   timeout, block_when_full);
     std::unique_ptr<Client> client;
     {
       py::gil_scoped_release release;
       client = Client::attach(o);
     }
     return PyClient(std::make_shared<Session>(Session{std::move(client)}));
   }, py::arg("tenant"), py::arg("socket_path") = "/run/nexus/nexusd.sock", py::arg("ring_bytes") = 256 * 1024,
      py::arg("client_arena_bytes") = 64ull << 20, py::arg("output_arena_bytes") = 16ull << 20,
      py::arg("wait") = "adaptive", py::arg("timeout") = 10.0, py::arg("block_when_full") = true,
      "Connects, authenticates as your uid, maps the shared segment; raises nexus.Error.")
      .def_property_readonly("session_id", [](const PyClient& self) { return self.client().session_id(); })
      .def_property_readonly("tenant", [](const PyClient& self) { return self.client().options().tenant; })
      .def_property_readonly("closed", [](const PyClient& self) {
        try {
          self.client();
          return false;
        } catch (const py::value_error&) {
          return true;
        }
      })
      .def("alloc", [](PyClient& self, py::object dtype, std::vector<std::int64_t> shape) {
        return wrap(self, self.client().alloc(dtype_of(dtype), std::move(shape)));
      }, py::arg("dtype"), py::arg("shape"), "A tensor in the shared arena (uninitialised).")
      .def("from_numpy", [](PyClient& self, py::array array) {
        py::array c = py::array::ensure(array, py::array::c_style);
        const std::string name = py::str(c.dtype().attr("name")).cast<std::string>();
        std::vector<std::int64_t> shape(c.shape(), c.shape() + c.ndim());
        auto t = wrap(self, self.client().alloc(dtype_from_name(name), std::move(shape)));
        std::memcpy(t->tensor.raw().data(), c.data(), t->tensor.bytes());
        return t;
      }, py::arg("array"), "A tensor in the arena holding a copy of `array` (its dtype and shape).")
      .def("close", &PyClient::close,
           "Lets go of the attachment: it ends when no tensor, array or future of it is left.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& self, py::args) { self.close(); });
  bind_model_calls(c);
  bind_env_calls(c);
}

}  // namespace nexus::python
