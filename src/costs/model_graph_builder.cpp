// Generates a model zoo configuration as an operator-level cost graph. Every operator's FLOPs and
// bytes are exact polynomials in (b, s); saved bytes follow Korthikanti et al. 2022 ("Reducing
// Activation Recomputation in Large Transformer Models", Section 4.1) tensor by tensor, so one GPT
// layer saves s*b*h*(34 + 5*a*s/h) bytes plus the LayerNorm statistics. docs/model-zoo.md explains
// the operators and their constants.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

// FLOPs per element of the element-wise operators (forward, input gradient, weight gradient). They
// only matter where an operator is not memory bound, which at these sizes is never.
constexpr double kNormFlops[] = {5, 8, 2};
constexpr double kSoftmaxFlops[] = {5, 3};
constexpr double kActivationFlops[] = {8, 8};
constexpr double kSwiGluFlops[] = {5, 8};
constexpr double kRopeFlops[] = {3, 3};
constexpr double kStatBytes = 4;   // one fp32 statistic per token (mean or reciprocal std)
constexpr double kIndexBytes = 8;  // int64 token ids and routing indices
constexpr double kLossBytes = 4;   // fp32 softmax and per-token loss

class Builder {
 public:
  Builder(const ModelConfig& config, const ModelOptions& options)
      : c_(config), options_(options), e_(options.activation_bytes) {}

  CostGraph build(const HardwareProfile& hardware) {
    graph_.name = c_.name;
    graph_.time_unit = "ms";
    graph_.reference = {options_.microbatch_size, options_.seq_len > 0 ? options_.seq_len : double(c_.seq_len)};
    graph_.hardware = roofline_rates(hardware);
    switch (c_.architecture) {
      case Architecture::Decoder: decoder_model(); break;
      case Architecture::EncoderOnly: encoder_model(); break;
      case Architecture::EncoderDecoder: encoder_decoder_model(); break;
      case Architecture::Vision: vision_model(); break;
    }
    for (OperatorNode& node : graph_.nodes)
      for (PassCost* cost : {&node.forward, &node.backward_input, &node.backward_weight})
        cost->time = roofline_time(*cost, *graph_.hardware, graph_.reference);
    validate_cost_graph(graph_, c_.name);
    return std::move(graph_);
  }

 private:
  // ---- graph plumbing ----
  void begin_layer(const std::string& name, LayerRole role) {
    graph_.layers.push_back({name, role});
    layer_ = static_cast<int>(graph_.layers.size()) - 1;
    prefix_ = name;
  }

  int add(OperatorNode node, std::initializer_list<int> inputs) {
    node.name = fmt::format("{}.{}", prefix_, node.name);
    node.layer = layer_;
    node.active_parameters = node.active_parameters > 0 ? node.active_parameters : node.parameters;
    graph_.nodes.push_back(std::move(node));
    const int index = static_cast<int>(graph_.nodes.size()) - 1;
    for (int input : inputs) connect(input, index);
    return index;
  }

  // The consumer reads the producer's whole output.
  void connect(int from, int to) { graph_.edges.push_back({from, to, graph_.nodes[from].output_bytes}); }
  void connect(int from, int to, ShapePolynomial bytes) { graph_.edges.push_back({from, to, bytes}); }

  // Parts of tensors read by `to`, one edge per producer (Q, K and V may come from one projection).
  void connect_parts(std::initializer_list<std::pair<int, ShapePolynomial>> parts, int to) {
    std::vector<std::pair<int, ShapePolynomial>> merged;
    for (const auto& part : parts) {
      auto it = std::find_if(merged.begin(), merged.end(), [&](const auto& m) { return m.first == part.first; });
      if (it == merged.end())
        merged.push_back(part);
      else
        it->second += part.second;
    }
    for (const auto& [from, bytes] : merged) connect(from, to, bytes);
  }

