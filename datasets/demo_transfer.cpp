#include "datasets/demo_transfer.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

namespace nexus::datasets {
namespace {

constexpr char kMagic[8] = {'N', 'X', 'D', 'E', 'M', 'O', '1', '\0'};
constexpr std::uint32_t kMaxJson = 1 << 20;         // one meta or episode record
constexpr std::uint32_t kMaxEpisodes = 1000000;
constexpr std::int64_t kMaxSide = 4096, kMaxWidth = 1 << 20, kMaxViews = 16;

void write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw DatasetError(std::string("dataset transfer: write failed: ") + std::strerror(w < 0 ? errno : EIO));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void write_json(int fd, const nlohmann::json& j) {
  const auto text = j.dump();
  const auto n = static_cast<std::uint32_t>(text.size());
  write_all(fd, &n, sizeof n);
  write_all(fd, text.data(), text.size());
}

template <class T>
void write_vector(int fd, const std::vector<T>& v) {
  write_all(fd, v.data(), v.size() * sizeof(T));
}

// Reads from a file of known size, never past it.
class Cursor {
 public:
  Cursor(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
  std::uint64_t left() const { return size_ - at_; }
  void read(void* out, std::uint64_t n) {
    if (n > left()) fail("truncated");
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, std::min<std::uint64_t>(n, 1 << 30), static_cast<off_t>(at_));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail(r < 0 ? std::strerror(errno) : "short read");
      p += r, at_ += static_cast<std::uint64_t>(r), n -= static_cast<std::uint64_t>(r);
    }
  }
  nlohmann::json json() {
    std::uint32_t n = 0;
    read(&n, sizeof n);
    if (n > kMaxJson || n > left()) fail("record too long");
    std::string text(n, '\0');
    read(text.data(), n);
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object()) fail("record is not a JSON object");
    return j;
  }
  [[noreturn]] static void fail(const std::string& why) { throw DatasetError("dataset transfer from the reader: " + why); }

 private:
  int fd_;
  std::uint64_t size_, at_ = 0;
};

std::int64_t int_in(const nlohmann::json& j, const char* key, std::int64_t lo, std::int64_t hi) {
  if (!j.contains(key) || !j[key].is_number_integer()) Cursor::fail(std::string("no integer ") + key);
  const auto v = j[key].get<std::int64_t>();
  if (v < lo || v > hi) Cursor::fail(std::string(key) + " out of range");
  return v;
}

std::string str_in(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string()) Cursor::fail(std::string("no string ") + key);
  return j[key].get<std::string>();
}

std::vector<std::string> strings_in(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_array() || j[key].size() > kMaxViews) Cursor::fail(std::string("bad list ") + key);
  std::vector<std::string> out;
  for (const auto& s : j[key]) {
    if (!s.is_string()) Cursor::fail(std::string("bad list ") + key);
    out.push_back(s.get<std::string>());
  }
  return out;
}

bool bool_in(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_boolean()) Cursor::fail(std::string("no flag ") + key);
  return j[key].get<bool>();
}

}  // namespace

std::uint64_t held_bytes(const DemoFile& f) {
  std::uint64_t b = 0;
  for (const auto& e : f.episodes)
    b += e.images.size() + (e.proprio.size() + e.actions.size() + e.sim_states.size() + e.rewards.size()) * 4 +
         e.dones.size() + e.instruction.size();
  return b;
}

void write_demo_transfer(int fd, const DemoFile& f) {
  write_all(fd, kMagic, sizeof kMagic);
  const auto& m = f.meta;
  write_json(fd, {{"task", m.task}, {"layout", m.layout}, {"views", m.views}, {"state_keys", m.state_keys},
                  {"image_size", m.image_size}, {"source_image_size", m.source_image_size}, {"state_dim", m.state_dim},
                  {"action_dim", m.action_dim}, {"sim_state_dim", m.sim_state_dim}, {"has_masks", m.has_masks}});
  const auto n = static_cast<std::uint32_t>(f.episodes.size());
  write_all(fd, &n, sizeof n);
  for (const auto& e : f.episodes) {
    write_json(fd, {{"name", e.name}, {"instruction", e.instruction}, {"steps", e.steps}, {"success", e.success},
                    {"train", e.train}, {"valid", e.valid}, {"sim_states", !e.sim_states.empty()}});
    write_vector(fd, e.images), write_vector(fd, e.proprio), write_vector(fd, e.actions);
    write_vector(fd, e.sim_states), write_vector(fd, e.rewards), write_vector(fd, e.dones);
  }
}

