// The built-in operator kinds: each kind's operator (forward and split backward), initial parameters,
// output shape and autograd reference, in one table that every use of a node's kind looks up.
#include "builtin_model/operator_kinds.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

namespace {

constexpr double kNormEpsilon = 1e-5;
constexpr double kInitStd = 0.02;  // GPT-2's initialisation of weights and embeddings
constexpr int64_t kIgnoreIndex = -100;

at::Tensor flat_rows(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

// ---- embeddings: a table lookup by token id (word) or by position ----
class Embedding final : public Operator {
 public:
  Embedding(std::string name, bool positional, std::vector<at::Tensor> params)
      : Operator(std::move(name), "embedding"), positional_(positional) {
    add_parameter(std::move(params[0]));
  }
  at::Tensor forward(const std::vector<at::Tensor>&, const MicroBatchData& data, Saved& saved) const override {
    const at::Tensor& table = parameters()[0];
    if (positional_) {
      const int64_t b = data.tokens.size(0), s = data.tokens.size(1);
      if (s > table.size(0))
        throw Error(fmt::format("{}: sequence length {} exceeds the {} learned positions", name(), s, table.size(0)));
      saved.tensors = {};
      return table.narrow(0, 0, s).unsqueeze(0).expand({b, s, table.size(1)}).contiguous();
    }
    saved.tensors = {data.tokens};
    return at::embedding(table, data.tokens);
  }
  std::vector<at::Tensor> backward_input(const at::Tensor&, const Saved&) const override { return {}; }
  void backward_weight(const at::Tensor& grad, const Saved& saved) override {
    const at::Tensor& table = parameters()[0];
    if (positional_) {
      at::Tensor g = at::zeros_like(table);
      g.narrow(0, 0, grad.size(1)).copy_(grad.sum(0));
      accumulate(0, g);
      return;
    }
    accumulate(0, at::embedding_dense_backward(grad, saved.tensors[0], table.size(0), -1, false));
  }

 private:
  bool positional_;
};

// ---- element-wise sum of its inputs (residual adds, embedding sum) ----
class Sum final : public Operator {
 public:
  Sum(std::string name, size_t inputs) : Operator(std::move(name), "add"), inputs_(inputs) {}
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    saved.tensors = {};
    at::Tensor out = inputs[0];
    for (size_t i = 1; i < inputs.size(); ++i) out = out + inputs[i];
    return out;
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved&) const override {
    return std::vector<at::Tensor>(inputs_, grad);
  }

 private:
  size_t inputs_;
};

class LayerNorm final : public Operator {
 public:
  LayerNorm(std::string name, std::vector<at::Tensor> params) : Operator(std::move(name), "layernorm") {
    add_parameter(std::move(params[0]));
    add_parameter(std::move(params[1]));
  }
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    auto [y, mean, rstd] =
        at::native_layer_norm(inputs[0], {parameters()[0].size(0)}, parameters()[0], parameters()[1], kNormEpsilon);
    saved.tensors = {inputs[0], mean, rstd};
    return y;
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved& saved) const override {
    return {std::get<0>(pass(grad, saved, {true, false, false}))};
  }
  void backward_weight(const at::Tensor& grad, const Saved& saved) override {
    auto [dx, dw, db] = pass(grad, saved, {false, true, true});
    accumulate(0, dw);
    accumulate(1, db);
  }

 private:
  std::tuple<at::Tensor, at::Tensor, at::Tensor> pass(const at::Tensor& grad, const Saved& saved,
                                                      std::array<bool, 3> mask) const {
    return at::native_layer_norm_backward(grad, saved.tensors[0], {parameters()[0].size(0)}, saved.tensors[1],
                                          saved.tensors[2], parameters()[0], parameters()[1], mask);
  }
};

