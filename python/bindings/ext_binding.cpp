// nexus._native.ExtConnection: the frames of the external-environment protocol (nexus.fbs,
// ExtMessage) on one connected socket, for nexus.environment's server. The C++ side encodes and
// verifies the FlatBuffers (schema/ext_frame.hpp, the same code nexusd and examples/external_env
// use), so the Python SDK needs no flatbuffers package and cannot drift from the schema; the
// Python side owns the socket and the simulator.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "native.hpp"
#include "schema/ext_frame.hpp"

namespace nexus::python {
namespace {

class ExtConnection {
 public:
  explicit ExtConnection(int fd) : fd_(fd) {
    if (fd < 0) throw py::value_error("ExtConnection needs a connected socket's file descriptor");
  }

  // ("open", task, image_size, max_steps, sessions) | ("reset", [session], [seed]) |
  // ("step", [session], float32 actions, flat: action_dim per named session) | ("closed", why):
  // the peer closed, the wait timed out, or the bytes were not a valid frame.
  py::tuple recv(double timeout_s) {
    const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
    std::string why;
    const wire::ExtMessage* m = nullptr;
    {
      py::gil_scoped_release release;
      m = schema::recv_ext(fd_, timeout, buffer_, why);
    }
    if (!m) return py::make_tuple("closed", why);
    request_ = m->id();  // the next reply answers this request
    auto indices = [](const flatbuffers::Vector<std::uint32_t>* v) {
      return v ? std::vector<std::uint32_t>(v->begin(), v->end()) : std::vector<std::uint32_t>{};
    };
    switch (m->body_type()) {
      case wire::ExtBody::ExtOpen: {
        const auto* o = m->body_as_ExtOpen();
        return py::make_tuple("open", o->task() ? o->task()->str() : "", o->image_size(), o->max_steps(), o->sessions());
      }
      case wire::ExtBody::ExtReset: {
        const auto* r = m->body_as_ExtReset();
        return py::make_tuple("reset", indices(r->sessions()),
                              r->seeds() ? std::vector<std::uint64_t>(r->seeds()->begin(), r->seeds()->end())
                                         : std::vector<std::uint64_t>{});
      }
      case wire::ExtBody::ExtStep: {
        const auto* st = m->body_as_ExtStep();
        const auto* a = st->actions();
        // Shape as a container: Debian's pybind11 2.10 built as C++20 gives array_t(count) a
        // stride of 0 (every element reads the first), which a test caught.
        py::array_t<float> actions(std::vector<py::ssize_t>{a ? static_cast<py::ssize_t>(a->size()) : 0});
        if (a && a->size() > 0) std::memcpy(actions.mutable_data(), a->data(), a->size() * sizeof(float));
        return py::make_tuple("step", indices(st->sessions()), actions);
      }
      default:
        return py::make_tuple("closed", std::string("unexpected message from nexusd"));
    }
  }

  bool send_spec(int image_size, int state_dim, int action_dim, int max_steps, const std::string& error) {
    flatbuffers::FlatBufferBuilder fbb(256);
    auto body = wire::CreateExtSpec(fbb, image_size, state_dim, action_dim, max_steps,
                                    error.empty() ? 0 : fbb.CreateString(error), schema::kExtProtocol);
    py::gil_scoped_release release;
    return schema::send_ext(fd_, fbb, wire::ExtBody::ExtSpec, body.Union(), request_);
  }

  // One reply for the sessions a reset or step named, in their order: each item is (reward, done,
  // success, image uint8 [H, W, 3] or None, state float32 [state_dim] or None, instruction,
  // error, bad_input, truncated).
  bool send_observations(const py::list& items) {
    using Bytes = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>;
    using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
    flatbuffers::FlatBufferBuilder fbb(16 * 1024);
    std::vector<flatbuffers::Offset<wire::ExtObservation>> out;
    for (const auto& handle : items) {
      const auto item = handle.cast<py::tuple>();
      if (item.size() != 9) throw py::value_error("an observation is a tuple of 9 (see ExtConnection.send_observations)");
      const py::object image = item[3], state = item[4];
      Bytes img = image.is_none() ? Bytes(std::vector<py::ssize_t>{0}) : Bytes::ensure(image);
      Floats st = state.is_none() ? Floats(std::vector<py::ssize_t>{0}) : Floats::ensure(state);
      if (!img || !st) throw py::value_error("an observation's image is uint8 [H, W, 3] and its state floats");
      const auto error = item[6].cast<std::string>();
      out.push_back(wire::CreateExtObservation(
          fbb, item[0].cast<float>(), item[1].cast<bool>(), item[2].cast<bool>(),
          fbb.CreateVector(img.data(), static_cast<std::size_t>(img.size())),
          fbb.CreateVector(st.data(), static_cast<std::size_t>(st.size())), fbb.CreateString(item[5].cast<std::string>()),
          fbb.CreateString(error), item[7].cast<bool>(), item[8].cast<bool>()));
    }
    const auto body = wire::CreateExtObservations(fbb, fbb.CreateVector(out));
    py::gil_scoped_release release;
    return schema::send_ext(fd_, fbb, wire::ExtBody::ExtObservations, body.Union(), request_);
  }

 private:
  int fd_;
  std::uint64_t request_ = 0;  // the id of the request last received: replies carry it
  std::vector<std::uint8_t> buffer_;
};

}  // namespace

void bind_ext(py::module_& m) {
  py::class_<ExtConnection>(m, "ExtConnection", "External-environment frames on a connected socket (not owned).")
      .def(py::init<int>(), py::arg("fd"))
      .def("recv", &ExtConnection::recv, py::arg("timeout"))
      .def("send_spec", &ExtConnection::send_spec, py::arg("image_size"), py::arg("state_dim"), py::arg("action_dim"),
           py::arg("max_steps"), py::arg("error") = "")
      .def("send_observations", &ExtConnection::send_observations, py::arg("observations"));
}

}  // namespace nexus::python
