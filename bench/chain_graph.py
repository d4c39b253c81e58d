#!/usr/bin/python3
"""Writes a cost graph (docs/cost-graph.md) of a GPT-style model with as many layers as it takes to reach
a given operator count: an embedding (4 operators), transformer layers of 15 operators each (the zoo's
GPT layer: norms, QKV, attention scores, softmax, dropouts, projections, MLP, residual adds) and a head
(3 operators). Costs are the zoo's formulas (src/costs/model_graph_builder.cpp) at a small hidden size,
timed by the roofline of an H100, so that a 200 k-operator graph is a plausible (if very deep) model.

Usage: bench/chain_graph.py [--operators N] [--hidden H] [--heads A] [--seq S] [--vocab V] -o FILE
The operator count is N rounded up to whole layers. Standard library only (run with /usr/bin/python3).
"""
import argparse
import json
import sys

FLOP_RATE = 4.945e11  # per ms: the zoo's H100-80GB roofline (peak x efficiency)
BYTE_RATE = 1.675e9
E = 2  # bytes per activation element (bf16)
STAT = 4  # one fp32 statistic per token


def poly(token=0.0, token_seq=0.0, fixed=0.0):
    out = {}
    if fixed:
        out["fixed"] = fixed
    if token:
        out["per_token"] = token
    if token_seq:
        out["per_token_seq"] = token_seq
    return out if out else 0


def at(p, seq):
    if not p:
        return 0.0
    return p.get("fixed", 0.0) + p.get("per_token", 0.0) * seq + p.get("per_token_seq", 0.0) * seq * seq


def pass_cost(flops, moved, seq):
    time = max(at(flops, seq) / FLOP_RATE, at(moved, seq) / BYTE_RATE)
    return {"time": time, "flops": flops, "bytes": moved}


class Writer:
    def __init__(self, seq):
        self.seq = seq
        self.nodes = []
        self.edges = []
        self.layers = []
        self.prefix = ""

    def layer(self, name, role):
        self.layers.append({"name": name, "role": role})
        self.prefix = name

    def add(self, name, kind, inputs, params=0, fwd=(0, 0), bi=(0, 0), bw=(0, 0), saved=0, freed=0, output=0,
            workspace=0, tied_to=None):
        node = {"name": f"{self.prefix}.{name}", "kind": kind, "layer": self.prefix, "parameters": params}
        if tied_to:
            node["tied_to"] = tied_to
        node["scaling"] = {"rule": "roofline"}
        node["forward"] = pass_cost(*fwd, self.seq)
        node["backward_input"] = pass_cost(*bi, self.seq)
        node["backward_weight"] = pass_cost(*bw, self.seq)
        node["saved_bytes"] = saved
        node["freed_by_input"] = freed
        node["output_bytes"] = output
        if workspace:
            node["workspace_bytes"] = workspace
        self.nodes.append(node)
        for source, moved in inputs:
            self.edges.append({"from": source, "to": node["name"], "bytes": moved})
        return node["name"]

    def output(self, name):
        for node in reversed(self.nodes):
            if node["name"] == name:
                return node["output_bytes"]
        raise KeyError(name)


def linear(w, name, source, fan_in, fan_out):
    weight = fan_in * fan_out + fan_out
    moved = poly(E * (fan_in + fan_out), fixed=E * weight)
    return w.add(name, "linear", [(source, w.output(source))], params=weight,
                 fwd=(poly(2 * fan_in * fan_out), moved), bi=(poly(2 * fan_in * fan_out), moved),
                 bw=(poly(2 * fan_in * fan_out + fan_out), poly(E * (fan_in + fan_out), fixed=2 * E * weight)),
                 saved=poly(E * fan_in), output=poly(E * fan_out))


def norm(w, name, source, h):
    return w.add(name, "layernorm", [(source, w.output(source))], params=2 * h,
                 fwd=(poly(5 * h), poly(2 * E * h + 2 * STAT)), bi=(poly(8 * h), poly(3 * E * h + 2 * STAT)),
                 bw=(poly(2 * h), poly(2 * E * h + 2 * STAT)), saved=poly(E * h + 2 * STAT), output=poly(E * h))


def dropout(w, name, source, token=0.0, token_seq=0.0):
    elements = poly(token, token_seq)
    moved = poly(3 * token, 3 * token_seq)  # input, output and the one-byte mask
    return w.add(name, "dropout", [(source, w.output(source))], fwd=(elements, moved), bi=(elements, moved),
                 saved=elements, freed=elements, output=poly(E * token, E * token_seq))


def add(w, name, sources, h):
    return w.add(name, "add", [(s, w.output(s)) for s in sources], fwd=(poly(h), poly(3 * E * h)),
                 output=poly(E * h))


