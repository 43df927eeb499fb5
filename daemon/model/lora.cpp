#include "daemon/model/lora.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

namespace nexus::model {

// Where each adapted sample sits, worked out once per pass (AdapterBatch::layout) and shared by
// every projection: which samples (`sel`, undefined when the segments cover the batch in order),
// each one's segment (`idx`, undefined when every segment is one sample, in order: then the
// stacked weights line up with the samples as they are) and scale ([M, 1, 1]; `uniform_scale`
// when every segment has the same one, the common case: then it is the GEMM's alpha instead).
struct AdapterLayout {
  torch::Tensor sel, idx, scale;
  std::int64_t samples = 0;
  bool single = false;  // one segment covering the batch: plain matmuls, no gather
  std::optional<double> uniform_scale;
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
  if (std::all_of(scales.begin(), scales.end(), [&](double s) { return s == scales[0]; })) l.uniform_scale = scales[0];
  return l;
}

// Pads A [in, r] to [in, rank] and B [r, out] to [rank, out] with zeros: the pad adds exact
// zeros, so one bmm serves tenants of different ranks.
torch::Tensor pad_a(const torch::Tensor& a, std::int64_t rank) {
  return a.size(1) == rank ? a : torch::constant_pad_nd(a, {0, rank - a.size(1)});
}
torch::Tensor pad_b(const torch::Tensor& b, std::int64_t rank) {
  return b.size(0) == rank ? b : torch::constant_pad_nd(b, {0, 0, 0, rank - b.size(0)});
}
std::int64_t max_rank(const std::vector<torch::Tensor>& as) {
  std::int64_t r = 0;
  for (const auto& a : as) r = std::max(r, a.size(1));
  return r;
}

// The shrink h = x A_k of every adapted sample, [M, S, r], with As one [in, r_k] per segment,
// padded to the largest rank r. Unscaled.
torch::Tensor shrink(const torch::Tensor& x, const AdapterLayout& l, std::vector<torch::Tensor> As) {
  if (l.single) return torch::matmul(x, As[0]);
  const auto rank = max_rank(As);
  for (auto& a : As) a = pad_a(a, rank);
  auto a_rows = torch::stack(As);                        // [T, in, r]
  if (l.idx.defined()) a_rows = a_rows.index_select(0, l.idx);  // per sample
  return torch::bmm(l.sel.defined() ? x.index_select(0, l.sel) : x, a_rows);
}

// base + scale_k h B_k on each adapted sample's rows, in place unless `copy`. Bs are padded to
// h's rank. Fusing the add into the expand's GEMM (beta = 1) saves a pass over the output and an
// allocation per projection; the rank-r expand is a thin GEMM, so that pass was a large part of
// its cost.
torch::Tensor expand_into(torch::Tensor base, const AdapterLayout& l, torch::Tensor h, const std::vector<torch::Tensor>& Bs,
                          bool copy = false) {
  const auto rank = h.size(-1);
  double alpha = 1;
  if (l.uniform_scale) alpha = *l.uniform_scale;
  else h = h * l.scale;
  torch::Tensor b_rows;
  if (l.single) {
    b_rows = pad_b(Bs[0], rank).expand({base.size(0), rank, base.size(-1)});
  } else {
    std::vector<torch::Tensor> padded;
    for (const auto& b : Bs) padded.push_back(pad_b(b, rank));
    b_rows = torch::stack(padded);  // [T, r, out]
    if (l.idx.defined()) b_rows = b_rows.index_select(0, l.idx);
  }
  if (l.sel.defined()) {
    const auto d = torch::bmm(h, b_rows);
    return copy ? base.index_add(0, l.sel, d, alpha) : base.index_add_(0, l.sel, d, alpha);
  }
  return copy ? torch::baddbmm(base, h, b_rows, 1, alpha) : base.baddbmm_(h, b_rows, 1, alpha);
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
  auto delta = torch::zeros({x.size(0), x.size(1), out_features}, x.options());
  if (first.empty()) return delta;
  const auto l = make_layout(x, first, rows, scales);
  expand_into(delta, l, shrink(x, l, As), Bs);
  return delta;
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

std::vector<torch::Tensor> AdapterBatch::weights(std::int64_t block, Projection p, bool a_side, std::int64_t in,
                                               std::int64_t out, const torch::TensorOptions& options) const {
  std::vector<torch::Tensor> w;
  for (const auto& s : segments) {
    const auto& a = s.adapter->a(block, p);
    if (a.defined()) w.push_back(a_side ? a : s.adapter->b(block, p));
    else w.push_back(a_side ? torch::zeros({in, 1}, options) : torch::zeros({1, out}, options));  // adds exact zeros
  }
  return w;
}

bool AdapterBatch::adapts(std::int64_t block, Projection p) const {
  for (const auto& s : segments)
    if (s.adapter->a(block, p).defined()) return true;
  return false;
}

torch::Tensor AdapterBatch::apply(std::int64_t block, Projection p, const torch::Tensor& x, torch::Tensor base) const {
  if (!adapts(block, p)) return base;
  const auto& l = layout(x);
  const auto As = weights(block, p, true, x.size(-1), base.size(-1), x.options());
  // In place only where autograd records nothing: a Linear's output may be a view of its GEMM's,
  // and an in-place op on a view records a copy of the whole gradient (CopySlices).
  return expand_into(base, l, shrink(x, l, As), weights(block, p, false, x.size(-1), base.size(-1), x.options()),
                     torch::GradMode::is_enabled());
}

torch::Tensor AdapterBatch::apply_qkv(std::int64_t block, const torch::Tensor& x, torch::Tensor base) const {
  // One shrink for q, k and v together (each segment's three A's side by side, each padded to
  // its projection's largest rank), then an expand per projection into its own column block of
  // the base output (in place without autograd). (Fusing the expands too, with a block-diagonal B, measured slower:
  // building that B each pass and 3x the expand's work cost more than the two GEMMs it saves.)
  const auto d = base.size(-1) / 3;
  std::vector<Projection> adapted;
  for (auto p : {Projection::Q, Projection::K, Projection::V})
    if (adapts(block, p)) adapted.push_back(p);
  if (adapted.empty()) return base;
  std::vector<std::vector<torch::Tensor>> as(adapted.size());
  std::vector<std::int64_t> ranks;
  for (std::size_t j = 0; j < adapted.size(); ++j) {
    as[j] = weights(block, adapted[j], true, x.size(-1), d, x.options());
    ranks.push_back(max_rank(as[j]));
  }
  std::vector<torch::Tensor> side_by_side;  // per segment: [in, r_q + r_k + r_v]
  for (std::size_t k = 0; k < segments.size(); ++k) {
    std::vector<torch::Tensor> parts;
    for (std::size_t j = 0; j < adapted.size(); ++j) parts.push_back(pad_a(as[j][k], ranks[j]));
    side_by_side.push_back(parts.size() == 1 ? parts[0] : torch::cat(parts, 1));
  }
  const auto& l = layout(x);
  const auto h = shrink(x, l, side_by_side);
  // Under autograd (see apply) the blocks are made apart and concatenated.
  const bool copy = torch::GradMode::is_enabled();
  std::vector<torch::Tensor> blocks;
  std::int64_t column = 0;
  std::size_t j = 0;
  for (auto p : {Projection::Q, Projection::K, Projection::V}) {
    auto part = base.narrow(-1, static_cast<std::int64_t>(p) * d, d);
    if (j < adapted.size() && adapted[j] == p) {
      part = expand_into(part, l, h.narrow(-1, column, ranks[j]), weights(block, p, false, x.size(-1), d, x.options()), copy);
      column += ranks[j++];
    }
    blocks.push_back(part);
  }
  return copy ? torch::cat(blocks, -1) : base;
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
