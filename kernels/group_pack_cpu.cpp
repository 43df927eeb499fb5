#include <span>

#include "kernels/group_pack.hpp"

namespace nexus::kernels {

// Written by hand: it is the reference the CUDA kernel is held to, so it spells out the index
// arithmetic the kernel uses, in the output's order.
void group_pack_cpu(const PackSource* sources, std::size_t count, const PackGeometry& g, float* out) {
  const std::int64_t s = g.image_size, p = g.patch, grid = s / p;
  for (const PackSource& src : std::span(sources, count))
    for (std::int64_t n = 0; n < src.samples; ++n)
      for (std::int64_t v = 0; v < g.views; ++v) {
        const std::uint8_t* img = src.images + (n * g.views + v) * s * s * 3;
        for (std::int64_t gy = 0; gy < grid; ++gy)
          for (std::int64_t gx = 0; gx < grid; ++gx)
            for (std::int64_t py = 0; py < p; ++py)
              for (std::int64_t px = 0; px < p; ++px)
                for (std::int64_t c = 0; c < 3; ++c)
                  *out++ = static_cast<float>(img[((gy * p + py) * s + gx * p + px) * 3 + c]) / 255.0f - 0.5f;
      }
}

}  // namespace nexus::kernels
