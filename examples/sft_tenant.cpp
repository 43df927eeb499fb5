// sft_tenant: a lab member's SFT job, end to end. Registers a head on nexusd's resident backbone,
// trains it on demonstrations of the synthetic reach task (move toward the object the
// instruction names), evaluates on held-out scenes, publishes a policy version, and prints one
// JSON line of results. Inputs are written once, in place, in the shared arena.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>

#include "nexus/client.hpp"
#include "synth/scenes.hpp"

namespace {

constexpr int kActionDim = 2;
int kChunk = 4;  // actions per demonstration chunk (--chunk)

struct Batch {
  nexus::Tensor images, tokens, mask, actions;
  nexus::Observation obs() const { return {&images, &tokens, &mask, nullptr}; }
};

// A batch's bytes outside the arena (which ends with the attachment), for replaying it later.
struct Saved {
  std::vector<std::uint8_t> images, tokens, mask, actions;
  static Saved of(const Batch& b) {
    auto copy = [](const nexus::Tensor& t) { return std::vector<std::uint8_t>(t.raw().begin(), t.raw().end()); };
    return {copy(b.images), copy(b.tokens), copy(b.mask), copy(b.actions)};
  }
  void into(Batch& b) const {
    std::memcpy(b.images.raw().data(), images.data(), images.size());
    std::memcpy(b.tokens.raw().data(), tokens.data(), tokens.size());
    std::memcpy(b.mask.raw().data(), mask.data(), mask.size());
    std::memcpy(b.actions.raw().data(), actions.data(), actions.size());
  }
};

Batch alloc_batch(nexus::Client& c, const nexus::BackboneInfo& bb, std::int64_t n) {
  return {c.alloc(nexus::DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3}),
          c.alloc(nexus::DType::Int32, {n, bb.max_tokens}), c.alloc(nexus::DType::UInt8, {n, bb.max_tokens}),
          c.alloc(nexus::DType::Float32, {n, kChunk, kActionDim})};
}