// y = x W^T + b over the last dimension. I: dx = dy W. W: dW = dy^T x, db = sum dy (rows flattened).
class Linear final : public Operator {
 public:
  Linear(std::string name, std::vector<at::Tensor> params) : Operator(std::move(name), "linear") {
    for (at::Tensor& p : params) add_parameter(std::move(p));
  }
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    saved.tensors = {inputs[0]};
    return at::linear(inputs[0], parameters()[0], bias());
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved&) const override {
    return {grad.matmul(parameters()[0])};
  }
  void backward_weight(const at::Tensor& grad, const Saved& saved) override {
    const at::Tensor dy = flat_rows(grad);
    accumulate(0, dy.t().mm(flat_rows(saved.tensors[0])));
    if (parameters().size() > 1) accumulate(1, dy.sum(0));
  }

 private:
  c10::optional<at::Tensor> bias() const {
    return parameters().size() > 1 ? c10::optional<at::Tensor>(parameters()[1]) : c10::nullopt;
  }
};

// Q, K and V as [b, heads, s, head_dim] views of the fused projection [b, s, (heads + 2 kv) d], or
// Q and K of the rotated [b, s, (heads + kv) d]. With fewer key/value heads (grouped-query
// attention) each serves heads / kv consecutive query heads.
struct HeadSplit {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;

  explicit HeadSplit(const OperatorShape& shape)
      : heads(shape.heads), kv_heads(shape.kv_heads), head_dim(shape.head_dim()) {}
  int64_t count(int which) const { return which == 0 ? heads : kv_heads; }
  int64_t offset(int which) const { return which == 0 ? 0 : (which == 1 ? heads : heads + kv_heads) * head_dim; }
  at::Tensor part(const at::Tensor& fused, int which) const {
    const int64_t b = fused.size(0), s = fused.size(1), n = count(which);
    const at::Tensor x = fused.narrow(2, offset(which), n * head_dim).view({b, s, n, head_dim}).transpose(1, 2);
    if (n == heads) return x;
    return x.unsqueeze(2).expand({b, n, heads / n, s, head_dim}).reshape({b, heads, s, head_dim});
  }
  // The gradient of `fused` from the gradients of its parts (undefined: zero); a key/value head's
  // gradient is the sum over the query heads it serves.
  at::Tensor merge(const at::Tensor& fused, const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv) const {
    const int64_t b = fused.size(0), s = fused.size(1);
    const int parts = fused.size(2) == (heads + 2 * kv_heads) * head_dim ? 3 : 2;
    const at::Tensor* grads[] = {&dq, &dk, &dv};
    std::vector<at::Tensor> out;
    for (int which = 0; which < parts; ++which) {
      const int64_t n = count(which);
      if (!grads[which]->defined()) {
        out.push_back(at::zeros({b, s, n * head_dim}, fused.options()));
        continue;
      }
      at::Tensor g = *grads[which];
      if (n != heads) g = g.reshape({b, n, heads / n, s, head_dim}).sum(2);
      out.push_back(g.transpose(1, 2).reshape({b, s, n * head_dim}));
    }
    return at::cat(out, 2);
  }
};

// Causal attention scores: Q K^T / sqrt(head_dim), positions after the query set to -inf.
class AttentionScores final : public Operator {
 public:
  AttentionScores(std::string name, const OperatorShape& shape) : Operator(std::move(name), "bmm"), split_(shape) {}
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    const at::Tensor& qkv = inputs[0];
    saved.tensors = {qkv};
    const at::Tensor q = split_.part(qkv, 0), k = split_.part(qkv, 1);
    const at::Tensor scores = q.matmul(k.transpose(-2, -1)) * scale(q);
    return scores.masked_fill(future_mask(qkv), -std::numeric_limits<double>::infinity());
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved& saved) const override {
    const at::Tensor& qkv = saved.tensors[0];
    const at::Tensor q = split_.part(qkv, 0), k = split_.part(qkv, 1);
    const at::Tensor g = grad.masked_fill(future_mask(qkv), 0) * scale(q);
    return {split_.merge(qkv, g.matmul(k), g.transpose(-2, -1).matmul(q), at::Tensor())};
  }

 private:
  static double scale(const at::Tensor& q) { return 1.0 / std::sqrt(double(q.size(-1))); }
  static at::Tensor future_mask(const at::Tensor& qkv) {
    const int64_t s = qkv.size(1);
    return at::ones({s, s}, qkv.options().dtype(at::kBool)).triu(1);
  }
  HeadSplit split_;
};