DemoFile read_demo_transfer(int fd, std::uint64_t size, std::uint64_t max_bytes) {
  Cursor in(fd, size);
  char magic[sizeof kMagic];
  in.read(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) Cursor::fail("not a dataset transfer");
  DemoFile f;
  const auto mj = in.json();
  auto& m = f.meta;
  m.task = str_in(mj, "task");
  m.layout = str_in(mj, "layout");
  m.views = strings_in(mj, "views");
  m.state_keys = strings_in(mj, "state_keys");
  if (m.views.empty()) Cursor::fail("no views");
  m.image_size = int_in(mj, "image_size", 1, kMaxSide);
  m.source_image_size = int_in(mj, "source_image_size", 1, kMaxWidth);
  m.state_dim = int_in(mj, "state_dim", 0, kMaxWidth);
  m.action_dim = int_in(mj, "action_dim", 1, kMaxWidth);
  m.sim_state_dim = int_in(mj, "sim_state_dim", 0, kMaxWidth);
  m.has_masks = bool_in(mj, "has_masks");
  std::uint32_t count = 0;
  in.read(&count, sizeof count);
  if (count == 0 || count > kMaxEpisodes) Cursor::fail("episode count out of range");
  const auto side = static_cast<std::uint64_t>(m.image_size);
  const std::uint64_t frame = m.views.size() * side * side * 3;
  std::uint64_t held = 0;
  f.episodes.reserve(std::min<std::uint64_t>(count, in.left() / 64 + 1));
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto ej = in.json();
    Episode e;
    e.name = str_in(ej, "name");
    e.instruction = str_in(ej, "instruction");
    e.steps = int_in(ej, "steps", 1, 100000);
    e.success = bool_in(ej, "success"), e.train = bool_in(ej, "train"), e.valid = bool_in(ej, "valid");
    const auto t = static_cast<std::uint64_t>(e.steps);
    const std::uint64_t sim = bool_in(ej, "sim_states") ? static_cast<std::uint64_t>(m.sim_state_dim) : 0;
    // Every size below is at most 2^17 steps x 2^20 widths x 4: no product overflows.
    const std::uint64_t bytes = t * frame + t * 4 * (static_cast<std::uint64_t>(m.state_dim + m.action_dim) + sim + 1) + t;
    if (bytes > in.left()) Cursor::fail("episode " + e.name + " runs past the end");
    held += bytes + e.instruction.size();
    if (held > max_bytes)
      throw DatasetTooLarge("dataset transfer from the reader: more than the " + std::to_string(max_bytes >> 20) +
                            " MiB it may hold");
    auto take = [&](auto& v, std::uint64_t n) {
      v.resize(n);
      in.read(v.data(), n * sizeof(v[0]));
    };
    take(e.images, t * frame);
    take(e.proprio, t * static_cast<std::uint64_t>(m.state_dim));
    take(e.actions, t * static_cast<std::uint64_t>(m.action_dim));
    take(e.sim_states, t * sim);
    take(e.rewards, t);
    take(e.dones, t);
    for (const auto* v : {&e.proprio, &e.actions, &e.rewards})
      for (float x : *v)
        if (!std::isfinite(x)) Cursor::fail("episode " + e.name + " holds a value that is not finite");
    f.episodes.push_back(std::move(e));
  }
  if (in.left() != 0) Cursor::fail("bytes after the last episode");
  return f;
}

}  // namespace nexus::datasets
