"""Values a traced node returns: tensors, and tuples, lists and dicts of them."""
import torch


def leaves(value, path=()):
    """[(path, leaf)] of a value: tuples, lists and dicts are walked, anything else is a leaf."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        return [leaf for i, item in enumerate(value) for leaf in leaves(item, path + (i,))]
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, path + (key,))]
    return [(path, value)]


def at(value, path):
    for step in path:
        value = value[step]
    return value