class Softmax final : public Operator {
 public:
  explicit Softmax(std::string name) : Operator(std::move(name), "softmax") {}
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    at::Tensor p = at::_softmax(inputs[0], -1, false);
    saved.tensors = {p};
    return p;
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved& saved) const override {
    return {at::_softmax_backward_data(grad, saved.tensors[0], -1, saved.tensors[0].scalar_type())};
  }
};

// The attention-weighted values P V, heads merged back to [b, s, h]. Inputs: P, then the fused QKV.
class AttentionValues final : public Operator {
 public:
  AttentionValues(std::string name, const OperatorShape& shape)
      : Operator(std::move(name), "bmm"), split_(shape), hidden_(shape.heads * shape.head_dim()) {}
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    const at::Tensor &p = inputs[0], &qkv = inputs[1];
    saved.tensors = {p, qkv};
    const at::Tensor context = p.matmul(split_.part(qkv, 2));
    return context.transpose(1, 2).reshape({qkv.size(0), qkv.size(1), hidden_});
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved& saved) const override {
    const at::Tensor &p = saved.tensors[0], &qkv = saved.tensors[1];
    const at::Tensor v = split_.part(qkv, 2);
    const at::Tensor g = grad.view({qkv.size(0), qkv.size(1), split_.heads, split_.head_dim}).transpose(1, 2);
    return {g.matmul(v.transpose(-2, -1)),
            split_.merge(qkv, at::Tensor(), at::Tensor(), p.transpose(-2, -1).matmul(g))};
  }

 private:
  HeadSplit split_;
  int64_t hidden_;
};

class Gelu final : public Operator {
 public:
  explicit Gelu(std::string name) : Operator(std::move(name), "gelu") {}
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    saved.tensors = {inputs[0]};
    return at::gelu(inputs[0]);
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved& saved) const override {
    return {at::gelu_backward(grad, saved.tensors[0])};
  }
};

// y = x / sqrt(mean(x^2) + eps) * w over the last dimension. With r the reciprocal root and
// xh = x r: dx = r (g w - xh mean(g w xh)), dw = sum over rows of g xh.
class RmsNorm final : public Operator {
 public:
  RmsNorm(std::string name, std::vector<at::Tensor> params) : Operator(std::move(name), "rmsnorm") {
    add_parameter(std::move(params[0]));
  }
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    const at::Tensor& x = inputs[0];
    const at::Tensor r = (x * x).mean(-1, true).add(kNormEpsilon).rsqrt();
    saved.tensors = {x, r};
    return x * r * parameters()[0];
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved& saved) const override {
    const at::Tensor &x = saved.tensors[0], &r = saved.tensors[1];
    const at::Tensor xh = x * r, gw = grad * parameters()[0];
    return {r * (gw - xh * (gw * xh).mean(-1, true))};
  }
  void backward_weight(const at::Tensor& grad, const Saved& saved) override {
    accumulate(0, flat_rows(grad * saved.tensors[0] * saved.tensors[1]).sum(0));
  }
};

