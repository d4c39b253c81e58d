"""The losses a capture can end with, applied the same way by the capture and its checks.

`cross_entropy`: the model's output holds class scores in its last dimension (any leading dimensions
are samples or tokens); targets are class indices. `mse`: the output regresses a target of its own
shape. `none`: the model returns its loss; a non-scalar output is summed (a gradient of ones).
A callable (Python API only) maps the output to a scalar."""
import torch
import torch.nn.functional as F

LOSSES = ("cross_entropy", "mse", "none")


def _synthetic_targets(logits):
    # Fixed targets, so that repeated measurements and checks see the same loss.
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, logits.shape[-1], logits.shape[:-1], generator=generator)


def apply_loss(loss, output):
    if callable(loss):
        return loss(output)
    if loss == "none":
        if isinstance(output, torch.Tensor):
            return output if output.dim() == 0 else output.sum()
        return sum(t.sum() for t in (output.values() if isinstance(output, dict) else output))
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"--loss {loss} needs the model to return one tensor, it returns {type(output).__name__}; "
                        "use --loss none when the model returns its loss")
    if loss == "cross_entropy":
        if output.dim() < 2:
            raise TypeError(f"--loss cross_entropy needs class scores in the output's last dimension, the output "
                            f"has shape {list(output.shape)}")
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), _synthetic_targets(output).reshape(-1))
    if loss == "mse":
        return F.mse_loss(output, torch.zeros_like(output))
    raise ValueError(f"unknown loss '{loss}'; known: {', '.join(LOSSES)}")