  // Moves an operator's token-proportional terms to per-sample ones: it sees one token per sample.
  static void once_per_sample(OperatorNode& node) {
    for (ShapePolynomial* p : {&node.forward.flops, &node.forward.bytes, &node.backward_input.flops,
                               &node.backward_input.bytes, &node.backward_weight.flops, &node.backward_weight.bytes,
                               &node.saved_bytes, &node.freed_by_input, &node.shared_saved_bytes, &node.output_bytes})
      std::swap(p->per_sample, p->per_token);
  }

  // ---- operators ----
  // y = x W (+ bias) over `routed` copies of every token (MoE top-k), `copies` weight matrices
  // (experts). Saves x for the weight gradient; I needs only W.
  OperatorNode linear(const char* name, double in, double out, bool bias, double routed = 1, double copies = 1,
                      double active_copies = 1) const {
    OperatorNode n;
    n.name = n.role = name;
    n.kind = copies > 1 ? "grouped_linear" : "linear";
    const double weight = in * out + (bias ? out : 0);
    n.parameters = copies * weight;
    n.active_parameters = active_copies * weight;
    n.forward = {0, per_token(2 * in * out * routed),
                 per_token(e_ * (in + out) * routed) + fixed_amount(e_ * copies * weight)};
    n.backward_input = {0, per_token(2 * in * out * routed),
                        per_token(e_ * (in + out) * routed) + fixed_amount(e_ * copies * weight)};
    n.backward_weight = {0, per_token((2 * in * out + (bias ? out : 0)) * routed),
                         per_token(e_ * (in + out) * routed) + fixed_amount(2 * e_ * copies * weight)};
    n.saved_bytes = per_token(e_ * in * routed);
    n.output_bytes = per_token(e_ * out * routed);
    return n;
  }

  OperatorNode norm(const char* name) const {
    OperatorNode n;
    n.name = name;
    const double h = c_.hidden;
    const bool layer_norm = c_.norm == NormKind::LayerNorm;
    n.kind = layer_norm ? "layernorm" : "rmsnorm";
    n.parameters = layer_norm ? 2 * h : h;
    const double stats = (layer_norm ? 2 : 1) * kStatBytes;
    n.forward = {0, per_token(kNormFlops[0] * h), per_token(2 * e_ * h + stats)};
    n.backward_input = {0, per_token(kNormFlops[1] * h), per_token(3 * e_ * h + stats)};
    n.backward_weight = {0, per_token(kNormFlops[2] * h), per_token(2 * e_ * h + stats)};
    // The input and the statistics serve both gradients: released when W ends.
    n.saved_bytes = per_token(e_ * h + stats);
    n.output_bytes = per_token(e_ * h);
    return n;
  }

  // An element-wise operator over `elements` per token (or per token and key for attention maps)
  // that saves `saved` for its input gradient.
  OperatorNode elementwise(const char* name, const char* kind, ShapePolynomial elements, double inputs, double flops_f,
                           double flops_i, ShapePolynomial saved) const {
    OperatorNode n;
    n.name = name;
    n.kind = kind;
    n.forward = {0, flops_f * elements, (e_ * (inputs + 1)) * elements};
    n.backward_input = {0, flops_i * elements, (e_ * (inputs + 1)) * elements};
    n.saved_bytes = saved;
    n.freed_by_input = saved;
    n.output_bytes = e_ * elements;
    return n;
  }

  // Dropout keeps a one-byte mask per element for its input gradient.
  OperatorNode dropout(const char* name, ShapePolynomial elements) const {
    OperatorNode n = elementwise(name, "dropout", elements, 1, 1, 1, elements);
    n.forward.bytes += elements;  // the mask written
    n.backward_input.bytes += elements;
    return n;
  }

  OperatorNode sum_op(const char* name, double inputs) const {
    OperatorNode n;
    n.name = name;
    n.kind = "add";
    const ShapePolynomial elements = per_token(c_.hidden);
    n.forward = {0, (inputs - 1) * elements, (e_ * (inputs + 1)) * elements};
    n.output_bytes = e_ * elements;
    return n;
  }