// Rotary positions on Q and K (Llama's rotate-half layout): in each head, the pair (j, j + d/2)
// turns by the angle t / base^(2j / d) at position t. Input: the fused projection; output: the
// rotated Q and K, [b, s, (heads + kv) d]. A rotation's transpose turns back, so I needs nothing saved.
class Rope final : public Operator {
 public:
  Rope(std::string name, const OperatorShape& shape) : Operator(std::move(name), "rope"), shape_(shape) {}
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    saved.tensors = {};
    return turn(inputs[0].narrow(2, 0, rotated_width()), 1);
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved&) const override {
    const at::Tensor values =
        at::zeros({grad.size(0), grad.size(1), shape_.kv_heads * shape_.head_dim()}, grad.options());
    return {at::cat({turn(grad, -1), values}, 2)};
  }

 private:
  int64_t rotated_width() const { return (shape_.heads + shape_.kv_heads) * shape_.head_dim(); }
  // x cos + rotate_half(x) sin * direction, rotate_half([x1, x2]) = [-x2, x1].
  at::Tensor turn(const at::Tensor& x, double direction) const {
    const int64_t b = x.size(0), s = x.size(1), d = shape_.head_dim(), half = d / 2;
    const at::Tensor t = x.reshape({b, s, -1, d});
    const at::Tensor exponents = at::arange(half, x.options()).mul(2.0 / double(d));
    const at::Tensor inverse = at::pow(shape_.rotary_base, exponents).reciprocal();
    const at::Tensor angles = at::outer(at::arange(s, x.options()), inverse);  // [s, d/2]
    const at::Tensor both = at::cat({angles, angles}, 1).view({s, 1, d});
    const at::Tensor rotated = at::cat({-t.narrow(3, half, half), t.narrow(3, 0, half)}, 3);
    return (t * both.cos() + rotated * both.sin() * direction).reshape({b, s, x.size(2)});
  }
  OperatorShape shape_;
};

// SwiGLU: silu(a) * v of the gate a and the value v, the two halves of fc1's output.
// da = g v silu'(a) with silu'(a) = sigmoid(a) (1 + a (1 - sigmoid(a))); dv = g silu(a).
class SwiGlu final : public Operator {
 public:
  explicit SwiGlu(std::string name) : Operator(std::move(name), "swiglu") {}
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData&, Saved& saved) const override {
    saved.tensors = {inputs[0]};
    const int64_t f = inputs[0].size(-1) / 2;
    return at::silu(inputs[0].narrow(-1, 0, f)) * inputs[0].narrow(-1, f, f);
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved& saved) const override {
    const at::Tensor& u = saved.tensors[0];
    const int64_t f = u.size(-1) / 2;
    const at::Tensor a = u.narrow(-1, 0, f), v = u.narrow(-1, f, f), sigmoid = at::sigmoid(a);
    const at::Tensor da = grad * v * sigmoid * (1 + a * (1 - sigmoid));
    return {at::cat({da, grad * a * sigmoid}, -1)};
  }
};

// Mean next-token cross-entropy of the micro-batch (a scalar).
class CrossEntropy final : public Operator {
 public:
  explicit CrossEntropy(std::string name) : Operator(std::move(name), "cross_entropy") {}
  at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData& data, Saved& saved) const override {
    const at::Tensor log_probs = at::_log_softmax(flat_rows(inputs[0]), 1, false);
    const at::Tensor targets = data.targets.reshape({-1});
    auto [loss, total_weight] = at::nll_loss_forward(log_probs, targets, {}, at::Reduction::Mean, kIgnoreIndex);
    saved.tensors = {log_probs, data.targets, total_weight};
    return loss;
  }
  std::vector<at::Tensor> backward_input(const at::Tensor& grad, const Saved& saved) const override {
    const at::Tensor &log_probs = saved.tensors[0], &targets = saved.tensors[1];
    const at::Tensor d_log_probs = at::nll_loss_backward(grad, log_probs, targets.reshape({-1}), {},
                                                         at::Reduction::Mean, kIgnoreIndex, saved.tensors[2]);
    const at::Tensor d_logits = at::_log_softmax_backward_data(d_log_probs, log_probs, 1, log_probs.scalar_type());
    return {d_logits.view({targets.size(0), targets.size(1), log_probs.size(1)})};
  }
};

// ---- the autograd references (reference_model.h): libtorch's differentiable operators ----

// Q, K or V of the fused projection (or Q, K of the rotated one) as [b, heads, s, head_dim]; a
// key/value head repeated for each query head of its group.
at::Tensor reference_head_part(const at::Tensor& fused, int which, const OperatorShape& shape) {
  const int64_t b = fused.size(0), s = fused.size(1), d = shape.head_dim();
  const int64_t count = which == 0 ? shape.heads : shape.kv_heads;
  const int64_t offset = which == 0 ? 0 : which == 1 ? shape.heads * d : (shape.heads + shape.kv_heads) * d;
  const at::Tensor x = fused.narrow(2, offset, count * d).reshape({b, s, count, d}).transpose(1, 2);
  return x.repeat_interleave(shape.heads / count, 1);
}

