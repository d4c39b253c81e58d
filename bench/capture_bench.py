"""How long `capture` takes on torchvision's ResNet-50 and ViT-B/16, and how its measurements compare
with the whole model's: the sum of the operators' times against a timed forward + loss + backward, and
the captured saved bytes against the allocator's growth over one forward (glibc's mallinfo2).

    /opt/flexpipe/venv/bin/python bench/capture_bench.py [--batch 2] [--repeats 5] [--clock wall|cpu]

Figures and how they were taken: docs/performance.md ("Capture")."""
import argparse
import ctypes
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torchvision  # noqa: E402

from flexpipe import capture  # noqa: E402
from flexpipe.losses import apply_loss  # noqa: E402
from flexpipe.measure import Timing, time_whole_step  # noqa: E402


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def allocated_bytes():
    info = _libc.mallinfo2()
    return info.uordblks + info.hblkhd


def allocator_growth(model, inputs, loss):
    """Bytes the heap grows by over one forward and loss, the output dropped: what autograd keeps, plus
    its own bookkeeping, less the inputs (they existed before)."""
    gc.collect()
    before = allocated_bytes()
    torch.manual_seed(0)
    output = model(*inputs)
    result = apply_loss(loss, output)
    del output
    gc.collect()
    grown = allocated_bytes() - before
    del result
    return grown


def at_batch(polynomial, batch):
    if isinstance(polynomial, dict):
        return polynomial.get("fixed", 0) + batch * polynomial.get("per_sample", 0)
    return polynomial


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"])
    options = parser.parse_args()
    print(f"threads {torch.get_num_threads()}, batch {options.batch}, 224x224 images, repeats {options.repeats}, "
          f"clock {options.clock}")
    print("model      operators  capture s  sum of operators ms  whole step ms  ratio  saved MB  heap growth MB")
    for name, factory in (("resnet50", torchvision.models.resnet50), ("vit_b_16", torchvision.models.vit_b_16)):
        torch.manual_seed(0)
        model = factory()
        inputs = [torch.randn(options.batch, 3, 224, 224)]
        start = time.perf_counter()
        graph = capture(model, inputs, "cross_entropy", warmup=2, repeats=options.repeats, clock=options.clock)
        seconds = time.perf_counter() - start
        operators = sum(n[p]["time"] for n in graph["nodes"] for p in ("forward", "backward_input", "backward_weight"))
        whole = time_whole_step(model, inputs, "cross_entropy", Timing(2, options.repeats, options.clock))
        saved = sum(at_batch(n.get("saved_bytes", 0), options.batch)
                    - at_batch(n.get("shared_saved_bytes", 0), options.batch) for n in graph["nodes"])
        # The input is saved by the first operator but was allocated before the forward.
        grown = allocator_growth(model, inputs, "cross_entropy") + inputs[0].numel() * 4
        print(f"{name:10} {len(graph['nodes']):9}  {seconds:9.1f}  {operators:19.1f}  {whole:13.1f}  "
              f"{operators / whole:5.2f}  {saved / 1e6:8.1f}  {grown / 1e6:14.1f}")


if __name__ == "__main__":
    main()