  // ---- blocks ----
  // Self- or cross-attention from the normed input to the projected output; returns the output
  // projection. `kv_source` feeds K and V (the encoder output for cross-attention).
  int attention(int query_source, int kv_source, bool first_layer) {
    const double h = c_.hidden, a = c_.heads, kv = c_.kv_heads, d = c_.head_dim;
    const bool cross = kv_source != query_source;
    const std::string tag = cross ? "cross_" : "";
    int q_node, k_node, v_node;  // producers of Q, K, V
    ShapePolynomial q_bytes = per_token(e_ * a * d), k_bytes = per_token(e_ * kv * d), v_bytes = k_bytes;
    if (cross) {
      q_node = add(linear("cross_q", h, a * d, c_.biases), {query_source});
      k_node = v_node = add(linear("cross_kv", h, 2 * kv * d, c_.biases), {kv_source});
    } else {
      q_node = k_node = v_node = add(linear("qkv", h, (a + 2 * kv) * d, c_.biases), {query_source});
    }
    if (c_.position == PositionKind::Rotary) {
      OperatorNode rope = elementwise("rope", "rope", per_token((a + kv) * d), 1, kRopeFlops[0], kRopeFlops[1], {});
      const int rope_node = add(rope, {});
      connect(q_node, rope_node, q_bytes + k_bytes);
      q_node = k_node = rope_node;
    }
    int context;
    if (options_.flash_attention) {
      OperatorNode flash;
      flash.name = tag + "flash_attention";
      flash.kind = "flash_attention";
      const ShapePolynomial qkv_bytes = per_token(e_ * (a + 2 * kv) * d);
      // QK^T and PV forward; the backward recomputes QK^T and does four more products.
      flash.forward = {0, per_token_seq(4 * a * d), qkv_bytes + per_token(e_ * a * d + kStatBytes * a)};
      flash.backward_input = {0, per_token_seq(10 * a * d), 2 * qkv_bytes + per_token(2 * e_ * a * d + kStatBytes * a)};
      // Q, K, V and the log-sum-exp per head; O is the output projection's saved input.
      flash.saved_bytes = qkv_bytes + per_token(kStatBytes * a);
      flash.freed_by_input = flash.saved_bytes;
      flash.output_bytes = per_token(e_ * a * d);
      context = add(flash, {});
      connect_parts({{q_node, q_bytes}, {k_node, k_bytes}, {v_node, v_bytes}}, context);
    } else {
      OperatorNode scores;
      scores.name = tag + "scores";
      scores.role = "scores";
      scores.kind = "bmm";
      if (c_.position == PositionKind::RelativeBias && first_layer) scores.parameters = 32 * a;  // T5 bucket table
      scores.forward = {0, per_token_seq(2 * a * d), q_bytes + k_bytes + per_token_seq(e_ * a)};
      scores.backward_input = {0, per_token_seq(4 * a * d), 2 * (q_bytes + k_bytes) + per_token_seq(e_ * a)};
      scores.saved_bytes = q_bytes + k_bytes;
      scores.freed_by_input = scores.saved_bytes;
      scores.output_bytes = per_token_seq(e_ * a);
      const int scores_node = add(scores, {});
      connect_parts({{q_node, q_bytes}, {k_node, k_bytes}}, scores_node);
      const ShapePolynomial map = per_token_seq(a);
      OperatorNode softmax = elementwise("softmax", "softmax", map, 1, kSoftmaxFlops[0], kSoftmaxFlops[1], e_ * map);
      softmax.name = tag + softmax.name;
      int probabilities = add(softmax, {scores_node});
      if (c_.dropout) {
        OperatorNode mask = dropout("attention_dropout", map);
        mask.name = tag + mask.name;
        probabilities = add(mask, {probabilities});
      }
      OperatorNode weighted;
      weighted.name = tag + "attention_v";
      weighted.role = "attention_v";
      weighted.kind = "bmm";
      weighted.forward = {0, per_token_seq(2 * a * d), e_ * map + v_bytes + per_token(e_ * a * d)};
      weighted.backward_input = {0, per_token_seq(4 * a * d), 2 * (e_ * map + v_bytes) + per_token(e_ * a * d)};
      weighted.saved_bytes = e_ * map + v_bytes;
      weighted.freed_by_input = weighted.saved_bytes;
      // Without dropout it saves the very probabilities the softmax saves (Korthikanti et al. count
      // 2as^2 bytes per layer for them, not 4).
      if (!c_.dropout) weighted.shared_saved_bytes = e_ * map;
      weighted.output_bytes = per_token(e_ * a * d);
      context = add(weighted, {probabilities});
      connect(v_node, context, v_bytes);
    }
    return add(linear(cross ? "cross_out" : "out_proj", a * d, h, c_.biases), {context});
  }

