"""An export directory read back: the manifest's format and name, the modules it names loaded, and the
chunks run in order (load(), run_chunks()); and how a manifest is written (manifest_text())."""
import contextlib
import json
import os
import warnings

import torch

from .errors import CaptureError
from .loading import read_json

FORMAT = "flexpipe-export"
VERSION = 1
MANIFEST = "manifest.json"


@contextlib.contextmanager
def torchscript():
    """TorchScript warns that it is deprecated at every call in PyTorch 2.x; the export uses it on purpose
    (docs/export.md, "Why TorchScript")."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=DeprecationWarning)
        yield


def manifest_text(value, indent=""):
    """JSON with every object or array that holds no object on one line: a tensor, a parameter per line."""
    def flat(v):
        return not isinstance(v, (dict, list)) or (
            all(flat(x) for x in (v.values() if isinstance(v, dict) else v))
            and not any(isinstance(x, dict) for x in (v.values() if isinstance(v, dict) else v)))
    if not isinstance(value, (dict, list)) or flat(value) or (
            isinstance(value, dict) and all(flat(x) for x in value.values()) and len(json.dumps(value)) <= 120):
        return json.dumps(value)
    inner = indent + " "
    if isinstance(value, list):
        return "[\n" + ",\n".join(inner + manifest_text(x, inner) for x in value) + "\n" + indent + "]"
    return "{\n" + ",\n".join(f"{inner}{json.dumps(k)}: {manifest_text(v, inner)}" for k, v in value.items()) + \
        "\n" + indent + "}"


def load(out_dir):
    """(manifest, {file: ScriptModule}) of an export directory."""
    manifest, origin = read_json(os.path.join(out_dir, MANIFEST), "manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CaptureError(f"{origin}: not an export manifest (\"format\": \"{FORMAT}\")")
    return manifest, load_modules(manifest, out_dir, origin)


def load_modules(manifest, out_dir, origin=MANIFEST):
    """{file: ScriptModule} of every module a manifest names."""
    files = [chunk["file"] for chunk in manifest["chunks"]] + [manifest["loss"]["file"]]
    files += [piece["file"] for chunk in manifest["chunks"] for piece in chunk.get("pieces", [])]
    modules = {}
    for file in files:
        path = os.path.join(out_dir, file)
        if not os.path.isfile(path):
            raise CaptureError(f"{path}: no such file (named by {origin})")
        with torchscript():
            modules[file] = torch.jit.load(path)
    return modules


def run_chunks(manifest, modules, inputs):
    """The model's outputs computed by the chunks in order, each fed its inputs by name, contiguous: as a
    runtime's transport delivers what another rank sent, whatever its strides were there."""
    values = {entry["name"]: x for entry, x in zip(manifest["inputs"], inputs)}
    for chunk in manifest["chunks"]:
        outputs = modules[chunk["file"]](*[values[entry["name"]].contiguous() for entry in chunk["inputs"]])
        values = {entry["name"]: y for entry, y in zip(chunk["outputs"], outputs)}
    return [values[entry["name"]] for entry in manifest["outputs"]]
