"""FLOPs of an operator captured through torch.export, counted rather than derived: its ATen graph run
forward, then for its input gradient and its weight gradient, under torch.utils.flop_counter's
FlopCounterMode (matrix products, convolutions and attention; elementwise ATen ops count none). Bytes
moved follow formulas.costs: what each pass reads and writes."""
import torch
from torch.utils.flop_counter import FlopCounterMode

from .formulas import Costs, tensor_bytes
from .values import leaves as value_leaves


def _counted(function):
    counter = FlopCounterMode(display=False)
    with counter:
        function()
    return counter.get_total_flops()


def counted_costs(module, args, parameter_bytes):
    """Costs (formulas.Costs) of `module` (an operator's GraphModule) on `args`, its recorded inputs."""
    leaves = []

    def prepare(value):
        if isinstance(value, torch.Tensor):
            value = value.detach()
            if value.is_floating_point():
                value = value.clone().requires_grad_(True)
                leaves.append(value)
        return value

    arguments = [prepare(a) for a in args]
    parameters = [p for p in module.parameters() if p.requires_grad]
    with torch.random.fork_rng(devices=[]):
        forward = _counted(lambda: module(*arguments))
        output = module(*arguments)
    in_bytes = sum(tensor_bytes(a) for a in args if isinstance(a, torch.Tensor))
    out_bytes = tensor_bytes(output)
    differentiable = [t for _, t in value_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
    input_flops = weight_flops = 0
    if differentiable:
        seeds = [torch.ones_like(t) for t in differentiable]

        def gradient(wrt):
            return lambda: torch.autograd.grad(differentiable, wrt, seeds, retain_graph=True, allow_unused=True)

        input_flops = _counted(gradient(leaves)) if leaves else 0
        weight_flops = _counted(gradient(parameters)) if parameters else 0
    gradient_bytes = in_bytes + out_bytes + parameter_bytes if leaves and differentiable else 0
    weight_bytes = 2 * parameter_bytes + in_bytes + out_bytes if parameters and differentiable else 0
    return Costs(forward, input_flops, weight_flops, in_bytes + parameter_bytes + out_bytes, gradient_bytes,
                 weight_bytes)