// Renders `n` scenes straight into the arena tensors: the only copy the inputs ever make.
void fill(Batch& b, nexus::synth::SceneGenerator& scenes, std::int64_t n) {
  const std::size_t image_bytes = b.images.bytes() / static_cast<std::size_t>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto s = scenes.next();
    std::memcpy(b.images.raw().data() + i * image_bytes, s.image.data(), image_bytes);
    nexus::tokenize(s.instruction, b.tokens, b.mask, i);
    const auto a = nexus::synth::reach_actions(s, kChunk);
    std::memcpy(b.actions.as<float>().data() + i * kChunk * kActionDim, a.data(), a.size() * sizeof(float));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sft_tenant: supervised fine-tuning of one head through nexusd"};
  nexus::ClientOptions opt;
  nexus::TenantSpec spec;
  int steps = 300, batch = 16, heldout = 128, nan_every = 0, report_every = 50, checkpoint_at = 0, pipeline = 1;
  int offend_every = 0, pause_after = 0, save_every = 0;
  std::string save_tag = "auto", resume;
  double pause_s = 0;
  std::string offense = "nan";
  bool trajectory = false;
  app.add_option("-s,--socket", opt.socket_path, "nexusd control socket");
  app.add_option("-t,--tenant", opt.tenant, "tenant name")->required();
  app.add_option("--head", spec.head.kind, "mlp_chunk, flow or gaussian");
  app.add_option("--steps", steps, "SFT steps");
  app.add_option("--batch", batch, "demonstrations per step");
  app.add_option("--lr", spec.optimizer.lr, "AdamW learning rate");
  app.add_option("--seed", spec.seed, "head initialisation and data seed");
  app.add_option("--chunk", kChunk, "actions per chunk (the tenant's data schema)")->check(CLI::Range(1, 64));
  app.add_option("--heldout", heldout, "held-out scenes for the final evaluation");
  app.add_option("--nan-every", nan_every, "poison every Nth batch with NaN actions (isolation tests)");
  app.add_option("--offend-every", offend_every, "every Nth step, send a bad request instead (isolation tests)");
  app.add_option("--offense", offense, "nan (actions), tokens (ids out of range), oversize (over the daemon's "
                                       "per-request budget), or mixed (all three in turn)")
      ->check(CLI::IsMember({"nan", "tokens", "oversize", "mixed"}));
  app.add_option("--pause-after", pause_after, "after this many steps, idle --pause-s seconds (fairness tests)");
  app.add_option("--pause-s", pause_s, "how long to idle at --pause-after");
  app.add_option("--save-every", save_every, "save a checkpoint (--save-tag) every N steps: what a restart resumes from");
  app.add_option("--save-tag", save_tag, "the checkpoint's tag for --save-every");
  app.add_option("--resume", resume, "start from this checkpoint of yours (head, optimizer, RNG, step) instead of a fresh head");
  app.add_option("--pipeline", pipeline, "SFT requests kept in flight (asynchronous)")->check(CLI::Range(1, 8));
  app.add_option("--report-every", report_every, "progress line every N steps (0: none)");
  app.add_flag("--trajectory", trajectory, "include every step's loss in the JSON line");
  app.add_option("--checkpoint-at", checkpoint_at,
                 "save a checkpoint after step K; at the end reattach, load it into a fresh slot and "
                 "replay step K+1 (its loss must equal the uninterrupted run's)");
  CLI11_PARSE(app, argc, argv);
  if (nan_every > 0) offend_every = nan_every, offense = "nan";
  if (pipeline > 1 && checkpoint_at > 0) {
    std::fprintf(stderr, "--checkpoint-at needs --pipeline 1\n");
    return 2;
  }
  spec.head.chunk = kChunk;
  spec.head.action_dim = kActionDim;
  spec.head.flow_noise = 0.1;  // the reach actions span about +-0.3
  opt.client_arena_bytes = 16 << 20;
  opt.timeout = std::chrono::seconds(60);

  try {
    auto client = nexus::Client::attach(opt);
    std::uint64_t resumed_step = 0;
    if (!resume.empty()) resumed_step = client->load(resume);
    const auto bb = resume.empty() ? client->register_tenant(spec) : client->backbone();
    nexus::synth::SceneGenerator train(spec.seed, {.image_size = bb.image_size});
    std::vector<Batch> bufs;
    for (int i = 0; i < pipeline; ++i) bufs.push_back(alloc_batch(*client, bb, batch));
    double first_loss = NAN, last_loss = NAN;
    std::string losses;  // the whole trajectory, for equivalence checks
    std::vector<double> mean_action(kChunk * kActionDim, 0.0);
    int bad_batches = 0, samples = 0;
    std::map<std::string, int> refused;  // error code -> count, for the offender's report
    Saved replay;                        // batch K+1 of --checkpoint-at K
    double uninterrupted_next = NAN;     // its loss in the uninterrupted run
    std::deque<nexus::Future<nexus::SftResult>> in_flight;
    int answered = 0;
    auto take_reply = [&] {
      const auto r = in_flight.front().get();
      in_flight.pop_front();
      ++answered;
      if (checkpoint_at > 0 && answered == checkpoint_at + 1) uninterrupted_next = r.loss;
      if (std::isnan(first_loss)) first_loss = r.loss;
      last_loss = r.loss;
      if (trajectory) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.17g", losses.empty() ? "" : ",", r.loss);
        losses += buf;
      }
      if (report_every > 0 && (r.step % report_every == 0))
        std::fprintf(stderr, "[%s %s] step %llu loss %.4f\n", opt.tenant.c_str(), spec.head.kind.c_str(),
                     static_cast<unsigned long long>(r.step), r.loss);
    };
    std::optional<Batch> oversize;  // over the budget by its sample count (--offense oversize)
    for (int step = 1; step <= steps; ++step) {
      Batch& b = bufs[static_cast<std::size_t>(step % pipeline)];
      if (in_flight.size() >= static_cast<std::size_t>(pipeline)) take_reply();  // b is free again
      fill(b, train, batch);
      const auto a = b.actions.as<float>();
      for (std::size_t i = 0; i < a.size(); ++i) mean_action[i % mean_action.size()] += a[i];
      samples += batch;
      if (offend_every > 0 && step % offend_every == 0) {
        static const char* kinds[] = {"nan", "tokens", "oversize"};
        const std::string kind = offense == "mixed" ? kinds[(step / offend_every) % 3] : offense;
        while (!in_flight.empty()) take_reply();  // the offence goes alone, after the steps before it
        const Batch* sent = &b;
        if (kind == "nan") b.actions.as<float>()[0] = NAN;
        if (kind == "tokens") b.tokens.as<std::int32_t>()[0] = 1 << 20;  // no such byte token
        if (kind == "oversize") {
          if (!oversize) oversize = alloc_batch(*client, bb, 512);
          sent = &*oversize;
        }
        const auto expected = kind == "oversize" ? nexus::ErrorCode::OverBudget : nexus::ErrorCode::BadBatch;
        try {
          client->sft_step(sent->obs(), sent->actions);
          std::fprintf(stderr, "[%s] a bad request (%s) was accepted\n", opt.tenant.c_str(), kind.c_str());
          return 3;
        } catch (const nexus::Error& e) {
          if (e.code() != expected) throw;
          ++bad_batches;
          ++refused[nexus::error_code_name(e.code())];
          continue;
        }
      }
      if (pause_after > 0 && step == pause_after + 1) {
        while (!in_flight.empty()) take_reply();
        std::fprintf(stderr, "[%s] pausing for %.0f s\n", opt.tenant.c_str(), pause_s);
        std::this_thread::sleep_for(std::chrono::duration<double>(pause_s));
        std::fprintf(stderr, "[%s] resumed\n", opt.tenant.c_str());
      }
      if (checkpoint_at > 0 && step == checkpoint_at + 1) replay = Saved::of(b);
      in_flight.push_back(client->sft_step_async(b.obs(), b.actions));
      if (checkpoint_at > 0 && step == checkpoint_at) {
        take_reply();
        client->save("step-" + std::to_string(step));
      }
      if (save_every > 0 && step % save_every == 0) {
        while (!in_flight.empty()) take_reply();
        client->save(save_tag);
      }
    }
    while (!in_flight.empty()) take_reply();
    for (auto& m : mean_action) m /= samples;  // per-sample mean of each action entry

    // Held-out evaluation: mean L1 action error vs predicting the training actions' mean.
    nexus::synth::SceneGenerator held(spec.seed + 1'000'003, {.image_size = bb.image_size});
    Batch e = alloc_batch(*client, bb, heldout);
    fill(e, held, heldout);
    const auto version = client->publish();
    const auto p = client->predict(e.obs(), version);
    const auto target = e.actions.as<float>();
    double err = 0, base = 0;
    for (std::size_t i = 0; i < target.size(); ++i) {
      err += std::abs(p.actions[i] - target[i]);
      base += std::abs(mean_action[i % mean_action.size()] - target[i]);
    }
    err /= static_cast<double>(target.size());
    base /= static_cast<double>(target.size());

    // Resume check: a fresh attachment loads the checkpoint into a fresh slot and replays step K+1.
    std::string resume_report = "null";
    if (checkpoint_at > 0 && checkpoint_at < steps) {
      client.reset();
      client = nexus::Client::attach(opt);
      const auto loaded_step = client->load("step-" + std::to_string(checkpoint_at));
      Batch r = alloc_batch(*client, bb, batch);
      replay.into(r);
      const double resumed = client->sft_step(r.obs(), r.actions).loss;
      char buf[256];
      std::snprintf(buf, sizeof buf, "{\"step\":%llu,\"uninterrupted_loss\":%.17g,\"resumed_loss\":%.17g,\"bitwise\":%s}",
                    static_cast<unsigned long long>(loaded_step), uninterrupted_next, resumed,
                    resumed == uninterrupted_next ? "true" : "false");
      resume_report = buf;
    }
    std::string refused_json;
    for (const auto& [code, n] : refused) refused_json += (refused_json.empty() ? "\"" : ",\"") + code + "\":" + std::to_string(n);
    std::printf("{\"tenant\":\"%s\",\"head\":\"%s\",\"steps\":%d,\"first_loss\":%.6f,\"last_loss\":%.6f,"
                "\"heldout_l1\":%.6f,\"baseline_l1\":%.6f,\"improvement\":%.3f,\"bad_batches\":%d,\"refused\":{%s},"
                "\"version\":%llu,\"resumed_step\":%llu,\"resume\":%s,\"losses\":[%s]}\n",
                opt.tenant.c_str(), spec.head.kind.c_str(), steps, first_loss, last_loss, err, base, base / err,
                bad_batches, refused_json.c_str(), static_cast<unsigned long long>(version),
                static_cast<unsigned long long>(resumed_step), resume_report.c_str(), losses.c_str());
  } catch (const nexus::Error& e) {
    std::fprintf(stderr, "sft_tenant %s: %s\n", opt.tenant.c_str(), e.what());
    std::printf("{\"tenant\":\"%s\",\"error\":\"%s\"}\n", opt.tenant.c_str(), nexus::error_code_name(e.code()));
    return 2;
  }
  return 0;
}