// Llama's rotary positions on a [b, s, n, d] tensor: x cos + rotate_half(x) sin.
at::Tensor reference_rotary(const at::Tensor& x, double base) {
  const int64_t s = x.size(1), d = x.size(3);
  const at::Tensor inverse = 1.0 / at::pow(base, at::arange(0, d, 2, x.options()) / double(d));
  const at::Tensor angles = at::outer(at::arange(s, x.options()), inverse);
  const at::Tensor both = at::cat({angles, angles}, -1).unsqueeze(1);
  const at::Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
  return x * both.cos() + at::cat({-x2, x1}, -1) * both.sin();
}

int64_t batch_of(const ReferenceInputs& r) { return r.data.tokens.size(0); }
int64_t sequence_of(const ReferenceInputs& r) { return r.data.tokens.size(1); }

// ---- the kinds' entries ----

using Sizes = std::vector<int64_t>;

Sizes hidden_output(const OperatorShape& shape, int64_t b, int64_t s) { return {b, s, shape.hidden}; }
Sizes attention_map(const OperatorShape& shape, int64_t b, int64_t s) { return {b, shape.heads, s, s}; }
Sizes mlp_hidden(const OperatorShape& shape, int64_t b, int64_t s) { return {b, s, shape.ffn_hidden}; }

OperatorKind embedding_kind(std::string_view role, bool positional) {
  OperatorKind k;
  k.kind = "embedding";
  k.role = role;
  k.parameters = [positional](const OperatorSite& site, ParameterDraw& draw) {
    return std::vector<at::Tensor>{
        draw.normal({positional ? site.shape.max_positions : site.shape.vocab, site.shape.hidden})};
  };
  k.make = [positional](const OperatorSite& site, std::vector<at::Tensor> params) -> std::unique_ptr<Operator> {
    return std::make_unique<Embedding>(site.node.name, positional, std::move(params));
  };
  k.output_shape = hidden_output;
  k.reference = [positional](const ReferenceInputs& r) {
    const at::Tensor& table = r.parameters[0];
    const int64_t b = batch_of(r), s = sequence_of(r);
    return positional
               ? at::embedding(table, at::arange(s, r.data.tokens.options())).unsqueeze(0).expand({b, s, table.size(1)})
               : at::embedding(table, r.data.tokens);
  };
  return k;
}

// A linear layer whose role says its [out, in] weight; a bias where the node counts one.
OperatorKind linear_kind(std::string_view role, std::function<Sizes(const OperatorShape&)> sizes) {
  OperatorKind k;
  k.kind = "linear";
  k.role = role;
  k.parameters = [sizes](const OperatorSite& site, ParameterDraw& draw) {
    const Sizes weight = sizes(site.shape);
    std::vector<at::Tensor> params{draw.normal(weight)};
    if (site.node.parameters > double(weight[0]) * double(weight[1]))
      params.push_back(at::zeros({weight[0]}, draw.options));
    return params;
  };
  k.make = [](const OperatorSite& site, std::vector<at::Tensor> params) -> std::unique_ptr<Operator> {
    return std::make_unique<Linear>(site.node.name, std::move(params));
  };
  k.output_shape = [sizes](const OperatorShape& shape, int64_t b, int64_t s) { return Sizes{b, s, sizes(shape)[0]}; };
  k.reference = [](const ReferenceInputs& r) {
    const std::vector<at::Tensor>& p = r.parameters;
    return at::linear(r.inputs[0], p[0], p.size() > 1 ? c10::optional<at::Tensor>(p[1]) : c10::nullopt);
  };
  return k;
}

