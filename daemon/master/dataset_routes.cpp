#include "daemon/master/dataset_routes.hpp"

#include "daemon/log/log_text.hpp"
#include "daemon/master/wire_replies.hpp"

namespace nexus::daemon {

std::vector<std::uint8_t> handle_dataset_load(env::DatasetStore& store, const ServiceRequest& r,
                                              std::int64_t image_size) {
  const auto* q = wire::GetMessage(r.message.data())->body_as_DatasetLoadRequest();
  const auto name = q->name()->str();
  try {
    const auto d = store.load(r.tenant, name, *r.fd, q->seed(), image_size);
    log_text(LogLevel::Info, "dataset", "tenant=" + r.tenant + " name=" + name + " episodes=" +
                                            std::to_string(d.episodes) + " samples=" + std::to_string(d.samples) +
                                            " bytes=" + std::to_string(d.bytes));
    flatbuffers::FlatBufferBuilder fbb(128);
    auto body = wire::CreateDatasetLoadReply(fbb, d.episodes, d.samples, static_cast<std::int32_t>(d.state_dim),
                                             static_cast<std::int32_t>(d.action_dim));
    return finish_reply(fbb, r.request_id, wire::Body::DatasetLoadReply, body.Union());
  } catch (const env::DatasetRefused& e) {
    return error_reply(r.request_id, e.over_quota() ? wire::ErrorCode::QuotaExceeded : wire::ErrorCode::BadDataset,
                       e.what());
  } catch (const std::exception& e) {
    return error_reply(r.request_id, wire::ErrorCode::Internal, e.what());
  }
}

model::Request sampled_sft_request(const std::string& tenant, std::shared_ptr<const env::SampledBatch> b,
                                   std::function<void(model::Result)> done) {
  using model::DType;
  model::Request m;
  m.tenant = tenant;
  model::op::SftStep step;
  step.obs.images = {b->images.data(), DType::UInt8, {b->n, 1, b->image_size, b->image_size, 3}};
  step.obs.tokens = {b->tokens.data(), DType::Int32, {b->n, b->max_tokens}};
  step.obs.mask = {b->mask.data(), DType::UInt8, {b->n, b->max_tokens}};
  if (b->state_dim > 0) step.obs.state = {b->state.data(), DType::Float32, {b->n, b->state_dim}};
  step.actions = {b->actions.data(), DType::Float32, {b->n, b->chunk, b->action_dim}};
  m.op = std::move(step);
  m.keepalive = std::move(b);
  m.done = std::move(done);
  return m;
}

void submit_dataset_sft_step(env::DatasetStore& store, model::ModelService& model, const ServiceRequest& r,
                             std::function<void(std::vector<std::uint8_t>)> reply) {
  const auto* q = wire::GetMessage(r.message.data())->body_as_DatasetSftStepRequest();
  std::shared_ptr<const env::SampledBatch> batch;
  try {
    batch = std::make_shared<env::SampledBatch>(
        store.sample(r.tenant, q->name()->str(), q->batch(), q->chunk(), model.backbone().max_tokens));
  } catch (const env::DatasetRefused& e) {
    return reply(error_reply(r.request_id, wire::ErrorCode::BadDataset, e.what()));
  } catch (const std::invalid_argument& e) {
    return reply(error_reply(r.request_id, wire::ErrorCode::BadBatch, e.what()));
  }
  const auto id = r.request_id;
  auto m = sampled_sft_request(r.tenant, std::move(batch),
                               [id, reply](model::Result res) { reply(model_reply(id, res)); });
  m.alive = r.alive;  // the tenant's own step: cancelled if it leaves
  m.arrival = r.arrival;
  model.submit(std::move(m));
}

}  // namespace nexus::daemon
