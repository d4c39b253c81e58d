"""How long `capture` takes on Hugging Face models through torch.export, and how many operators it finds:
GPT-2 small (124M parameters) and Llama at the geometry of Llama 3.2 1B (width 2048, 32 query and 8
key-value heads, MLP 8192, vocabulary 128256) at the given depths, each on a micro-batch of 1 x SEQ token
ids, with the peak resident memory of the process after each.

    /opt/flexpipe/venv/bin/python bench/capture_hugging_face.py [--seq 128] [--llama-layers 2 4 8 16]
        [--repeats 1] [--warmup 0]

Figures and how they were taken: docs/performance.md ("Capture: Hugging Face models")."""
import argparse
import os
import resource
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(root, "python"))
sys.path.insert(0, os.path.join(root, "examples", "hugging_face"))

import torch  # noqa: E402

import gpt2  # noqa: E402
import llama  # noqa: E402
from flexpipe import capture  # noqa: E402


def measure(label, build, seq, repeats, warmup):
    torch.manual_seed(0)
    started = time.perf_counter()
    model = build()
    built = time.perf_counter() - started
    ids = torch.randint(0, 2, (1, seq))
    started = time.perf_counter()
    graph = capture(model, {"input_ids": ids}, "cross_entropy", repeats=repeats, warmup=warmup)
    seconds = time.perf_counter() - started
    kinds = {}
    for node in graph["nodes"]:
        kinds[node["kind"]] = kinds.get(node["kind"], 0) + 1
    parameters = sum(n.get("parameters", 0) for n in graph["nodes"])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"| {label} | 1x{seq} | {parameters:,} | {len(graph['nodes'])} | {kinds.get('scaled_dot_product_attention', 0)} | "
          f"{built:.1f} | {seconds:.1f} | {peak:.1f} |", flush=True)
    del model, graph


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--llama-layers", type=int, nargs="*", default=[2, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=0)
    options = parser.parse_args()
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores")
    print("| model | tokens | parameters | operators | attention operators | build (s) | capture (s) | peak RSS (GiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    measure("GPT-2 small", gpt2.small, options.seq, options.repeats, options.warmup)
    for layers in options.llama_layers:
        measure(f"Llama 1B geometry, {layers} layers", lambda: llama.one_billion(layers), options.seq, options.repeats,
                options.warmup)


if __name__ == "__main__":
    main()