  // Dense MLP from the normed input; returns its last operator.
  int mlp(int input, double ffn, const char* prefix = "") {
    const double h = c_.hidden;
    const std::string up = fmt::format("{}fc1", prefix), act = fmt::format("{}act", prefix),
                      down = fmt::format("{}fc2", prefix);
    if (c_.mlp == MlpKind::SwiGlu) {
      const int fc1 = add(linear(up.c_str(), h, 2 * ffn, c_.biases), {input});
      const int gate = add(elementwise(act.c_str(), "swiglu", per_token(ffn), 2, kSwiGluFlops[0], kSwiGluFlops[1],
                                       per_token(2 * e_ * ffn)),
                           {fc1});
      return add(linear(down.c_str(), ffn, h, c_.biases), {gate});
    }
    const int fc1 = add(linear(up.c_str(), h, ffn, c_.biases), {input});
    const char* kind = c_.mlp == MlpKind::Gelu ? "gelu" : "relu";
    const int gate = add(elementwise(act.c_str(), kind, per_token(ffn), 1, kActivationFlops[0], kActivationFlops[1],
                                     per_token(e_ * ffn)),
                         {fc1});
    return add(linear(down.c_str(), ffn, h, c_.biases), {gate});
  }

  // Routed experts (and shared experts) from the normed input; returns the operators whose outputs
  // join the residual stream.
  std::vector<int> moe(int input) {
    const double h = c_.hidden, experts = c_.moe.experts, k = c_.moe.top_k, ffn = c_.moe.expert_ffn_hidden;
    const int router = add(linear("router", h, experts, false), {input});
    OperatorNode topk = elementwise("topk", "topk_softmax", per_token(experts), 1, kSoftmaxFlops[0], kSoftmaxFlops[1],
                                    per_token(kLossBytes * experts));
    topk.output_bytes = per_token(k * (kLossBytes + kIndexBytes));  // weights and expert ids per token
    const int gate = add(topk, {router});
    OperatorNode dispatch;
    dispatch.name = "dispatch";
    dispatch.kind = "permute";
    dispatch.forward = {0, {}, per_token(e_ * h * (1 + k) + kIndexBytes * k)};
    dispatch.backward_input = {0, {}, per_token(e_ * h * (1 + k) + kIndexBytes * k)};
    dispatch.saved_bytes = per_token(kIndexBytes * k);
    dispatch.freed_by_input = dispatch.saved_bytes;
    dispatch.output_bytes = per_token(e_ * h * k);
    const int routed = add(dispatch, {input, gate});
    const int fc1 = add(linear("experts_fc1", h, 2 * ffn, false, k, experts, k), {routed});
    const int act = add(elementwise("experts_act", "swiglu", per_token(k * ffn), 2, kSwiGluFlops[0], kSwiGluFlops[1],
                                    per_token(2 * e_ * k * ffn)),
                        {fc1});
    const int fc2 = add(linear("experts_fc2", ffn, h, false, k, experts, k), {act});
    OperatorNode combine;
    combine.name = "combine";
    combine.kind = "unpermute";
    combine.forward = {0, per_token(2 * k * h), per_token(e_ * h * (1 + k))};
    combine.backward_input = {0, per_token(2 * k * h), per_token(e_ * h * (1 + 2 * k))};
    // The expert outputs (for the gradient of the routing weights) and the weights themselves.
    combine.saved_bytes = per_token(e_ * k * h + kLossBytes * k);
    combine.freed_by_input = combine.saved_bytes;
    combine.output_bytes = per_token(e_ * h);
    std::vector<int> outputs{add(combine, {fc2, gate})};
    if (c_.moe.shared_experts > 0) outputs.push_back(mlp(input, c_.moe.shared_experts * ffn, "shared_"));
    return outputs;
  }

