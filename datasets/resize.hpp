// Resizing square RGB frames to the backbone's image size, at load (robomimic files hold 84-pixel
// frames, LIBERO's 128, the built-in backbones take 64).
//
// Shrinking averages each output pixel's footprint in the source, weighted by overlap (area
// resampling, as OpenCV's INTER_AREA): no source pixel is skipped, so nothing aliases. Enlarging
// interpolates bilinearly between the four nearest source pixels with pixel centres at +0.5 (as
// OpenCV's INTER_LINEAR). Both are separable and done here by hand: ~40 lines do not justify an
// image library in the daemon, and the same function serves the daemon and the tools that must
// prepare identical inputs (eval_tenant's held-out error).
#pragma once
#include <cstdint>

namespace nexus::datasets {

// src: uint8 [from, from, 3]; dst: uint8 [to, to, 3]. from, to >= 1. Equal sizes copy.
void resize_rgb(const std::uint8_t* src, std::int64_t from, std::uint8_t* dst, std::int64_t to);

}  // namespace nexus::datasets
