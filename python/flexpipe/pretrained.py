"""Trained weights back into a transformers model's folder: the model rebuilt from the capture record,
the weights `flexpipe train --export-weights` wrote loaded by their state_dict names, and
save_pretrained: config.json and model.safetensors, which AutoModel*.from_pretrained loads."""
import os

import torch

from .errors import CaptureError
from .export import _check_graph
from .loading import build_model, read_json


def _read_weights(path):
    """The dict train wrote (torch::pickle_save, tagged with its type: PyTorch 2.6's torch.load reads it
    only when told the tag's restorer is allowed)."""
    import torch.jit._pickle
    try:
        with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
            weights = torch.load(path)
    except FileNotFoundError:
        raise CaptureError(f"{path}: no such file") from None
    except Exception as error:  # noqa: BLE001 - torch.load raises many kinds for a file it cannot read
        raise CaptureError(f"{path}: not weights flexpipe train wrote: {type(error).__name__}") from None
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CaptureError(f"{path}: not a dict of tensors by state_dict name")
    return weights


def save_pretrained(graph, weights_path, out_dir):
    """Writes the transformers folder of the captured model of `graph` (a path or the dict) with the
    weights in `weights_path`; returns the number of tensors written. Bad input raises CaptureError."""
    graph, origin = read_json(graph, "graph")
    _check_graph(graph, origin)
    record = graph["capture"]
    torch.manual_seed(0)
    model = build_model(record["file"], record["factory"])
    if not hasattr(model, "save_pretrained") or not hasattr(model, "config"):
        raise CaptureError(f"--export-weights {out_dir}: a folder is for a transformers model, and "
                           f"{record['factory']}() returns a {type(model).__name__}; name a FILE.pt instead")
    weights = _read_weights(weights_path)
    floating = next((w.dtype for w in weights.values() if w.is_floating_point()), None)
    if floating is not None:
        model = model.to(floating)
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as error:
        first = str(error).strip().splitlines()
        raise CaptureError(f"{weights_path}: does not fit {type(model).__name__}: "
                           f"{' '.join(line.strip() for line in first[:2])}") from None
    os.makedirs(out_dir, exist_ok=True)
    from transformers.utils import logging as transformers_logging
    transformers_logging.disable_progress_bar()  # one line says what was written
    model.save_pretrained(out_dir)
    return len(weights)
