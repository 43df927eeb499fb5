// nexus._native: the extension module the `nexus` package wraps. Errors become the
// nexus.errors classes (one per ErrorCode); daemon-wide calls (status, metrics, releasing a
// name, cancelling a job), the tokenizer and the synthetic scenes of the examples live here.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <string>

#include "native.hpp"
#include "synth/scenes.hpp"

namespace nexus::python {
namespace {

// nexus::Error -> the nexus.errors class for its code, carrying the code's number and the
// sentence libnexus wrote. The classes are Python (errors.py) so that users can subclass-match
// them and type checkers see them.
void translate_errors() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      const int code = static_cast<int>(e.code());
      py::object cls = py::module_::import("nexus.errors").attr("error_class")(code);
      py::object instance = cls(code, e.what());
      PyErr_SetObject(cls.ptr(), instance.ptr());
    }
  });
}

py::dict error_codes() {
  py::dict codes;
  for (int c = 1; c <= static_cast<int>(ErrorCode::LimitExceeded); ++c)
    codes[error_code_name(static_cast<ErrorCode>(c))] = c;
  for (auto c : {ErrorCode::ArenaFull, ErrorCode::ConnectFailed})
    codes[error_code_name(c)] = static_cast<int>(c);
  return codes;
}

void bind_synth(py::module_& m) {
  auto s = m.def_submodule("synth", "The synthetic scenes the C++ examples and tests train on.");
  py::class_<synth::SceneObject>(s, "SceneObject")
      .def_readonly("color", &synth::SceneObject::color).def_readonly("shape", &synth::SceneObject::shape)
      .def_readonly("x", &synth::SceneObject::x).def_readonly("y", &synth::SceneObject::y);
  py::class_<synth::Scene>(s, "Scene")
      .def_property_readonly("image", [](const synth::Scene& sc) {
        const auto side = static_cast<py::ssize_t>(std::lround(std::sqrt(sc.image.size() / 3.0)));
        py::array_t<std::uint8_t> a({side, side, py::ssize_t{3}});
        std::memcpy(a.mutable_data(), sc.image.data(), sc.image.size());
        return a;
      }, "uint8 [H, W, 3] RGB (a copy)")
      .def_readonly("objects", &synth::Scene::objects).def_readonly("target", &synth::Scene::target)
      .def_readonly("instruction", &synth::Scene::instruction);
  py::class_<synth::SceneGenerator>(s, "SceneGenerator", "Deterministic for a seed, like the C++ one.")
      .def(py::init([](std::uint64_t seed, int image_size, int objects, int object_radius, bool varied_phrasing) {
        if (image_size < 8 || image_size > 1024 || objects < 1 || objects > synth::kColors || object_radius < 1)
          throw py::value_error("image_size 8-1024, objects 1-4, object_radius >= 1");
        return synth::SceneGenerator(seed, {image_size, objects, object_radius, varied_phrasing});
      }), py::arg("seed"), py::arg("image_size") = 64, py::arg("objects") = 3, py::arg("object_radius") = 5,
          py::arg("varied_phrasing") = true)
      .def("next", &synth::SceneGenerator::next);
  s.def("reach_actions", [](const synth::Scene& scene, int chunk) {
    if (chunk < 1 || chunk > 64) throw py::value_error("chunk is 1-64");
    const auto a = synth::reach_actions(scene, chunk);
    py::array_t<float> out({static_cast<py::ssize_t>(chunk), py::ssize_t{2}});
    std::memcpy(out.mutable_data(), a.data(), a.size() * sizeof(float));
    return out;
  }, py::arg("scene"), py::arg("chunk"), "float32 [chunk, 2]: from the centre to the named object, in equal steps.");
}

}  // namespace

std::chrono::milliseconds timeout_of(double seconds) {
  if (!(seconds > 0) || seconds > 1e7) throw py::value_error("a timeout is a positive number of seconds");
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(seconds));
}

PYBIND11_MODULE(_native, m) {
  m.doc() = "libnexus for Python (the nexus package wraps this module).";
  // pybind11 loads numpy's C API on first use, inside a C++ function-local static whose
  // initialisation imports numpy (dropping the GIL on I/O). Two threads making their first
  // array at once (the simulator SDK's sessions did) then deadlock: one waits on the static,
  // holding the GIL, the other on the GIL inside it. Load it here, once, at import.
  (void)py::array_t<float>(std::vector<py::ssize_t>{1});
  translate_errors();
  m.def("error_codes", &error_codes, "Every nexus::ErrorCode by name.");
  bind_records(m);
  bind_client(m);
  m.def("tokenize", [](const std::string& text, const PyTensor& tokens, const PyTensor& mask, std::int64_t row) {
    tokenize(text, tokens.tensor, mask.tensor, row);
  }, py::arg("text"), py::arg("tokens"), py::arg("token_mask"), py::arg("row"),
     "The embedded tokenizer (one token per byte) into row `row` of int32 tokens / uint8 mask [n, max_tokens].");
  m.def("fnv1a", [](py::buffer b) {
    const py::buffer_info info = b.request();
    if (info.strides.size() > 0 && info.itemsize * info.size > 0) {
      py::ssize_t expected = info.itemsize;
      for (auto i = info.ndim; i-- > 0;) {
        if (info.strides[i] != expected) throw py::value_error("fnv1a needs a C-contiguous buffer");
        expected *= info.shape[i];
      }
    }
    return fnv1a({static_cast<const std::uint8_t*>(info.ptr), static_cast<std::size_t>(info.itemsize * info.size)});
  }, py::arg("buffer"), "FNV-1a 64 of a buffer's bytes: what Client.digest returns for them.");
  m.def("query_status", [](const std::string& socket_path, double timeout, double usage_since_s) {
    const auto t = timeout_of(timeout);
    py::gil_scoped_release release;
    return query_status(socket_path, t, usage_since_s);
  }, py::arg("socket_path") = "/run/nexus/nexusd.sock", py::arg("timeout") = 5.0, py::arg("usage_since_s") = 0.0);
  m.def("query_metrics", [](const std::string& socket_path, double timeout) {
    const auto t = timeout_of(timeout);
    py::gil_scoped_release release;
    return query_metrics(socket_path, t);
  }, py::arg("socket_path") = "/run/nexus/nexusd.sock", py::arg("timeout") = 5.0);
  m.def("release_tenant", [](const std::string& socket_path, const std::string& tenant, double timeout) {
    const auto t = timeout_of(timeout);
    py::gil_scoped_release release;
    release_tenant(socket_path, tenant, t);
  }, py::arg("socket_path"), py::arg("tenant"), py::arg("timeout") = 5.0);
  m.def("cancel_job", [](const std::string& socket_path, std::uint64_t job, double timeout) {
    const auto t = timeout_of(timeout);
    py::gil_scoped_release release;
    return cancel_job(socket_path, job, t);
  }, py::arg("socket_path"), py::arg("job"), py::arg("timeout") = 5.0);
  bind_ext(m);
  bind_synth(m);
}

}  // namespace nexus::python
