// The `nexus._native` extension: pybind11 over libnexus. Shared declarations of its
// translation units (module.cpp: module, errors, status, synth; records.cpp: the plain structs;
// tensor_binding.cpp, client_binding.cpp: Tensor, Client, futures; ext_binding.cpp: the
// external-environment frames).
//
// Lifetime invariant: a Tensor's bytes live in the attachment's mapped arena, and numpy arrays
// and torch tensors made from it point there without a copy. So every Python object that can
// reach arena memory (Tensor, its arrays through their base, Future) holds a shared_ptr to the
// Session; the attachment ends (the arena is unmapped) only when the last of them is gone, never
// under a live array.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>

#include "nexus/client.hpp"

namespace nexus::python {

namespace py = pybind11;

struct Session {
  std::unique_ptr<Client> client;
};

struct PyTensor {
  std::shared_ptr<Session> session;
  Tensor tensor;
};

// Binds the struct types of nexus/{tenant,env,status}.hpp (records.cpp).
void bind_records(py::module_& m);
// Binds Tensor (tensor_binding.cpp), then Client and the futures (client_binding.cpp).
void bind_tensor(py::module_& m);
void bind_client(py::module_& m);
// Binds ExtConnection, the external-environment frames (ext_binding.cpp).
void bind_ext(py::module_& m);

// A timeout given in seconds (a positive number, else ValueError), as libnexus takes it.
std::chrono::milliseconds timeout_of(double seconds);

// numpy's dtype for a wire dtype (bfloat16 as uint16: numpy has none) and back by name.
py::dtype numpy_dtype(DType dtype);
DType dtype_from_name(const std::string& name);
const char* dtype_name(DType dtype);

}  // namespace nexus::python
