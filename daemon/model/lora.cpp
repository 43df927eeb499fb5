#include "daemon/model/lora.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace nexus::model {

// Where each adapted sample sits, worked out once per pass (AdapterBatch::layout) and shared by
// every projection: which samples (`sel`, undefined when the segments cover the batch in order),
// each one's segment (`idx`, undefined when every segment is one sample, in order: then the
// stacked weights line up with the samples as they are) and scale ([M, 1, 1]).
struct AdapterLayout {
  torch::Tensor sel, idx, scale;
  std::int64_t samples = 0;
  bool single = false;  // one segment covering the batch: plain matmuls, no gather
};

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

AdapterLayout make_layout(const torch::Tensor& x, const std::vector<std::int64_t>& first, const std::vector<std::int64_t>& rows,
                   const std::vector<double>& scales) {
  std::vector<std::int64_t> sel, idx;
  std::vector<float> scale;
  for (std::size_t k = 0; k < first.size(); ++k)
    for (std::int64_t i = first[k]; i < first[k] + rows[k]; ++i) {
      sel.push_back(i);
      idx.push_back(static_cast<std::int64_t>(k));
      scale.push_back(static_cast<float>(scales[k]));
    }
  AdapterLayout l;
  l.samples = static_cast<std::int64_t>(sel.size());
  bool in_order = l.samples == x.size(0), one_each = true;
  for (std::int64_t i = 0; i < l.samples; ++i) {
    in_order = in_order && sel[static_cast<std::size_t>(i)] == i;
    one_each = one_each && idx[static_cast<std::size_t>(i)] == i;
  }
  const auto dev = x.device();
  if (!in_order) l.sel = torch::tensor(sel, torch::kLong).to(dev);
  if (!one_each) l.idx = torch::tensor(idx, torch::kLong).to(dev);
  l.scale = torch::tensor(scale, x.options()).view({l.samples, 1, 1});
  l.single = in_order && first.size() == 1;
  return l;
}

// The adapted samples' deltas [M, S, out]: scale (x A_k) B_k for each sample's segment k. As and
// Bs hold every segment's weights (zeros for a tenant that does not adapt this projection).
torch::Tensor deltas(const torch::Tensor& x, const AdapterLayout& l, const std::vector<torch::Tensor>& As,
                     const std::vector<torch::Tensor>& Bs, double single_scale) {
  if (l.single) return torch::matmul(torch::matmul(x, As[0]) * single_scale, Bs[0]);
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
  auto a_rows = torch::stack(a_pad), b_rows = torch::stack(b_pad);  // [T, in, r], [T, r, out]
  if (l.idx.defined()) a_rows = a_rows.index_select(0, l.idx), b_rows = b_rows.index_select(0, l.idx);  // per sample
  const auto xs = l.sel.defined() ? x.index_select(0, l.sel) : x;
  return torch::bmm(torch::bmm(xs, a_rows) * l.scale, b_rows);
}

torch::Tensor add_deltas(const torch::Tensor& base, const AdapterLayout& l, const torch::Tensor& d) {
  return l.sel.defined() ? base.index_add(0, l.sel, d) : base + d;
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
  auto zeros = torch::zeros({x.size(0), x.size(1), out_features}, x.options());
  if (first.empty()) return zeros;
  const auto l = make_layout(x, first, rows, scales);
  return add_deltas(zeros, l, deltas(x, l, As, Bs, scales[0]));
}

const AdapterLayout& AdapterBatch::layout(const torch::Tensor& x) const {
  if (!layout_) {
    std::vector<std::int64_t> first, rows;
    std::vector<double> scales;
    for (const auto& s : segments) first.push_back(s.first), rows.push_back(s.rows), scales.push_back(s.adapter->spec().scale());
    layout_ = std::make_shared<AdapterLayout>(make_layout(x, first, rows, scales));
  }
  return *layout_;
}

torch::Tensor AdapterBatch::apply(std::int64_t block, Projection p, const torch::Tensor& x,
                                  const torch::Tensor& base) const {
  bool any = false;
  for (const auto& s : segments) any = any || s.adapter->a(block, p).defined();
  if (!any) return base;
  std::vector<torch::Tensor> As, Bs;
  for (const auto& s : segments) {
    const auto& a = s.adapter->a(block, p);
    As.push_back(a.defined() ? a : torch::zeros({x.size(-1), 1}, x.options()));  // adds exact zeros
    Bs.push_back(a.defined() ? s.adapter->b(block, p) : torch::zeros({1, base.size(-1)}, x.options()));
  }
  const auto& l = layout(x);
  return add_deltas(base, l, deltas(x, l, As, Bs, segments[0].adapter->spec().scale()));
}

torch::Tensor AdapterBatch::apply_qkv(std::int64_t block, const torch::Tensor& x, const torch::Tensor& base) const {
  bool any = false;
  for (const auto& s : segments)
    for (auto p : {Projection::Q, Projection::K, Projection::V}) any = any || s.adapter->a(block, p).defined();
  if (!any) return base;
  // Each of q, k and v on its own column block. (Fusing them, A side by side and B block-diagonal,
  // measured slower here: building the block-diagonal B each pass and 3x the expand's work cost
  // more than the two bmm's it saves.)
  const auto d = base.size(-1) / 3;
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