// A kind whose operator holds no parameters and is built from its name (and the shape) alone.
template <typename Op>
OperatorKind stateless_kind(std::string_view kind, std::string_view role,
                            std::function<Sizes(const OperatorShape&, int64_t, int64_t)> output,
                            std::function<at::Tensor(const ReferenceInputs&)> reference) {
  OperatorKind k;
  k.kind = kind;
  k.role = role;
  k.make = [](const OperatorSite& site, std::vector<at::Tensor>) -> std::unique_ptr<Operator> {
    if constexpr (std::is_constructible_v<Op, std::string, const OperatorShape&>)
      return std::make_unique<Op>(site.node.name, site.shape);
    else
      return std::make_unique<Op>(site.node.name);
  };
  k.output_shape = std::move(output);
  k.reference = std::move(reference);
  return k;
}

// The lookups, the sum and the norms: what every layer reads and writes at the hidden width.
void add_lookup_sum_and_norm_kinds(std::vector<OperatorKind>& kinds) {
  kinds.push_back(embedding_kind("word", false));
  kinds.push_back(embedding_kind("position", true));

  OperatorKind add;
  add.kind = "add";
  add.make = [](const OperatorSite& site, std::vector<at::Tensor>) -> std::unique_ptr<Operator> {
    return std::make_unique<Sum>(site.node.name, site.inputs);
  };
  add.output_shape = hidden_output;
  add.reference = [](const ReferenceInputs& r) {
    at::Tensor out = r.inputs[0];
    for (size_t i = 1; i < r.inputs.size(); ++i) out = out + r.inputs[i];
    return out;
  };
  kinds.push_back(std::move(add));

  OperatorKind layernorm;
  layernorm.kind = "layernorm";
  layernorm.parameters = [](const OperatorSite& site, ParameterDraw& draw) {
    return std::vector<at::Tensor>{at::ones({site.shape.hidden}, draw.options),
                                   at::zeros({site.shape.hidden}, draw.options)};
  };
  layernorm.make = [](const OperatorSite& site, std::vector<at::Tensor> params) -> std::unique_ptr<Operator> {
    return std::make_unique<LayerNorm>(site.node.name, std::move(params));
  };
  layernorm.output_shape = hidden_output;
  layernorm.reference = [](const ReferenceInputs& r) {
    const std::vector<at::Tensor>& p = r.parameters;
    return at::layer_norm(r.inputs[0], {p[0].size(0)}, p[0], p[1], kNormEpsilon);
  };
  kinds.push_back(std::move(layernorm));

  OperatorKind rmsnorm;
  rmsnorm.kind = "rmsnorm";
  rmsnorm.parameters = [](const OperatorSite& site, ParameterDraw& draw) {
    return std::vector<at::Tensor>{at::ones({site.shape.hidden}, draw.options)};
  };
  rmsnorm.make = [](const OperatorSite& site, std::vector<at::Tensor> params) -> std::unique_ptr<Operator> {
    return std::make_unique<RmsNorm>(site.node.name, std::move(params));
  };
  rmsnorm.output_shape = hidden_output;
  rmsnorm.reference = [](const ReferenceInputs& r) {
    const at::Tensor& x = r.inputs[0];
    return x * at::rsqrt(x.pow(2).mean(-1, true) + kNormEpsilon) * r.parameters[0];
  };
  kinds.push_back(std::move(rmsnorm));
}

// The linear layers, each role its weight's [out, in].
void add_linear_kinds(std::vector<OperatorKind>& kinds) {
  kinds.push_back(linear_kind("qkv", [](const OperatorShape& s) { return Sizes{s.qkv_width(), s.hidden}; }));
  kinds.push_back(linear_kind("out_proj", [](const OperatorShape& s) {
    return Sizes{s.hidden, s.heads * s.head_dim()};
  }));
  kinds.push_back(linear_kind("fc1", [](const OperatorShape& s) {
    return Sizes{(s.gated_mlp ? 2 : 1) * s.ffn_hidden, s.hidden};
  }));
  kinds.push_back(linear_kind("fc2", [](const OperatorShape& s) { return Sizes{s.hidden, s.ffn_hidden}; }));
  kinds.push_back(linear_kind("lm_head", [](const OperatorShape& s) { return Sizes{s.vocab, s.hidden}; }));
}

