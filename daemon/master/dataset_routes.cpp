#include "daemon/master/dataset_routes.hpp"

#include <cstring>

#include "daemon/jobs/sampled_step.hpp"
#include "daemon/log/log_text.hpp"
#include "daemon/master/model_routes.hpp"
#include "daemon/master/wire_replies.hpp"

namespace nexus::daemon {
namespace {

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v)
    for (const auto* s : *v) out.push_back(s->str());  // presence checked by the decoder
  return out;
}

flatbuffers::Offset<wire::DatasetLoadReply> load_reply(flatbuffers::FlatBufferBuilder& fbb, const env::LoadedDataset& d) {
  auto names = [&](const std::vector<std::string>& v) { return fbb.CreateVectorOfStrings(v); };
  const datasets::Normalizer none;
  const auto& n = d.normalizer ? *d.normalizer : none;
  const auto layout = fbb.CreateString(d.layout);
  const auto views = names(d.views), state_keys = names(d.state_keys);
  const auto am = fbb.CreateVector(n.action.mean), as = fbb.CreateVector(n.action.std);
  const auto sm = fbb.CreateVector(n.state.mean), ss = fbb.CreateVector(n.state.std);
  return wire::CreateDatasetLoadReply(fbb, d.episodes, d.samples, static_cast<std::int32_t>(d.state_dim),
                                      static_cast<std::int32_t>(d.action_dim), layout, views, state_keys,
                                      static_cast<std::int32_t>(d.source_image_size), d.train_episodes,
                                      d.valid_episodes, d.normalizer != nullptr, am, as, sm, ss);
}

}  // namespace

std::vector<std::uint8_t> handle_dataset_load(env::DatasetStore& store, const ServiceRequest& r,
                                              std::int64_t image_size, std::int64_t max_views) {
  const auto* q = r.wire_message()->body_as_DatasetLoadRequest();
  const auto name = q->name()->str();
  env::DatasetLoadOptions options{strings(q->views()), strings(q->state_keys()), q->normalize(),
                                  q->instruction() ? q->instruction()->str() : ""};
  try {
    const auto d = store.load(r.tenant, name, *r.fd, q->seed(), image_size, max_views, options);
    log_text(LogLevel::Info, "dataset", "tenant=" + r.tenant + " name=" + name + " layout=" + d.layout +
                                            " views=" + std::to_string(d.views.size()) + " episodes=" +
                                            std::to_string(d.episodes) + " samples=" + std::to_string(d.samples) +
                                            " bytes=" + std::to_string(d.bytes));
    flatbuffers::FlatBufferBuilder fbb(512);
    auto body = load_reply(fbb, d);
    return finish_reply(fbb, r.request_id, wire::Body::DatasetLoadReply, body.Union());
  } catch (const env::DatasetRefused& e) {
    return error_reply(r.request_id, e.over_quota() ? wire::ErrorCode::QuotaExceeded : wire::ErrorCode::BadDataset,
                       e.what());
  } catch (const std::exception& e) {
    return error_reply(r.request_id, wire::ErrorCode::Internal, e.what());
  }
}

void submit_dataset_sft_step(env::DatasetStore& store, model::ModelService& model, const ServiceRequest& r,
                             std::function<void(std::vector<std::uint8_t>)> reply) {
  const auto* q = r.wire_message()->body_as_DatasetSftStepRequest();
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
  auto m = sampled_sft_request(r.tenant, r.uid, std::move(batch),
                               [id, reply](model::Result res) { reply(model_reply(id, res)); });
  m.alive = r.alive;  // the tenant's own step: cancelled if it leaves
  m.arrival = r.arrival;
  model.submit(std::move(m));
}

std::variant<model::Request, ModelRouteError> normalized_predict(env::DatasetStore& store, const ServiceRequest& r,
                                                                 std::function<void(model::Result)> done) {
  const auto* q = r.wire_message()->body_as_PredictRequest();
  std::shared_ptr<const datasets::Normalizer> norm;
  try {
    norm = store.normalizer(r.tenant, q->dataset()->str());
  } catch (const env::DatasetRefused& e) {
    return ModelRouteError{wire::ErrorCode::BadDataset, e.what()};
  }
  auto denormalize = [norm, done = std::move(done)](model::Result res) {
    if (auto* p = std::get_if<model::Predicted>(&res)) {
      const auto width = static_cast<std::int64_t>(norm->action.mean.size());
      if (p->shape.empty() || p->shape.back() != width)
        res = model::Failure{model::Fault::BadBatch, "the head predicts " +
                                                         std::to_string(p->shape.empty() ? 0 : p->shape.back()) +
                                                         " action columns; the dataset has " + std::to_string(width)};
      else
        norm->action.denormalize(p->actions.data(), p->actions.size());
    }
    done(std::move(res));
  };
  auto routed = to_model_request(r, std::move(denormalize));
  auto* m = std::get_if<model::Request>(&routed);
  if (m == nullptr) return routed;
  auto& state = std::get<model::op::Predict>(m->op).obs.state;
  const auto width = static_cast<std::int64_t>(norm->state.mean.size());
  if (width == 0) return routed;
  if (!state.present() || state.dtype != model::DType::Float32 || state.shape.size() != 2 || state.shape[1] != width ||
      state.shape[0] < 1)
    return ModelRouteError{wire::ErrorCode::BadBatch,
                           "state must be float32 [n, " + std::to_string(width) + "], the dataset's state width"};
  // Normalised in a copy the request owns: the arena is the tenant's to rewrite while we read, and
  // must not be written by nexusd. Its bytes lie inside the arena (checked by to_model_request).
  const auto count = static_cast<std::size_t>(state.shape[0] * width);
  auto copy = std::make_shared<std::vector<float>>(count);
  std::memcpy(copy->data(), state.data, count * sizeof(float));
  norm->state.normalize(copy->data(), count);
  state.data = copy->data();
  m->keepalive = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<std::vector<float>>>>(
      std::move(m->keepalive), std::move(copy));
  return routed;
}

}  // namespace nexus::daemon
