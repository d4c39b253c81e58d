"""What the command line names: a model factory in a Python file, input shapes, and the JSON documents
(cost graphs, partition plans, manifests) the package reads."""
import importlib.util
import json
import os
import sys

import torch

from .errors import CaptureError, where

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


def split_model_spec(spec):
    """FILE.py:FACTORY -> (FILE.py, FACTORY)."""
    path, colon, factory = spec.rpartition(":")
    if not colon or not path or not factory:
        raise CaptureError(f"'{spec}': name the model as FILE.py:FACTORY (a function in FILE.py that returns the "
                           "nn.Module)")
    return path, factory


def load_factory(path, factory):
    """The function `factory` defined in the Python file `path`."""
    if not os.path.isfile(path):
        raise CaptureError(f"{path}: no such file")
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)  # so that the file can import its neighbours
    module_name = "flexpipe_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CaptureError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise CaptureError(f"{path}:{error.lineno}:{error.offset or 1}: {error.msg}") from None
    except Exception as error:
        line = where(error.__traceback__)
        raise CaptureError(f"{path}: running the file raised {type(error).__name__}: {error}"
                           + (f" at {line}" if line else "")) from None
    found = getattr(module, factory, None)
    if found is None:
        defined = sorted(name for name, value in vars(module).items()
                         if callable(value) and not name.startswith("_") and getattr(value, "__module__", "") ==
                         module_name)
        raise CaptureError(f"{path} does not define '{factory}'"
                           + (f"; it defines: {', '.join(defined)}" if defined else ""))
    if not callable(found):
        raise CaptureError(f"{path}: '{factory}' is a {type(found).__name__}, not a function")
    return found


def build_model(path, factory):
    function = load_factory(path, factory)
    try:
        model = function()
    except Exception as error:
        line = where(error.__traceback__)
        raise CaptureError(f"{path}: {factory}() raised {type(error).__name__}: {error}"
                           + (f" at {line}" if line else "")) from None
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"{path}: {factory}() returned {type(model).__name__}, not a torch.nn.Module")
    return model


def parse_input(text):
    """'8x3x224x224', '8x128:int64' or 'input_ids=8x128:int64' -> (name or None, shape, dtype)."""
    name, equals, rest = text.partition("=")
    if not equals:
        name, rest = None, text
    elif not name.isidentifier():
        raise CaptureError(f"--input {text}: '{name}' is not an argument name (NAME=SHAPE[:dtype])")
    shape_text, _, dtype_name = rest.partition(":")
    dtype_name = dtype_name or "float32"
    if dtype_name not in DTYPES:
        raise CaptureError(f"--input {text}: unknown data type '{dtype_name}'; known: {', '.join(DTYPES)}")
    try:
        shape = [int(part) for part in shape_text.split("x")]
    except ValueError:
        raise CaptureError(f"--input {text}: expected dimensions separated by 'x', like 8x3x224x224") from None
    if not shape or any(d <= 0 for d in shape):
        raise CaptureError(f"--input {text}: every dimension must be a positive whole number")
    if any(d > 1 << 31 for d in shape) or _product(shape) > 1 << 33:
        raise CaptureError(f"--input {text}: {_product(shape)} elements is more than a capture can hold")
    return name, shape, dtype_name


def _product(shape):
    result = 1
    for d in shape:
        result *= d
    return result


def example_input(shape, dtype_name, seed):
    """Random data of that shape: normal floats; integers 0 and 1 (valid indices for any embedding)."""
    generator = torch.Generator().manual_seed(seed)
    dtype = DTYPES[dtype_name]
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator, dtype=torch.float64 if dtype == torch.float64 else torch.float32
                           ).to(dtype)
    return torch.randint(0, 2, shape, generator=generator).to(dtype)


def read_json(source, what):
    """(document, origin): a dict as it is, or a JSON file; origin names it in errors."""
    if isinstance(source, dict):
        return source, f"the {what}"
    path = os.fspath(source)
    try:
        with open(path) as f:
            return json.load(f), path
    except FileNotFoundError:
        raise CaptureError(f"{path}: no such file") from None
    except OSError as error:
        raise CaptureError(f"{path}: cannot read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise CaptureError(f"{path}:{error.lineno}:{error.colno}: {error.msg}") from None
