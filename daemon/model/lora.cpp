#include "daemon/model/lora.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace nexus::model {
namespace {

constexpr const char* kProjectionNames[kProjections] = {"q", "k", "v", "o", "mlp_in", "mlp_out"};

struct Dims {
  std::int64_t in, out;
};
Dims dims_of(const AdapterSpec& s, Projection p) {
  if (p == Projection::MlpIn) return {s.dim, s.mlp_hidden};
  if (p == Projection::MlpOut) return {s.mlp_hidden, s.dim};
  return {s.dim, s.dim};
}

// The adapted samples' deltas [M, S, out] and which samples they belong to (`sel`, undefined
// when the segments cover every sample in order: then the deltas line up with x itself).
struct Gathered {
  torch::Tensor delta, sel;
};

Gathered gather_deltas(const torch::Tensor& x, const std::vector<std::int64_t>& first,
                       const std::vector<std::int64_t>& rows, const std::vector<torch::Tensor>& As,
                       const std::vector<torch::Tensor>& Bs, const std::vector<double>& scales) {
  std::int64_t rmax = 0;
  for (const auto& a : As) rmax = std::max(rmax, a.size(1));
  // Pad every adapter to the largest rank: the padded columns of A and rows of B are zeros, so
  // they add exact zeros, and one bmm serves tenants of different ranks.
  std::vector<torch::Tensor> a_pad, b_pad;
  for (std::size_t k = 0; k < As.size(); ++k) {
    const auto r = As[k].size(1);
    a_pad.push_back(r == rmax ? As[k] : torch::constant_pad_nd(As[k], {0, rmax - r}));
    b_pad.push_back(r == rmax ? Bs[k] : torch::constant_pad_nd(Bs[k], {0, 0, 0, rmax - r}));
  }
  std::vector<std::int64_t> sel, idx;
  std::vector<float> scale;
  for (std::size_t k = 0; k < first.size(); ++k)
    for (std::int64_t i = first[k]; i < first[k] + rows[k]; ++i) {
      sel.push_back(i);
      idx.push_back(static_cast<std::int64_t>(k));
      scale.push_back(static_cast<float>(scales[k]));
    }
  const auto m = static_cast<std::int64_t>(sel.size());
  bool in_order = m == x.size(0);
  for (std::int64_t i = 0; in_order && i < m; ++i) in_order = sel[static_cast<std::size_t>(i)] == i;
  const auto dev = x.device();
  auto idx_t = torch::tensor(idx, torch::kLong).to(dev);
  auto a_rows = torch::stack(a_pad).index_select(0, idx_t);  // [M, in, r]: each sample its tenant's A
  auto b_rows = torch::stack(b_pad).index_select(0, idx_t);  // [M, r, out]
  Gathered g;
  if (!in_order) g.sel = torch::tensor(sel, torch::kLong).to(dev);
  const auto xs = in_order ? x : x.index_select(0, g.sel);
  auto shrunk = torch::bmm(xs, a_rows) * torch::tensor(scale, x.options()).view({m, 1, 1});  // [M, S, r]
  g.delta = torch::bmm(shrunk, b_rows);                                                     // [M, S, out]
  return g;
}

}  // namespace

LoraAdapterImpl::LoraAdapterImpl(const AdapterSpec& s) : spec_(s) {
  if (s.rank < 1 || s.rank > AdapterSpec::kMaxRank) throw std::invalid_argument("adapter rank must be 1..64");
  if (s.layers < 1 || s.layers > 32 || s.dim < 1 || s.mlp_hidden < 1)
    throw std::invalid_argument("adapter geometry (layers 1..32, dim, mlp_hidden) is not the backbone's");
  if (!(s.alpha >= 0 && s.alpha <= 1024)) throw std::invalid_argument("adapter alpha must be in [0, 1024]");
  if ((s.targets & ~AdapterSpec::kAdaptAll) != 0) throw std::invalid_argument("adapter targets has unknown bits");
  if (s.blocks != 0 && (s.blocks >> s.layers) != 0)
    throw std::invalid_argument("adapter blocks names a block the backbone does not have (it has " +
                                std::to_string(s.layers) + ")");
  a_.resize(static_cast<std::size_t>(s.layers * kProjections));
  b_.resize(a_.size());
  for (std::int64_t block = 0; block < s.layers; ++block) {
    if (!s.on_block(block)) continue;
    for (int p = 0; p < kProjections; ++p) {
      if (!s.targets_projection(1u << p)) continue;
      const auto d = dims_of(s, static_cast<Projection>(p));
      const std::string name = "b" + std::to_string(block) + "_" + kProjectionNames[p];
      const double bound = 1.0 / std::sqrt(static_cast<double>(d.in));  // LoRA's A: Kaiming-uniform scale
      const auto i = index(block, static_cast<Projection>(p));
      a_[i] = register_parameter(name + "_A", (torch::rand({d.in, s.rank}) * 2 - 1) * bound);
      b_[i] = register_parameter(name + "_B", torch::zeros({s.rank, d.out}));
    }
  }
}