// Attention, the MLP's activations and the loss: no parameters.
void add_attention_activation_and_loss_kinds(std::vector<OperatorKind>& kinds) {
  kinds.push_back(stateless_kind<Rope>(
      "rope", "",
      [](const OperatorShape& shape, int64_t b, int64_t s) {
        return Sizes{b, s, (shape.heads + shape.kv_heads) * shape.head_dim()};
      },
      [](const ReferenceInputs& r) {
        const OperatorShape& shape = r.shape;
        const int64_t b = batch_of(r), s = sequence_of(r), width = (shape.heads + shape.kv_heads) * shape.head_dim();
        return reference_rotary(r.inputs[0].slice(2, 0, width).reshape({b, s, -1, shape.head_dim()}), shape.rotary_base)
            .reshape({b, s, width});
      }));
  OperatorKind scores = stateless_kind<AttentionScores>("bmm", "scores", attention_map, [](const ReferenceInputs& r) {
    const int64_t s = sequence_of(r);
    const at::Tensor q = reference_head_part(r.inputs[0], 0, r.shape), k = reference_head_part(r.inputs[0], 1, r.shape);
    const at::Tensor mask = at::ones({s, s}, r.data.tokens.options().dtype(at::kBool)).triu(1);
    return (at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1))))
        .masked_fill(mask, -std::numeric_limits<double>::infinity());
  });
  scores.quadratic_in_sequence = true;
  kinds.push_back(std::move(scores));
  OperatorKind softmax = stateless_kind<Softmax>("softmax", "", attention_map,
                                                 [](const ReferenceInputs& r) { return at::softmax(r.inputs[0], -1); });
  softmax.quadratic_in_sequence = true;
  kinds.push_back(std::move(softmax));
  kinds.push_back(stateless_kind<AttentionValues>("bmm", "attention_v", hidden_output, [](const ReferenceInputs& r) {
    const int64_t b = batch_of(r), s = sequence_of(r);
    return at::matmul(r.inputs[0], reference_head_part(r.inputs[1], 2, r.shape))
        .transpose(1, 2)
        .reshape({b, s, r.shape.heads * r.shape.head_dim()});
  }));
  kinds.push_back(
      stateless_kind<Gelu>("gelu", "", mlp_hidden, [](const ReferenceInputs& r) { return at::gelu(r.inputs[0]); }));
  kinds.push_back(stateless_kind<SwiGlu>("swiglu", "", mlp_hidden, [](const ReferenceInputs& r) {
    const at::Tensor& x = r.inputs[0];
    return at::silu(x.slice(-1, 0, x.size(-1) / 2)) * x.slice(-1, x.size(-1) / 2);
  }));
  kinds.push_back(stateless_kind<CrossEntropy>(
      "cross_entropy", "", [](const OperatorShape&, int64_t, int64_t) { return Sizes{}; },
      [](const ReferenceInputs& r) {
        const at::Tensor& logits = r.inputs[0];
        return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), r.data.targets.reshape({-1}));
      }));
}

std::vector<OperatorKind> make_operator_kinds() {
  std::vector<OperatorKind> kinds;
  add_lookup_sum_and_norm_kinds(kinds);
  add_linear_kinds(kinds);
  add_attention_activation_and_loss_kinds(kinds);
  return kinds;
}

}  // namespace

at::Tensor ParameterDraw::normal(at::IntArrayRef sizes) {
  return at::empty(sizes, options).normal_(0, kInitStd, generator);
}

const std::vector<OperatorKind>& operator_kinds() {
  static const std::vector<OperatorKind> kinds = make_operator_kinds();
  return kinds;
}

const OperatorKind& operator_kind(const OperatorNode& node) {
  for (const OperatorKind& k : operator_kinds())
    if (k.kind == node.kind && (k.role.empty() || k.role == node.role)) return k;
  throw Error(fmt::format("runtime: operator '{}' of kind '{}'{} has no runtime implementation", node.name, node.kind,
                          node.role.empty() ? "" : fmt::format(" (role '{}')", node.role)));
}

}  // namespace flexpipe::runtime
