"""Captures every torchvision classification model (torchvision.models.list_models(module=torchvision.models))
at a small input and prints a markdown table: operators, capture time, the parameter count against
PyTorch's, and the graph cut into 4 stages by `flexpipe partition`.

    OMP_NUM_THREADS=1 python bench/capture_torchvision.py [--models resnet18,vit_b_16] [--binary build/flexpipe]
        [--batch 2] [--warmup 2] [--repeats 5] [--clock wall|cpu] [--out DIR] [--json FILE]

Each model is built after torch.manual_seed(0) with torchvision's defaults (no weights) and captured in a
process of its own (a model that breaks the interpreter breaks one row), on 2 x 3 x 32 x 32 images where
the model takes them, else on the smallest square images it takes: found by running its forward on the
meta device at every size from 32 up (no data, so a size costs milliseconds), then checked on real data.
The loss is cross_entropy where the model returns one tensor; GoogLeNet and Inception v3 return their
auxiliary classifiers' logits too in training mode (a named tuple), so theirs is `none` (the sum of the
outputs). The capture time is `capture()` alone, with the command's defaults (2 warm-up runs, the median
of 5), building the model and finding the size not included. The partition is `flexpipe partition --model
G.json -p 4 -m 8 --microbatch-size B --memory-limit 1TB` (a limit every model fits in): the per-stage
operator counts and the bottleneck stage's time per micro-batch. A model that cannot be captured gets
the one `error:` line the command prints. Docs: docs/capture.md ("Every torchvision classification
model")."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

LARGEST_SIZE = 600  # the largest image side the size search tries
NAMED_TUPLE_OUTPUTS = {"googlenet", "inception_v3"}


def _build(name, meta=False):
    import torch
    import torchvision
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GoogLeNet and Inception v3 warn about their initialization
        if meta:
            with torch.device("meta"):
                return torchvision.models.get_model(name)
        return torchvision.models.get_model(name)


def _runs(model, size, batch, device):
    import torch
    try:
        with torch.no_grad():
            model(torch.randn(batch, 3, size, size, device=device))
        return True
    except Exception:  # noqa: BLE001 - any failure means: not this size
        return False


def smallest_size(name, model, batch):
    """32 where the model takes 2 x 3 x 32 x 32 (in training mode, as captured), else the smallest square
    side it takes: every size from 33 tried on the meta device, the first that runs checked on real data."""
    model.train()
    if _runs(model, 32, batch, "cpu"):
        return 32
    meta = _build(name, meta=True).train()
    for size in range(33, LARGEST_SIZE + 1):
        if _runs(meta, size, batch, "meta") and _runs(model, size, batch, "cpu"):
            return size
    return None


def capture_one(options):
    """In the child process: one model captured; its graph written; one JSON line on stdout."""
    import torch
    from flexpipe import CaptureError, capture
    name = options.one
    row = {"model": name}
    model = _build(name)
    row["model_parameters"] = sum(p.numel() for p in model.parameters())
    size = options.size or smallest_size(name, model, options.batch)
    if size is None:
        row["error"] = f"no square image from 32 to {LARGEST_SIZE} pixels runs through {name}"
        print(json.dumps(row), flush=True)
        return 0
    row["size"] = size
    loss = "none" if name in NAMED_TUPLE_OUTPUTS else "cross_entropy"
    row["loss"] = loss
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(options.batch, 3, size, size, generator=generator)]
    start = time.perf_counter()
    try:
        graph = capture(model, inputs, loss, name=name, warmup=options.warmup, repeats=options.repeats,
                        clock=options.clock)
    except CaptureError as error:
        row["error"] = str(error)
        print(json.dumps(row), flush=True)
        return 0
    row["seconds"] = time.perf_counter() - start
    row["operators"] = len(graph["nodes"])
    row["parameters"] = sum(n.get("parameters", 0) for n in graph["nodes"])
    row["kept_whole"] = len(graph["capture"].get("kept_whole", []))
    row["unknown_flops"] = sum(1 for n in graph["nodes"] if "note" in n)
    with open(options.graph, "w") as f:
        json.dump(graph, f)
    print(json.dumps(row), flush=True)
    return 0


def partition(binary, path, batch):
    """(the plan, None) or (None, the error line). A binary that predates the nodes' `buffers` (it refuses
    unknown keys) partitions a copy without them, and the plan says so (`buffers_left_out`)."""
    command = [binary, "partition", "--model", path, "-p", "4", "-m", "8", "--microbatch-size", str(batch),
               "--memory-limit", "1TB", "--json", "-q"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    left_out = False
    if done.returncode != 0 and ".buffers: unknown key" in done.stderr:
        with open(path) as f:
            graph = json.load(f)
        for node in graph["nodes"]:
            node.pop("buffers", None)
        without = path.replace(".graph.json", ".without-buffers.graph.json")
        with open(without, "w") as f:
            json.dump(graph, f)
        command[3] = without
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        left_out = True
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")] or done.stderr.splitlines()
        return None, (lines[0] if lines else f"exit code {done.returncode}")
    plan = json.loads(done.stdout)
    plan["buffers_left_out"] = left_out
    return plan, None


def _cell(text):
    return str(text).replace("|", "\\|")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: every classification model)")
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "build", "flexpipe"),
                        help="the flexpipe binary that partitions each graph (default: build/flexpipe)")
    parser.add_argument("--batch", type=int, default=2, help="the micro-batch (default 2)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"])
    parser.add_argument("--out", help="keep the graphs in this directory (default: a temporary one)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        return capture_one(options)

    import torch
    import torchvision
    names = options.models.split(",") if options.models else torchvision.models.list_models(module=torchvision.models)
    directory = options.out or tempfile.mkdtemp(prefix="capture-torchvision-")
    os.makedirs(directory, exist_ok=True)
    binary = options.binary if os.path.exists(options.binary) else None
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, {torch.get_num_threads()} thread(s), "
          f"micro-batch {options.batch}, warmup {options.warmup}, repeats {options.repeats}, clock {options.clock}"
          + ("" if binary else "; no flexpipe binary: no partitions"), file=sys.stderr)
    print("| model | input | operators | capture (s) | parameters | equal to PyTorch | 4 stages: operators per stage |"
          " bottleneck (ms per micro-batch) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for name in names:
        path = os.path.join(directory, f"{name}.graph.json")
        command = [sys.executable, os.path.abspath(__file__), "--one", name, "--graph", path, "--batch",
                   str(options.batch), "--warmup", str(options.warmup), "--repeats", str(options.repeats),
                   "--clock", options.clock]
        done = subprocess.run(command, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            last = [line for line in done.stderr.splitlines() if line.strip()]
            row = {"model": name, "error": f"the capture process failed (exit code {done.returncode}): "
                                           f"{last[-1] if last else 'no output'}"}
        else:
            row = json.loads(lines[-1])
        if "error" not in row and binary:
            plan, error = partition(binary, path, options.batch)
            if plan is not None:
                row["stages"] = [stage["operators"] for stage in plan["stages"]]
                row["bottleneck_ms"] = plan["bottleneck"]
                row["fits"] = plan["fits"]
                row["buffers_left_out"] = plan["buffers_left_out"]
            else:
                row["partition_error"] = error
        rows.append(row)
        size = row.get("size")
        shape = f"{options.batch}x3x{size}x{size}" if size else ""
        if "error" in row:
            print(f"| {name} | {shape} | | | {row.get('model_parameters', '')} | | error: {_cell(row['error'])} | |",
                  flush=True)
            continue
        equal = "yes" if row["parameters"] == row["model_parameters"] else "no"
        stages = " / ".join(map(str, row["stages"])) if "stages" in row else _cell(row.get("partition_error", ""))
        bottleneck = f"{row['bottleneck_ms']:.2f}" if "bottleneck_ms" in row else ""
        loss = "" if row["loss"] == "cross_entropy" else f" (loss {row['loss']})"
        print(f"| {name} | {shape}{loss} | {row['operators']} | {row['seconds']:.1f} | {row['parameters']:,} | "
              f"{equal} | {stages} | {bottleneck} |", flush=True)
    if options.json:
        with open(options.json, "w") as f:
            json.dump(rows, f, indent=1)
    if any(row.get("buffers_left_out") for row in rows):
        print("note: this flexpipe binary does not read the nodes' buffers yet; their graphs were partitioned "
              "without them", file=sys.stderr)
    failed = [row["model"] for row in rows if "error" in row or "partition_error" in row
              or row.get("parameters") != row.get("model_parameters") or (binary and not row.get("fits"))]
    print(f"{len(rows) - len(failed)} of {len(rows)} captured with equal parameter counts"
          + (" and partitioned" if binary else "") + (f"; not: {', '.join(failed)}" if failed else ""),
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