def build(layers, h, heads, seq, vocab):
    w = Writer(seq)
    w.layer("embedding", "embedding")
    word = w.add("word", "embedding", [], params=vocab * h, fwd=(0, poly(E * h + 8)),
                 bw=(poly(h), poly(2 * E * h + 8)), saved=poly(8), output=poly(E * h))
    position = w.add("position", "embedding", [], params=seq * h, fwd=(0, poly(E * h + 8)),
                     bw=(poly(h), poly(2 * E * h + 8)), saved=poly(8), output=poly(E * h))
    x = dropout(w, "dropout", add(w, "sum", [word, position], h), token=h)
    for i in range(layers):
        w.layer(f"layer.{i}", "transformer")
        ln1 = norm(w, "ln1", x, h)
        qkv = linear(w, "qkv", ln1, h, 3 * h)
        scores = w.add("scores", "bmm", [(qkv, poly(2 * E * h))], fwd=(poly(token_seq=2 * h), poly(2 * E * h, E * heads)),
                       bi=(poly(token_seq=4 * h), poly(4 * E * h, E * heads)), saved=poly(2 * E * h),
                       freed=poly(2 * E * h), output=poly(token_seq=E * heads))
        softmax = w.add("softmax", "softmax", [(scores, w.output(scores))],
                        fwd=(poly(token_seq=5 * heads), poly(token_seq=2 * E * heads)),
                        bi=(poly(token_seq=3 * heads), poly(token_seq=2 * E * heads)),
                        saved=poly(token_seq=E * heads), freed=poly(token_seq=E * heads),
                        output=poly(token_seq=E * heads))
        probs = dropout(w, "attention_dropout", softmax, token_seq=heads)
        context = w.add("attention_v", "bmm", [(probs, w.output(probs)), (qkv, poly(E * h))],
                        fwd=(poly(token_seq=2 * h), poly(2 * E * h, E * heads)),
                        bi=(poly(token_seq=4 * h), poly(3 * E * h, 2 * E * heads)),
                        saved=poly(E * h, E * heads), freed=poly(E * h, E * heads), output=poly(E * h))
        projected = dropout(w, "attention_out_dropout", linear(w, "out_proj", context, h, h), token=h)
        residual = add(w, "residual1", [x, projected], h)
        fc1 = linear(w, "fc1", norm(w, "ln2", residual, h), h, 4 * h)
        act = w.add("act", "gelu", [(fc1, w.output(fc1))], fwd=(poly(32 * h), poly(4 * E * 2 * h)),
                    bi=(poly(32 * h), poly(4 * E * 2 * h)), saved=poly(4 * E * h), freed=poly(4 * E * h),
                    output=poly(4 * E * h))
        mlp = dropout(w, "mlp_dropout", linear(w, "fc2", act, 4 * h, h), token=h)
        x = add(w, "residual2", [residual, mlp], h)
    w.layer("head", "loss")
    final = norm(w, "final_norm", x, h)
    logits = w.add("lm_head", "linear", [(final, w.output(final))], params=vocab * h, tied_to="embedding.word",
                   fwd=(poly(2 * h * vocab), poly(E * (h + vocab), fixed=E * h * vocab)),
                   bi=(poly(2 * h * vocab), poly(E * (h + vocab), fixed=E * h * vocab)),
                   bw=(poly(2 * h * vocab), poly(E * (h + vocab), fixed=2 * E * h * vocab)), saved=poly(E * h),
                   output=poly(E * vocab))
    w.add("loss", "cross_entropy", [(logits, w.output(logits))], fwd=(poly(5 * vocab), poly(E * vocab + 4 * vocab)),
          bi=(poly(3 * vocab), poly(E * vocab + 8 * vocab)), saved=poly(8 * vocab), freed=poly(8 * vocab),
          output=poly(4), workspace=poly(8 * vocab))
    return {
        "format": "flexpipe-cost-graph", "version": 1,
        "name": f"chain-{len(w.nodes)}", "time_unit": "ms",
        "reference": {"microbatch_size": 1, "seq_len": seq},
        "hardware": {"name": "H100-80GB", "flop_rate": FLOP_RATE, "byte_rate": BYTE_RATE},
        "layers": w.layers, "nodes": w.nodes, "edges": w.edges,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operators", type=int, default=200000, help="operators, rounded up to whole layers")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    if args.operators < 22:
        sys.exit("chain_graph.py: --operators must be at least 22 (embedding, one layer, head)")
    layers = -(-(args.operators - 7) // 15)
    graph = build(layers, args.hidden, args.heads, args.seq, args.vocab)
    with open(args.output, "w") as f:
        json.dump(graph, f, separators=(",", ":"))
    print(f"wrote {args.output}: {len(graph['nodes'])} operators in {layers} layers, {len(graph['edges'])} edges")


if __name__ == "__main__":
    main()