  // One transformer layer from `input` (the residual stream); returns the new residual stream.
  int transformer_layer(int input, int layer_index, int encoder_output = -1) {
    const ShapePolynomial tokens = per_token(c_.hidden);
    const bool first = layer_index == 0;
    if (c_.post_norm) {  // BERT: x + f(x), then norm
      const int attn = attention(input, input, first);
      const int attn_out = c_.dropout ? add(dropout("attention_out_dropout", tokens), {attn}) : attn;
      const int norm1 = add(norm("ln1"), {add(sum_op("residual1", 2), {input, attn_out})});
      const int mlp_out = mlp(norm1, c_.ffn_hidden);
      const int mlp_drop = c_.dropout ? add(dropout("mlp_dropout", tokens), {mlp_out}) : mlp_out;
      return add(norm("ln2"), {add(sum_op("residual2", 2), {norm1, mlp_drop})});
    }
    const int norm1 = add(norm("ln1"), {input});
    const int attn = attention(norm1, norm1, first);
    const int attn_out = c_.dropout ? add(dropout("attention_out_dropout", tokens), {attn}) : attn;
    int stream = add(sum_op("residual1", 2), {input, attn_out});
    if (encoder_output >= 0) {
      const int norm_cross = add(norm("ln_cross"), {stream});
      const int cross = attention(norm_cross, encoder_output, false);
      const int cross_out = c_.dropout ? add(dropout("cross_out_dropout", tokens), {cross}) : cross;
      stream = add(sum_op("residual_cross", 2), {stream, cross_out});
    }
    const int norm2 = add(norm("ln2"), {stream});
    const bool routed = c_.moe.experts > 0 && layer_index >= c_.moe.dense_layers;
    std::vector<int> branch = routed ? moe(norm2) : std::vector<int>{mlp(norm2, c_.ffn_hidden)};
    if (c_.dropout) branch.front() = add(dropout("mlp_dropout", tokens), {branch.front()});
    const int residual = add(sum_op("residual2", 1 + double(branch.size())), {stream});
    for (int producer : branch) connect(producer, residual);
    return residual;
  }

  // ---- embeddings and heads ----
  OperatorNode lookup(const char* name, double rows) const {
    OperatorNode n;
    n.name = n.role = name;
    n.kind = "embedding";
    const double h = c_.hidden;
    n.parameters = rows * h;
    n.forward = {0, {}, per_token(e_ * h + kIndexBytes)};
    // The gradient scatters into the table: W only, and it needs the ids.
    n.backward_weight = {0, per_token(h), per_token(2 * e_ * h + kIndexBytes)};
    n.saved_bytes = per_token(kIndexBytes);
    n.output_bytes = per_token(e_ * h);
    return n;
  }

