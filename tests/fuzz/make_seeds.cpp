// Writes the fuzz targets' seed inputs (scripts/fuzz-long.sh): one valid message of every
// request kind a tenant may send, control frames of every kind, a ring holding requests, a
// small demonstration file in this project's layout, and its dataset transfer. Mutations start
// from these as well as from raw bytes.
//   nexus_fuzz_seeds OUT_DIR     (makes OUT_DIR/<target>/seed-*)
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "datasets/demo_file.hpp"
#include "datasets/demo_transfer.hpp"
#include "fuzz_inputs.hpp"

using namespace nexus;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& dir, const std::string& name, const std::vector<std::uint8_t>& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<std::uint8_t> message(wire::Body type, const std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder&)>& body) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto b = body(fbb);
  fbb.Finish(wire::CreateMessage(fbb, schema::kProtocolVersion, 42, type, b));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

flatbuffers::Offset<wire::TensorRef> ref(flatbuffers::FlatBufferBuilder& fbb, std::uint64_t offset, wire::DType dtype,
                                         std::vector<std::int64_t> shape, std::uint64_t bytes) {
  return wire::CreateTensorRef(fbb, offset, bytes, dtype, fbb.CreateVector(shape));
}

flatbuffers::Offset<wire::Observation> observation(flatbuffers::FlatBufferBuilder& fbb) {
  return wire::CreateObservation(fbb, ref(fbb, 0, wire::DType::UInt8, {1, 1, 8, 8, 3}, 192),
                                 ref(fbb, 256, wire::DType::Int32, {1, 4}, 16), ref(fbb, 512, wire::DType::UInt8, {1, 4}, 4),
                                 ref(fbb, 1024, wire::DType::Float32, {1, 3}, 12));
}

std::vector<std::vector<std::uint8_t>> requests() {
  using B = flatbuffers::FlatBufferBuilder;
  using W = wire::Body;
  std::vector<std::vector<std::uint8_t>> out;
  out.push_back(message(W::PingRequest, [](B& f) { return wire::CreatePingRequest(f, f.CreateVector(std::vector<std::uint8_t>(8, 1))).Union(); }));
  out.push_back(message(W::DigestRequest, [](B& f) { return wire::CreateDigestRequest(f, ref(f, 64, wire::DType::UInt8, {32}, 32)).Union(); }));
  out.push_back(message(W::RegisterRequest, [](B& f) {
    return wire::CreateRegisterRequest(f, 1, wire::CreateHeadSpec(f, f.CreateString("mlp_chunk"), 3, 2, 2)).Union();
  }));
  out.push_back(message(W::SftStepRequest, [](B& f) {
    return wire::CreateSftStepRequest(f, observation(f), ref(f, 2048, wire::DType::Float32, {1, 2, 2}, 16)).Union();
  }));
  out.push_back(message(W::PredictRequest, [](B& f) { return wire::CreatePredictRequest(f, observation(f), 1, f.CreateString("demos")).Union(); }));
  out.push_back(message(W::FeaturesRequest, [](B& f) {
    return wire::CreateFeaturesRequest(f, observation(f), ref(f, 4096, wire::DType::Float32, {1, 64}, 256)).Union();
  }));
  out.push_back(message(W::PublishRequest, [](B& f) { return wire::CreatePublishRequest(f).Union(); }));
  out.push_back(message(W::BackboneRequest, [](B& f) { return wire::CreateBackboneRequest(f).Union(); }));
  out.push_back(message(W::SlotDigestRequest, [](B& f) { return wire::CreateSlotDigestRequest(f).Union(); }));
  out.push_back(message(W::SaveRequest, [](B& f) { return wire::CreateSaveRequest(f, f.CreateString("tag")).Union(); }));
  out.push_back(message(W::LoadRequest, [](B& f) { return wire::CreateLoadRequest(f, f.CreateString("tag")).Union(); }));
  out.push_back(message(W::EnvOpenRequest, [](B& f) { return wire::CreateEnvOpenRequest(f, f.CreateString("reach")).Union(); }));
  out.push_back(message(W::EnvStepRequest, [](B& f) {
    return wire::CreateEnvStepRequest(f, f.CreateVector(std::vector<std::uint64_t>{1}), f.CreateVector(std::vector<float>{0, 0}),
                                      0, ref(f, 0, wire::DType::UInt8, {1, 8, 8, 3}, 192),
                                      ref(f, 512, wire::DType::Float32, {1, 4}, 16)).Union();
  }));
  out.push_back(message(W::EnvCloseRequest, [](B& f) { return wire::CreateEnvCloseRequest(f, f.CreateVector(std::vector<std::uint64_t>{1})).Union(); }));
  out.push_back(message(W::DatasetLoadRequest, [](B& f) { return wire::CreateDatasetLoadRequest(f, f.CreateString("demos")).Union(); }));
  out.push_back(message(W::DatasetSftStepRequest, [](B& f) { return wire::CreateDatasetSftStepRequest(f, f.CreateString("demos")).Union(); }));
  out.push_back(message(W::RlStartRequest, [](B& f) {
    return wire::CreateRlStartRequest(f, f.CreateString("ppo"), f.CreateString("reach")).Union();
  }));
  out.push_back(message(W::RlStatusRequest, [](B& f) { return wire::CreateRlStatusRequest(f).Union(); }));
  out.push_back(message(W::JobStartRequest, [](B& f) {
    return wire::CreateJobStartRequest(f, wire::CreateJobSpec(f, f.CreateString("sft"), f.CreateString("demos"))).Union();
  }));
  out.push_back(message(W::JobStatusRequest, [](B& f) { return wire::CreateJobStatusRequest(f, 3, false).Union(); }));
  out.push_back(message(W::RegisterRegionRequest, [](B& f) { return wire::CreateRegisterRegionRequest(f, wire::RegionKind::Host, 4096).Union(); }));
  out.push_back(message(W::UnregisterRegionRequest, [](B& f) { return wire::CreateUnregisterRegionRequest(f, 1).Union(); }));
  out.push_back(message(W::OutputRelease, [](B& f) { return wire::CreateOutputRelease(f, f.CreateVector(std::vector<std::uint64_t>{0})).Union(); }));
  return out;
}

