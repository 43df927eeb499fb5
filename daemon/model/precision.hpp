// The frozen backbone's arithmetic on a replica: [model] precision (docs/design/gpu.md,
// "Precision"). The heads always get float32 features and train in float32.
//   float32  every op in float32: the default, and bitwise what the backbone always computed.
//   tf32     on CUDA, float32 matmuls and convolutions on TF32 tensor cores (products with a
//            10-bit mantissa, float32 sums). cuBLAS's switch is process-wide, so on that device
//            the heads' float32 matmuls use it too. A CPU has no TF32: there it is float32.
//   bf16     the backbone's pass (and an adapter's, gradients included) under autocast to
//            bfloat16 on its device: matmuls in bfloat16, norms and softmax in float32 as
//            autocast's op lists say; the features come back as float32. Its bound against
//            float32 is written down beside the test that holds it
//            (tests/model/precision_test.cpp) and in docs/design/gpu.md.
// Autocast is a thread's own state: a pass at bf16 on one executor lane changes nothing on the
// others.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/model/backbone.hpp"

namespace nexus::model {

enum class Precision { Float32, TF32, BF16 };

std::optional<Precision> parse_precision(std::string_view name);  // "float32", "tf32", "bf16"
std::string_view precision_name(Precision p);
// What `requested` computes on `device`: tf32 is float32 on a CPU.
Precision effective_precision(Precision requested, torch::Device device);
// [model] precision for a replica of backbone `kind` on `device`, effective; throws
// std::runtime_error for a name that is none, and for bf16 on an AOTInductor package (compiled
// code: it runs at the precision it was compiled in).
Precision configured_precision(const std::string& setting, const std::string& kind, torch::Device device);

// `inner`, whose passes then run at `precision` on `device`: float32 returns inner itself;
// tf32 switches cuBLAS's and cuDNN's TF32 on (process-wide) and returns inner; bf16 wraps it. An
// AdaptableBackbone stays one (its adapted passes run under the same autocast).
std::unique_ptr<Backbone> with_precision(std::unique_ptr<Backbone> inner, Precision precision, torch::Device device);

}  // namespace nexus::model