  // Word embedding (plus learned positions and segments), summed, normed (BERT) and dropped out.
  int embedding_block(int& word_table) {
    begin_layer("embedding", LayerRole::Embedding);
    word_table = add(lookup("word", c_.vocab), {});
    int stream = word_table;
    if (c_.position == PositionKind::Learned || c_.token_types > 0) {
      std::vector<int> parts{word_table};
      if (c_.position == PositionKind::Learned) parts.push_back(add(lookup("position", c_.max_positions), {}));
      if (c_.token_types > 0) parts.push_back(add(lookup("token_type", c_.token_types), {}));
      stream = add(sum_op("sum", double(parts.size())), {});
      for (int part : parts) connect(part, stream);
    }
    if (c_.post_norm) stream = add(norm("norm"), {stream});
    if (c_.dropout) stream = add(dropout("dropout", per_token(c_.hidden)), {stream});
    return stream;
  }

  // Cross-entropy over `classes` per token (per sample for classifiers), softmax kept in fp32.
  OperatorNode loss(const char* name, ShapePolynomial positions, double classes) const {
    OperatorNode n;
    n.name = name;
    n.kind = "cross_entropy";
    n.forward = {0, (kSoftmaxFlops[0] * classes) * positions, (e_ * classes + kLossBytes) * positions};
    n.backward_input = {0, (kSoftmaxFlops[1] * classes) * positions, ((e_ + kLossBytes) * classes) * positions};
    n.saved_bytes = (kLossBytes * classes) * positions;
    n.freed_by_input = n.saved_bytes;
    n.output_bytes = kLossBytes * positions;
    n.workspace_bytes = (kLossBytes * classes) * positions;  // the fp32 upcast of the logits
    return n;
  }

  // Final norm, LM head (tied or not) and loss.
  void language_head(int stream, int word_table) {
    begin_layer("head", LayerRole::Loss);
    const int normed = add(norm("final_norm"), {stream});
    OperatorNode head = linear("lm_head", c_.hidden, c_.vocab, false);
    if (c_.tied_embeddings) head.tied_to = word_table;
    const int logits = add(head, {normed});
    add(loss("loss", per_token(1), c_.vocab), {logits});
  }

  void decoder_model() {
    int word_table = 0;
    int stream = embedding_block(word_table);
    for (int i = 0; i < c_.layers; ++i) {
      begin_layer(fmt::format("layer.{}", i), LayerRole::Transformer);
      stream = transformer_layer(stream, i);
    }
    language_head(stream, word_table);
  }

  // BERT: post-LN encoder, then the pooler + next-sentence head on the class token and the masked-LM
  // head (dense, GeLU, norm, decoder tied to the word embedding, with its own bias).
  void encoder_model() {
    int word_table = 0;
    int stream = embedding_block(word_table);
    for (int i = 0; i < c_.layers; ++i) {
      begin_layer(fmt::format("layer.{}", i), LayerRole::Transformer);
      stream = transformer_layer(stream, i);
    }
    begin_layer("head", LayerRole::Loss);
    const double h = c_.hidden;
    OperatorNode pooler = linear("pooler", h, h, true);  // on the class token
    once_per_sample(pooler);
    const int pooled = add(pooler, {});
    connect(stream, pooled, per_sample(e_ * h));
    OperatorNode nsp = linear("nsp_classifier", h, 2, true);
    once_per_sample(nsp);
    const int nsp_logits = add(nsp, {pooled});
    const int mlm_dense = add(linear("mlm_dense", h, h, true), {stream});
    const int mlm_act = add(elementwise("mlm_act", "gelu", per_token(h), 1, kActivationFlops[0], kActivationFlops[1],
                                        per_token(e_ * h)),
                            {mlm_dense});
    const int mlm_norm = add(norm("mlm_norm"), {mlm_act});
    OperatorNode decoder = linear("mlm_decoder", h, c_.vocab, false);
    decoder.tied_to = word_table;
    const int logits = add(decoder, {mlm_norm});
    OperatorNode bias;  // the decoder's own output bias, not tied
    bias.name = "mlm_bias";
    bias.kind = "bias";
    bias.parameters = c_.vocab;
    bias.forward = {0, per_token(c_.vocab), per_token(2 * e_ * c_.vocab)};
    bias.backward_weight = {0, per_token(c_.vocab), per_token(e_ * c_.vocab)};
    bias.output_bytes = per_token(e_ * c_.vocab);
    const int biased = add(bias, {logits});
    const int mlm_loss = add(loss("mlm_loss", per_token(1), c_.vocab), {biased});
    const int nsp_loss = add(loss("nsp_loss", per_sample(1), 2), {nsp_logits});
    OperatorNode total = sum_op("total_loss", 2);
    total.forward = {0, per_sample(1), per_sample(3 * kLossBytes)};
    total.output_bytes = fixed_amount(kLossBytes);
    add(total, {mlm_loss, nsp_loss});
  }

