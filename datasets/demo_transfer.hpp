// A decoded demonstration file (DemoFile) as bytes in a file descriptor: how the sandboxed reader
// (nexus-dataset-reader) hands what it parsed back to nexusd, through a sealed memfd.
//
//   "NXDEMO1\0"  u32 meta_len, meta JSON  u32 episodes
//   per episode: u32 len, episode JSON (name, instruction, steps, flags), then its arrays raw, in
//                the order images, proprio, actions, sim_states, rewards, dones (sizes implied by
//                steps and the meta's widths; sim_states may be empty)
//
// Written by hand rather than with FlatBuffers: the arrays are large (FlatBuffers caps a buffer
// at 2 GiB) and are read straight into the Episode's vectors, with no buffer in between.
//
// read_demo_transfer treats the bytes as hostile (they come from a process that parsed a
// tenant's file): every length is checked against the widths and the bytes that remain before
// anything is allocated, at most `max_bytes` are held, and actions and state must be finite.
#pragma once
#include <cstdint>

#include "datasets/demo_file.hpp"

namespace nexus::datasets {

// Writes `file` at fd's current offset; throws DatasetError on a failed write.
void write_demo_transfer(int fd, const DemoFile& file);
// Reads it back from offset 0 of `fd` (whose size is `size`); throws DatasetError.
DemoFile read_demo_transfer(int fd, std::uint64_t size, std::uint64_t max_bytes);
// The bytes a DemoFile holds in memory (what a dataset is charged).
std::uint64_t held_bytes(const DemoFile& file);

}  // namespace nexus::datasets
