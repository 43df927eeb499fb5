// Files nexusd keeps on tenants' behalf (name bindings, checkpoints, evicted slots): private to
// the daemon's user and written so that a crash never leaves half a file.
//
// write_private_file: a new temporary file beside the target (O_EXCL, O_NOFOLLOW, the given
// mode), all bytes written and fsync'd, renamed over the target, then the directory fsync'd:
// after a crash the target is the old file or the new one, never a mixture.
// ensure_private_dir: creates the directory and its missing parents; the directory itself
// (not its parents) must end up a real directory (no symlink), owned by us, mode 0700.
//
// Thread safety: free functions; concurrent writers of one path race (last rename wins).
#pragma once
#include <filesystem>
#include <string_view>

namespace nexus::daemon {

// Throws std::runtime_error naming the path on failure.
void write_private_file(const std::filesystem::path& path, std::string_view bytes, unsigned mode = 0600);
void ensure_private_dir(const std::filesystem::path& dir);

}  // namespace nexus::daemon
