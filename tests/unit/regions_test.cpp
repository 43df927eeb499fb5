// The region bookkeeping (daemon/ipc/regions.hpp) with the host and CUDA importers: what a
// tenant's descriptor must be before nexusd maps it, and how references into regions are checked.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <flatbuffers/flatbuffers.h>

#include "daemon/ipc/regions.hpp"
#include "schema/cuda_vmm.hpp"

using namespace nexus;
using daemon::RegionRefusal;
using daemon::RegionTable;

namespace {

int memfd(std::uint64_t bytes, bool seal) {
  const int fd = ::memfd_create("nexus-region-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
  if (seal) REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  return fd;
}

// A TensorRef message of float32 [count] at offset in `region`.
const wire::TensorRef* ref(flatbuffers::FlatBufferBuilder& fbb, std::uint32_t region, std::uint64_t offset,
                           std::int64_t count) {
  fbb.Clear();
  const std::vector<std::int64_t> shape = {count};
  fbb.Finish(wire::CreateTensorRef(fbb, offset, static_cast<std::uint64_t>(count) * 4, wire::DType::Float32,
                                   fbb.CreateVector(shape), region));
  return flatbuffers::GetRoot<wire::TensorRef>(fbb.GetBufferPointer());
}

wire::ErrorCode refusal_of(const std::variant<RegionTable::Resolved, RegionRefusal>& r) {
  return std::holds_alternative<RegionRefusal>(r) ? std::get<RegionRefusal>(r).code : wire::ErrorCode::None;
}

}  // namespace

TEST_CASE("a region must be a memfd sealed against shrinking and as long as registered", "[unit][regions]") {
  auto importer = daemon::host_region_importer();
  RegionTable table(1 << 20);
  auto refused = [&](int fd, std::uint64_t bytes) {
    auto r = table.add(*importer, fd, bytes);
    return std::holds_alternative<RegionRefusal>(r) ? std::get<RegionRefusal>(r).reason : std::string();
  };
  CHECK_THAT(refused(memfd(4096, false), 4096), Catch::Contains("seal the memfd against shrinking"));
  CHECK_THAT(refused(memfd(4096, true), 8192), Catch::Contains("fewer than the 8192 registered"));
  CHECK_THAT(refused(memfd(4096, true), 2 << 20), Catch::Contains("MiB"));  // over the cap
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  ::close(pipe_fds[1]);
  CHECK_THAT(refused(pipe_fds[0], 4096), Catch::Contains("must be a memfd"));
  CHECK(table.size() == 0);
}

TEST_CASE("references into a region are checked against its size, and ids die with unregister", "[unit][regions]") {
  auto importer = daemon::host_region_importer();
  RegionTable table(1 << 20);
  const int fd = memfd(4096, true);
  void* mine = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);  // the tenant's view
  REQUIRE(mine != MAP_FAILED);
  auto added = table.add(*importer, fd, 4096);  // closes fd: the mapping is what nexusd keeps
  REQUIRE(std::holds_alternative<RegionTable::Registered>(added));
  CHECK(::fcntl(fd, F_GETFD) == -1);  // the importer closed it (nothing else opened an fd since)
  const auto id = std::get<RegionTable::Registered>(added).id;
  CHECK(id != 0);

  flatbuffers::FlatBufferBuilder fbb;
  auto ok = table.resolve(ref(fbb, id, 1024, 256));  // [1024, 2048)
  REQUIRE(std::holds_alternative<RegionTable::Resolved>(ok));
  static_cast<float*>(mine)[300] = 42.0f;  // the tenant writes; nexusd's mapping sees it
  CHECK(reinterpret_cast<const float*>(std::get<RegionTable::Resolved>(ok).data)[44] == 42.0f);

  CHECK(refusal_of(table.resolve(ref(fbb, id, 4096 - 512, 256))) == wire::ErrorCode::TensorOutOfBounds);
  CHECK(refusal_of(table.resolve(ref(fbb, id, 2, 1))) == wire::ErrorCode::BadTensor);  // misaligned
  CHECK(refusal_of(table.resolve(ref(fbb, id + 1, 0, 1))) == wire::ErrorCode::UnknownRegion);
  CHECK(refusal_of(table.resolve(ref(fbb, 0, 0, 1))) == wire::ErrorCode::UnknownRegion);  // 0 is the arena's

  // A request in flight keeps the memory after unregister; the id is gone at once.
  auto holder = std::get<RegionTable::Resolved>(ok).holder;
  CHECK(table.remove(id));
  CHECK_FALSE(table.remove(id));
  CHECK(refusal_of(table.resolve(ref(fbb, id, 0, 1))) == wire::ErrorCode::UnknownRegion);
  CHECK(reinterpret_cast<const float*>(std::get<RegionTable::Resolved>(ok).data)[44] == 42.0f);
  holder.reset();
  ok = RegionTable::Resolved{};
  ::munmap(mine, 4096);

