"""Independent measurements of a real PyTorch model, for checking captured graphs against reality."""
import torch

from flexpipe.losses import apply_loss


def saved_activation_bytes(model, inputs, loss):
    """Bytes of every storage the autograd graph of one forward (and loss) keeps for the backward, found
    by walking the graph's saved variables (not by the capture's hooks), parameters and buffers excluded."""
    model.train()
    torch.manual_seed(0)
    result = apply_loss(loss, model(*inputs))
    weights = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    storages, seen, pending = {}, set(), [result.grad_fn]
    while pending:
        function = pending.pop()
        if function is None or function in seen:
            continue
        seen.add(function)
        for attribute in dir(function):
            if not attribute.startswith("_saved_"):
                continue
            try:
                value = getattr(function, attribute)
            except RuntimeError:  # freed, or not a tensor
                continue
            for tensor in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in weights:
                    storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        pending.extend(next_function for next_function, _ in function.next_functions)
    return sum(storages.values())


def at_batch(polynomial, batch):
    """A cost-graph polynomial (a number or {fixed, per_sample}) at micro-batch `batch`."""
    if isinstance(polynomial, dict):
        return polynomial.get("fixed", 0) + batch * polynomial.get("per_sample", 0)
    return polynomial


def captured_saved_bytes(graph, batch):
    """What the graph says one micro-batch keeps: every node's saved bytes, shared ones once."""
    return sum(at_batch(n.get("saved_bytes", 0), batch) - at_batch(n.get("shared_saved_bytes", 0), batch)
               for n in graph["nodes"])
