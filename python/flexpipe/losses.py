"""The losses a capture can end with, defined once: each loss's module (what the capture applies and an
export scripts as loss.pt), the target it takes and its reduction.

`cross_entropy`: the model's output holds class scores in its last dimension (any leading dimensions
are samples or tokens); targets are class indices. `mse`: the output regresses a target of its own
shape. `none`: the model returns its loss; a non-scalar output is summed (a gradient of ones).
A callable (Python API only) maps the output to a scalar."""
from typing import List, Optional

import torch
import torch.nn.functional as F


class CrossEntropyLoss(torch.nn.Module):
    """Class scores in the output's last dimension, leading dimensions are samples; mean reduction."""

    def forward(self, outputs: List[torch.Tensor], target: Optional[torch.Tensor] = None) -> torch.Tensor:
        assert target is not None, "cross_entropy needs the target class indices"
        output = outputs[0]
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


class MseLoss(torch.nn.Module):
    """Mean squared error against a target of the output's shape."""

    def forward(self, outputs: List[torch.Tensor], target: Optional[torch.Tensor] = None) -> torch.Tensor:
        assert target is not None, "mse needs a target of the output's shape"
        return F.mse_loss(outputs[0], target)


class OutputIsLoss(torch.nn.Module):
    """The model returns its loss: a scalar as it is, anything else summed."""

    def forward(self, outputs: List[torch.Tensor], target: Optional[torch.Tensor] = None) -> torch.Tensor:
        if len(outputs) == 1 and outputs[0].dim() == 0:
            return outputs[0]
        total = outputs[0].sum()
        for i in range(1, len(outputs)):
            total = total + outputs[i].sum()
        return total


def _class_indices(output):
    return list(output.shape[:-1]), torch.int64


def _same_as_output(output):
    return list(output.shape), output.dtype


# Per loss: its module; the (shape, dtype) of its target given the output (None: it takes none); and how
# it reduces over samples, as an export's manifest states them.
_RULES = {
    "cross_entropy": (CrossEntropyLoss, _class_indices, "mean"),
    "mse": (MseLoss, _same_as_output, "mean"),
    "none": (OutputIsLoss, None, "sum"),
}
LOSSES = tuple(_RULES)  # the names, as --loss takes them


def loss_module(loss):
    """A new module computing `loss` (a name of LOSSES) from (outputs, target)."""
    return _RULES[loss][0]()


def target_of(loss, output):
    """(shape, dtype) of the target `loss` takes for `output`, or None when it takes none."""
    rule = _RULES[loss][1]
    return rule(output) if rule is not None else None


def reduction(loss):
    return _RULES[loss][2]


def _synthetic_targets(output, loss="cross_entropy"):
    # Fixed targets, so that repeated measurements and checks see the same loss: class indices drawn
    # from a fixed seed, zeros for a regression.
    if loss == "mse":
        return torch.zeros_like(output)
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, output.shape[-1], output.shape[:-1], generator=generator)


def apply_loss(loss, output):
    if callable(loss):
        return loss(output)
    if loss == "none":
        if isinstance(output, torch.Tensor):
            return loss_module(loss)([output])
        return loss_module(loss)(list(output.values() if isinstance(output, dict) else output))
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"--loss {loss} needs the model to return one tensor, it returns {type(output).__name__}; "
                        "use --loss none when the model returns its loss")
    if loss not in LOSSES:
        raise ValueError(f"unknown loss '{loss}'; known: {', '.join(LOSSES)}")
    if loss == "cross_entropy" and output.dim() < 2:
        raise TypeError(f"--loss cross_entropy needs class scores in the output's last dimension, the output "
                        f"has shape {list(output.shape)}")
    return loss_module(loss)([output], _synthetic_targets(output, loss))