torch::Tensor segmented_lora_delta(const torch::Tensor& x, const std::vector<std::int64_t>& first,
                                   const std::vector<std::int64_t>& rows, const std::vector<torch::Tensor>& As,
                                   const std::vector<torch::Tensor>& Bs, const std::vector<double>& scales,
                                   std::int64_t out_features) {
  if (first.empty()) return torch::zeros({x.size(0), x.size(1), out_features}, x.options());
  auto g = gather_deltas(x, first, rows, As, Bs, scales);
  if (!g.sel.defined()) return g.delta;
  return torch::zeros({x.size(0), x.size(1), out_features}, x.options()).index_add(0, g.sel, g.delta);
}

torch::Tensor AdapterBatch::apply(std::int64_t block, Projection p, const torch::Tensor& x,
                                  const torch::Tensor& base) const {
  std::vector<std::int64_t> first, rows;
  std::vector<torch::Tensor> As, Bs;
  std::vector<double> scales;
  for (const auto& s : segments) {
    const auto& a = s.adapter->a(block, p);
    if (!a.defined() || s.rows == 0) continue;  // this tenant does not adapt this projection
    first.push_back(s.first), rows.push_back(s.rows);
    As.push_back(a), Bs.push_back(s.adapter->b(block, p)), scales.push_back(s.adapter->spec().scale());
  }
  if (first.empty()) return base;
  auto g = gather_deltas(x, first, rows, As, Bs, scales);
  return g.sel.defined() ? base.index_add(0, g.sel, g.delta) : base + g.delta;
}

torch::Tensor AdapterBatch::apply_qkv(std::int64_t block, const torch::Tensor& x, const torch::Tensor& base) const {
  const auto d = base.size(-1) / 3;
  bool any = false;
  for (const auto& s : segments)
    for (auto p : {Projection::Q, Projection::K, Projection::V}) any = any || s.adapter->a(block, p).defined();
  if (!any) return base;
  return torch::cat({apply(block, Projection::Q, x, base.narrow(-1, 0, d)),
                     apply(block, Projection::K, x, base.narrow(-1, d, d)),
                     apply(block, Projection::V, x, base.narrow(-1, 2 * d, d))},
                    -1);
}

nlohmann::json adapter_to_json(const AdapterSpec& s) {
  return {{"rank", s.rank},     {"alpha", s.alpha}, {"targets", s.targets},        {"blocks", s.blocks},
          {"layers", s.layers}, {"dim", s.dim},     {"mlp_hidden", s.mlp_hidden}};
}

AdapterSpec adapter_from_json(const nlohmann::json& head) {
  AdapterSpec s;
  if (!head.contains("adapter")) return s;  // a head-only slot, or one saved before adapters
  const auto& a = head.at("adapter");
  s.rank = a.at("rank");
  s.alpha = a.at("alpha");
  s.targets = a.at("targets");
  s.blocks = a.at("blocks");
  s.layers = a.at("layers");
  s.dim = a.at("dim");
  s.mlp_hidden = a.at("mlp_hidden");
  return s;
}

std::string describe_adapter(const AdapterSpec& s) {
  if (s.rank <= 0) return "";
  std::string out = "rank " + std::to_string(s.rank) + ", alpha " + std::to_string(static_cast<int>(s.scale() * s.rank)) + ",";
  for (int p = 0; p < kProjections; ++p)
    if (s.targets_projection(1u << p)) out += std::string(" ") + kProjectionNames[p];
  out += ", blocks ";
  if (s.blocks == 0) return out + "all";
  for (int i = 0; i < 32; ++i)
    if ((s.blocks >> i) & 1u) out += std::to_string(i) + (s.blocks >> (i + 1) ? " " : "");
  return out;
}

std::int64_t adapter_parameters(const AdapterSpec& s) {
  if (s.rank <= 0) return 0;
  std::int64_t n = 0;
  for (std::int64_t block = 0; block < s.layers; ++block) {
    if (!s.on_block(block)) continue;
    for (int p = 0; p < kProjections; ++p)
      if (s.targets_projection(1u << p)) {
        const auto d = dims_of(s, static_cast<Projection>(p));
        n += s.rank * (d.in + d.out);
      }
  }
  return n;
}

}  // namespace nexus::model