  // T5: shared embedding, encoder stack with final norm, decoder stack whose cross-attention reads the
  // encoder output (edges that cross every decoder cut), tied LM head and loss. Encoder and decoder
  // run at the same sequence length.
  void encoder_decoder_model() {
    int word_table = 0;
    int stream = embedding_block(word_table);
    for (int i = 0; i < c_.encoder_layers; ++i) {
      begin_layer(fmt::format("encoder.{}", i), LayerRole::Transformer);
      stream = transformer_layer(stream, i);
    }
    const int encoder_output = add(norm("final_norm"), {stream});
    for (int i = 0; i < c_.layers; ++i) {
      begin_layer(fmt::format("decoder.{}", i), LayerRole::Transformer);
      if (i == 0) {
        OperatorNode decoder_embedding = lookup("embedding", c_.vocab);
        decoder_embedding.tied_to = word_table;
        stream = add(decoder_embedding, {});
        if (c_.dropout) stream = add(dropout("embedding_dropout", per_token(c_.hidden)), {stream});
      }
      stream = transformer_layer(stream, i, encoder_output);
    }
    language_head(stream, word_table);
  }

  // ViT: patches projected by a linear layer (the class token is counted as a patch), class token
  // and learned positions added, pre-LN encoder, final norm, classifier on the class token.
  void vision_model() {
    begin_layer("embedding", LayerRole::Embedding);
    const double h = c_.hidden;
    const double patch_inputs = double(c_.channels) * c_.patch_size * c_.patch_size;
    OperatorNode patches = linear("patch_projection", patch_inputs, h, true);
    const int projected = add(patches, {});
    OperatorNode positions = sum_op("class_and_position", 2);
    positions.parameters = h + double(c_.max_positions) * h;
    int stream = add(positions, {projected});
    if (c_.dropout) stream = add(dropout("dropout", per_token(h)), {stream});
    for (int i = 0; i < c_.layers; ++i) {
      begin_layer(fmt::format("layer.{}", i), LayerRole::Transformer);
      stream = transformer_layer(stream, i);
    }
    begin_layer("head", LayerRole::Loss);
    const int normed = add(norm("final_norm"), {stream});
    OperatorNode classifier = linear("classifier", h, c_.vocab, true);
    once_per_sample(classifier);
    const int logits = add(classifier, {});
    connect(normed, logits, per_sample(e_ * h));
    add(loss("loss", per_sample(1), c_.vocab), {logits});
  }

  const ModelConfig& c_;
  const ModelOptions& options_;
  const double e_;  // bytes per activation and weight element
  CostGraph graph_;
  int layer_ = kNoLayer;
  std::string prefix_;
};

}  // namespace

CostGraph build_model_graph(const ModelConfig& config, const HardwareProfile& hardware, const ModelOptions& options) {
  if (options.microbatch_size <= 0 || options.seq_len < 0 || options.activation_bytes <= 0)
    throw Error(
        fmt::format("{}: micro-batch size, sequence length and activation bytes must be positive", config.name));
  return Builder(config, options).build(hardware);
}

}  // namespace flexpipe