  // New ids, never a reused one; at most kMaxRegions at once.
  std::vector<std::uint32_t> ids;
  for (std::size_t i = 0; i < RegionTable::kMaxRegions; ++i) {
    auto r = table.add(*importer, memfd(4096, true), 4096);
    REQUIRE(std::holds_alternative<RegionTable::Registered>(r));
    ids.push_back(std::get<RegionTable::Registered>(r).id);
    CHECK(ids.back() != id);
  }
  auto over = table.add(*importer, memfd(4096, true), 4096);
  REQUIRE(std::holds_alternative<RegionRefusal>(over));
  CHECK(std::get<RegionRefusal>(over).code == wire::ErrorCode::QuotaExceeded);
  CHECK(table.size() == RegionTable::kMaxRegions);
}

// CUDA regions share the table; what differs is the importer (schema/cuda_vmm.hpp). On a machine
// without a driver every import is refused with that reason; with one, a descriptor that is not
// a cuMemCreate allocation is. Either way the descriptor is closed and no id is spent.
TEST_CASE("a CUDA region that is no CUDA allocation or on a machine with no driver is refused and its descriptor closed",
          "[unit][regions][cuda]") {
  auto cuda = daemon::cuda_region_importer();
  auto host = daemon::host_region_importer();
  RegionTable table(1 << 20);
  const std::string no_driver = cuda_vmm::driver_unavailable_reason();
  if (!no_driver.empty()) WARN("no CUDA driver here: " << no_driver);
  for (int round = 0; round < 3; ++round) {
    const int fd = memfd(4096, true);  // a host memfd passed off as a CUDA allocation
    auto r = table.add(*cuda, fd, 4096);
    REQUIRE(std::holds_alternative<RegionRefusal>(r));
    const auto& refusal = std::get<RegionRefusal>(r);
    INFO(refusal.reason);
    if (no_driver.empty()) {
      CHECK(refusal.code == wire::ErrorCode::BadMessage);
      CHECK_THAT(refusal.reason, Catch::Contains("not the descriptor of a CUDA allocation"));
    } else {
      CHECK(refusal.code == wire::ErrorCode::WrongMessageType);
      CHECK_THAT(refusal.reason, Catch::Contains("cannot import CUDA regions") && Catch::Contains("register a host region"));
    }
    CHECK(::fcntl(fd, F_GETFD) == -1);  // closed (nothing else opened an fd since)
  }
  auto over = table.add(*cuda, memfd(4096, true), 2 << 20);  // the size cap holds before any import
  REQUIRE(std::holds_alternative<RegionRefusal>(over));
  CHECK(std::get<RegionRefusal>(over).code == wire::ErrorCode::SegmentTooLarge);
  CHECK(table.size() == 0);
  auto first = table.add(*host, memfd(4096, true), 4096);  // refusals spent no id
  REQUIRE(std::holds_alternative<RegionTable::Registered>(first));
  CHECK(std::get<RegionTable::Registered>(first).id == 1);
}

TEST_CASE("a CUDA region: an exported allocation maps on its device and is bounds-checked and a short one is refused",
          "[unit][regions][cuda]") {
  if (const auto why = cuda_vmm::driver_unavailable_reason(); !why.empty()) {
    auto made = cuda_vmm::allocate_exportable(0, 4096);  // the client's side fails cleanly too
    REQUIRE(std::holds_alternative<cuda_vmm::Failure>(made));
    CHECK(std::get<cuda_vmm::Failure>(made).no_driver);
    CHECK(std::get<cuda_vmm::Failure>(made).reason == why);
    WARN("no CUDA driver here: the mapping half of this case did not run (" << why << ")");
    return;
  }
  auto made = cuda_vmm::allocate_exportable(0, 4096);
  REQUIRE(std::holds_alternative<cuda_vmm::Exported>(made));
  auto exported = std::get<cuda_vmm::Exported>(std::move(made));
  CHECK(exported.bytes >= 4096);
  auto cuda = daemon::cuda_region_importer();
  RegionTable table(std::uint64_t{1} << 30);
  auto added = table.add(*cuda, ::dup(exported.fd), exported.bytes);
  REQUIRE(std::holds_alternative<RegionTable::Registered>(added));
  const auto id = std::get<RegionTable::Registered>(added).id;
  flatbuffers::FlatBufferBuilder fbb;
  const auto count = static_cast<std::int64_t>(exported.bytes / 4);
  auto inside = table.resolve(ref(fbb, id, 0, count));
  REQUIRE(std::holds_alternative<RegionTable::Resolved>(inside));
  CHECK(std::get<RegionTable::Resolved>(inside).cuda_device == exported.device);
  CHECK(refusal_of(table.resolve(ref(fbb, id, 4, count))) == wire::ErrorCode::TensorOutOfBounds);
  // Registered as longer than the allocation: refused, not mapped past its end.
  auto longer = table.add(*cuda, ::dup(exported.fd), exported.bytes * 2);
  REQUIRE(std::holds_alternative<RegionRefusal>(longer));
  CHECK(std::get<RegionRefusal>(longer).code == wire::ErrorCode::TensorOutOfBounds);
  // The exporter lets go of its allocation and descriptor: nexusd's mapping holds it.
  ::close(exported.fd);
  exported.holder.reset();
  CHECK(std::holds_alternative<RegionTable::Resolved>(table.resolve(ref(fbb, id, 0, count))));
  CHECK(table.remove(id));
}