std::vector<std::uint8_t> control(wire::ControlBody type, const std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder&)>& body) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto b = body(fbb);
  fbb.Finish(wire::CreateControlMessage(fbb, type, b));
  const std::uint32_t n = fbb.GetSize();
  std::vector<std::uint8_t> frame(4 + n);
  std::memcpy(frame.data(), &n, 4);
  std::memcpy(frame.data() + 4, fbb.GetBufferPointer(), n);
  return frame;
}

datasets::DemoFile small_demo() {
  datasets::DemoFile f;
  f.meta.task = "reach";
  f.meta.views = {"agentview_image"};
  f.meta.state_keys = {"robot0_proprio"};
  f.meta.image_size = f.meta.source_image_size = 8;
  f.meta.state_dim = 4, f.meta.action_dim = 2;
  for (int e = 0; e < 2; ++e) {
    datasets::Episode ep;
    ep.name = "demo_" + std::to_string(e);
    ep.instruction = "reach the red ball";
    ep.steps = 3;
    ep.images.assign(3 * 8 * 8 * 3, 7);
    ep.proprio.assign(12, 0.5f);
    ep.actions.assign(6, 0.25f);
    ep.rewards.assign(3, 0.0f);
    ep.dones = {0, 0, 1};
    f.episodes.push_back(ep);
  }
  return f;
}

std::vector<std::uint8_t> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const fs::path out = argv[1];
  const auto reqs = requests();
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    write(out / "requests", "seed-" + std::to_string(i), reqs[i]);
    auto framed = std::vector<std::uint8_t>{0};  // decode_fuzz mode 0: the raw message
    framed.insert(framed.end(), reqs[i].begin(), reqs[i].end());
    write(out / "decode", "seed-" + std::to_string(i), framed);
  }
  // A ring: tail index, then two length-prefixed records.
  std::vector<std::uint8_t> ring(8, 0);
  for (int k : {0, 3}) {
    const auto& m = reqs[static_cast<std::size_t>(k)];
    const std::uint32_t n = static_cast<std::uint32_t>(m.size());
    ring.insert(ring.end(), reinterpret_cast<const std::uint8_t*>(&n), reinterpret_cast<const std::uint8_t*>(&n) + 4);
    ring.insert(ring.end(), m.begin(), m.end());
    while (ring.size() % 8 != 0) ring.push_back(0);
  }
  const std::uint64_t tail = ring.size() - 8;
  std::memcpy(ring.data(), &tail, 8);
  write(out / "ring", "seed-0", ring);
  using C = wire::ControlBody;
  using B = flatbuffers::FlatBufferBuilder;
  const std::vector<std::vector<std::uint8_t>> frames = {
      control(C::AttachRequest, [](B& f) { return wire::CreateAttachRequest(f, schema::kProtocolVersion, f.CreateString("alice"), 4096, 1 << 20, 1 << 20).Union(); }),
      control(C::StatusRequest, [](B& f) { return wire::CreateStatusRequest(f, schema::kProtocolVersion, 60).Union(); }),
      control(C::MetricsRequest, [](B& f) { return wire::CreateMetricsRequest(f, schema::kProtocolVersion).Union(); }),
      control(C::CancelJobRequest, [](B& f) { return wire::CreateCancelJobRequest(f, schema::kProtocolVersion, 3).Union(); }),
      control(C::ReleaseTenantRequest, [](B& f) { return wire::CreateReleaseTenantRequest(f, schema::kProtocolVersion, f.CreateString("alice")).Union(); }),
      control(C::DrainRequest, [](B& f) { return wire::CreateDrainRequest(f, schema::kProtocolVersion).Union(); }),
      control(C::ScaleRequest, [](B& f) {
        return wire::CreateScaleRequest(f, schema::kProtocolVersion, f.CreateString("rollout"), 2).Union();
      })};
  for (std::size_t i = 0; i < frames.size(); ++i) {
    auto in = std::vector<std::uint8_t>{2, 1, 3};  // three pieces of 65, 1 and 193 bytes at most
    in.insert(in.end(), frames[i].begin(), frames[i].end());
    write(out / "front_door", "seed-" + std::to_string(i), in);
  }
  const auto demo = small_demo();
  const fs::path h5 = out / "seed.hdf5";
  datasets::write_demo_file(h5.string(), demo.meta, demo.episodes);
  auto dataset = std::vector<std::uint8_t>{0};
  const auto bytes = file_bytes(h5);
  dataset.insert(dataset.end(), bytes.begin(), bytes.end());
  write(out / "dataset", "seed-0", dataset);
  fs::remove(h5);
  const int fd = ::memfd_create("seed", 0);
  datasets::write_demo_transfer(fd, demo);
  std::vector<std::uint8_t> transfer(static_cast<std::size_t>(::lseek(fd, 0, SEEK_END)));
  if (::pread(fd, transfer.data(), transfer.size(), 0) != static_cast<ssize_t>(transfer.size())) return 1;
  write(out / "transfer", "seed-0", transfer);
  return 0;
}
