// nexus.Tensor: a tensor in the attachment's shared arena. numpy arrays (buffer protocol,
// .numpy()) and torch tensors (.torch()) made from it are views of the arena, not copies: what
// Python writes through them is what nexusd reads in place.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "native.hpp"

namespace nexus::python {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::UInt8: return "uint8";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (auto d : {DType::UInt8, DType::Int32, DType::Int64, DType::Float16, DType::BFloat16, DType::Float32,
                 DType::Float64})
    if (name == dtype_name(d)) return d;
  throw py::value_error("nexus tensors are uint8, int32, int64, float16, bfloat16, float32 or float64, not " + name);
}

py::dtype numpy_dtype(DType dtype) {
  // numpy has no bfloat16: its bits are shown as uint16 (.torch() gives the real dtype).
  return py::dtype(dtype == DType::BFloat16 ? std::string("uint16") : std::string(dtype_name(dtype)));
}

namespace {

std::string buffer_format(DType dtype) {
  switch (dtype) {
    case DType::UInt8: return py::format_descriptor<std::uint8_t>::format();
    case DType::Int32: return py::format_descriptor<std::int32_t>::format();
    case DType::Int64: return py::format_descriptor<std::int64_t>::format();
    case DType::Float16: return "e";
    case DType::BFloat16: return py::format_descriptor<std::uint16_t>::format();
    case DType::Float32: return py::format_descriptor<float>::format();
    case DType::Float64: return py::format_descriptor<double>::format();
  }
  return "B";
}

std::vector<py::ssize_t> c_strides(const Tensor& t) {
  std::vector<py::ssize_t> strides(t.shape().size());
  py::ssize_t step = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  for (std::size_t i = strides.size(); i-- > 0;) {
    strides[i] = step;
    step *= static_cast<py::ssize_t>(t.shape()[i]);
  }
  return strides;
}

const Tensor& host_tensor(const PyTensor& p) {
  if (p.tensor.device() >= 0)
    throw py::value_error("this tensor is in a CUDA region on cuda:" + std::to_string(p.tensor.device()) +
                          ": the host cannot read it; use .torch() for a torch.cuda view");
  return p.tensor;
}

// A view of the arena whose base is the Tensor object: the array keeps the tensor (and so the
// attachment) alive as long as it lives.
py::array as_numpy(py::object self) {
  const Tensor& t = host_tensor(self.cast<PyTensor&>());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  return py::array(numpy_dtype(t.dtype()), shape, c_strides(t), t.raw().data(), self);
}

// A torch.cuda tensor over a CUDA region's bytes, through __cuda_array_interface__ (version 3,
// no stream: nexusd's writes are complete when its reply arrives). The interface object holds
// the nexus.Tensor, so the region stays mapped while the torch tensor lives.
py::object cuda_view(py::object torch, py::object self) {
  const auto& p = self.cast<PyTensor&>();
  const Tensor& t = p.tensor;
  static const char* typestr[] = {"|u1", "<i4", "<i8", "<f2", "<i2", "<f4", "<f8"};  // DType order; bf16 as i2
  py::dict cai;
  cai["shape"] = py::tuple(py::cast(t.shape()));
  cai["typestr"] = typestr[static_cast<int>(t.dtype())];
  cai["data"] = py::make_tuple(t.device_address(), false);
  cai["version"] = 3;
  py::object holder = py::module_::import("types").attr("SimpleNamespace")();
  holder.attr("__cuda_array_interface__") = cai;
  holder.attr("tensor") = self;
  py::object view = torch.attr("as_tensor")(holder, py::arg("device") = "cuda:" + std::to_string(t.device()));
  return t.dtype() == DType::BFloat16 ? view.attr("view")(torch.attr("bfloat16")) : view;
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<PyTensor, std::shared_ptr<PyTensor>>(m, "Tensor", py::buffer_protocol(),
                                                   "A tensor in the shared arena (Client.alloc).")
      .def_buffer([](PyTensor& p) {
        const Tensor& t = host_tensor(p);
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
        return py::buffer_info(t.raw().data(), static_cast<py::ssize_t>(dtype_size(t.dtype())),
                               buffer_format(t.dtype()), static_cast<py::ssize_t>(shape.size()), shape,
                               c_strides(t));
      })
      .def_property_readonly("dtype", [](const PyTensor& p) { return dtype_name(p.tensor.dtype()); })
      .def_property_readonly("shape", [](const PyTensor& p) { return py::tuple(py::cast(p.tensor.shape())); })
      .def_property_readonly("offset", [](const PyTensor& p) { return p.tensor.offset(); },
                             "Byte offset in the arena: what requests send instead of the bytes.")
      .def_property_readonly("nbytes", [](const PyTensor& p) { return p.tensor.bytes(); })
      .def("numpy", &as_numpy, "A numpy view of the arena bytes (no copy; bfloat16 shows as uint16).")
      .def("torch", [](py::object self) {
        py::object torch = py::module_::import("torch");
        if (self.cast<PyTensor&>().tensor.device() >= 0) return cuda_view(torch, self);
        py::object array = as_numpy(self);
        if (self.cast<PyTensor&>().tensor.dtype() != DType::BFloat16) return torch.attr("from_numpy")(array);
        // bfloat16's bits go through int16 (torch 1.13, Debian's, has no uint16), then are re-viewed.
        return torch.attr("from_numpy")(array.attr("view")(py::dtype("int16"))).attr("view")(torch.attr("bfloat16"));
      }, "A torch tensor over the arena bytes, or a torch.cuda one over a CUDA region's (no copy).")
      .def("__len__", [](const PyTensor& p) { return p.tensor.shape().empty() ? 0 : p.tensor.shape()[0]; })
      .def("__repr__", [](const PyTensor& p) {
        std::string dims;
        for (auto d : p.tensor.shape()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
        return std::string("nexus.Tensor(") + dtype_name(p.tensor.dtype()) + ", [" + dims +
               "], offset=" + std::to_string(p.tensor.offset()) + ")";
      });
}

}  // namespace nexus::python
