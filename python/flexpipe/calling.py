"""How the model is called on its inputs and what of its output the loss reads: inputs by position, or by
name as keyword arguments (transformers' `input_ids=`, `attention_mask=`); an output that is a
ModelOutput (or a dict) gives its `logits`."""
import inspect
from collections import OrderedDict

from .errors import CaptureError


def keyword_inputs(model, example_inputs, names):
    """(names, kwargs): forward's argument per input, by its given name (--input NAME=SHAPE) or by its
    position in forward's signature, and the keyword arguments of the call; `use_cache=False` where
    forward takes it (a training step keeps no cache of keys and values)."""
    parameters = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    known = [p.name for p in parameters]
    resolved = []
    for position, name in enumerate(names):
        if name is None:
            if position >= len(known):
                raise CaptureError(f"{len(example_inputs)} inputs for {type(model).__name__}.forward, which takes "
                                   f"{len(known)}: {', '.join(known)}")
            name = known[position]
        elif name not in known:
            raise CaptureError(f"--input {name}=...: {type(model).__name__}.forward has no argument '{name}'; it "
                               f"takes {', '.join(known)}")
        if name in resolved:
            raise CaptureError(f"--input {name}=... is given twice")
        resolved.append(name)
    kwargs = dict(zip(resolved, example_inputs))
    if "use_cache" in known and "use_cache" not in kwargs:
        kwargs["use_cache"] = False
    return resolved, kwargs


def split_named(example_inputs):
    """(tensors, names): a dict of named inputs, or a list by position (names None)."""
    if isinstance(example_inputs, dict):
        return list(example_inputs.values()), list(example_inputs)
    inputs = list(example_inputs)
    return inputs, [None] * len(inputs)


def loss_input(output):
    """What the loss reads of the model's output: a ModelOutput's (or a dict's) `logits`, else its first
    entry; any other output as it is."""
    if isinstance(output, (dict, OrderedDict)):
        if "logits" in output:
            return output["logits"]
        if output:
            return next(iter(output.values()))
    return output


def call_model(model, inputs, names):
    """The model on its inputs (by name where any is named), as the loss reads its output."""
    if any(name is not None for name in names):
        _, kwargs = keyword_inputs(model, inputs, names)
        return loss_input(model(**kwargs))
    return loss_input(model(*inputs))
