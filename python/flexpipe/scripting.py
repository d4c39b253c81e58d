"""A cut of the model traced into TorchScript (shapes static, identity dropouts removed), and what the
traced code does that a runtime must know: whether it draws random numbers, whether it updates buffers."""
import contextlib
import warnings

import torch

from .errors import CaptureError


_RANDOM_KINDS = {"aten::dropout", "aten::dropout_", "aten::feature_dropout", "aten::feature_dropout_",
                 "aten::alpha_dropout", "aten::alpha_dropout_", "aten::feature_alpha_dropout", "aten::bernoulli",
                 "aten::bernoulli_", "aten::rand", "aten::rand_like", "aten::randn", "aten::randn_like",
                 "aten::randint", "aten::randint_like", "aten::randperm", "aten::native_dropout", "aten::normal",
                 "aten::multinomial", "aten::rrelu", "aten::rrelu_with_noise", "aten::uniform_", "aten::normal_",
                 "aten::exponential_", "aten::geometric_", "aten::cauchy_", "aten::log_normal_", "aten::random_",
                 "aten::poisson"}
# Attention with dropout inside: nn.MultiheadAttention's, in PyTorch 2.x (dropout_p, its fifth argument).
_ATTENTION_KINDS = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math",
                    "aten::_scaled_dot_product_flash_attention_for_cpu"}


def script_draws_random_numbers(script_module):
    """Whether the traced code draws from the random number generator (dropout with p > 0 in training,
    ...): a recompute of it must replay the generator's state."""
    def random(node):
        kind = node.kind()
        if kind in _ATTENTION_KINDS:
            inputs = list(node.inputs())
            dropout = inputs[4].toIValue() if len(inputs) > 4 else 0.0
            return dropout is None or dropout != 0  # not a constant: it may draw
        if kind not in _RANDOM_KINDS:
            return False
        if "dropout" in kind and kind != "aten::native_dropout":
            arguments = [value.toIValue() for value in list(node.inputs())[1:3]]
            if arguments and (arguments[0] == 0 or (len(arguments) > 1 and arguments[1] is False)):
                return False
        return True

    def walk(block):
        return any(random(node) or any(walk(inner) for inner in node.blocks()) for node in block.nodes())
    return walk(script_module.inlined_graph)


def updates_buffers(module):
    """Whether running the module changes its buffers (BatchNorm's running statistics in training)."""
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training and m.track_running_stats
               for m in module.modules())


@contextlib.contextmanager
def _static_shapes():
    """While torch.jit.trace runs: a tensor's sizes are plain numbers, as in eager PyTorch. The tracer
    otherwise hands them out as 0-dimensional tensors and records the arithmetic on them, so that
    `(C // heads) ** -0.5` in a function the capture keeps as one operator (torchvision's Swin attention)
    becomes a power of an int64 tensor, computed in float32 (the default type) where Python computes it
    in double: a float64 chunk then differed from the model by 1e-9 relative. The chunks are specialized
    to the captured shapes anyway (docs/export.md)."""
    def untraced(function):
        def call(*args, **kwargs):
            state = torch._C._get_tracing_state()
            torch._C._set_tracing_state(None)
            try:
                return function(*args, **kwargs)
            finally:
                torch._C._set_tracing_state(state)
        return call

    own = {name: torch.Tensor.__dict__[name] for name in ("size", "shape") if name in torch.Tensor.__dict__}
    size, shape = torch.Tensor.size, torch.Tensor.shape
    torch.Tensor.size = untraced(size)
    torch.Tensor.shape = property(untraced(shape.__get__))
    try:
        yield
    finally:
        for name in ("size", "shape"):
            if name in own:
                setattr(torch.Tensor, name, own[name])
            else:
                delattr(torch.Tensor, name)


_DROPOUT_KINDS = ("aten::dropout", "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout",
                  "aten::dropout_", "aten::feature_dropout_", "aten::alpha_dropout_", "aten::feature_alpha_dropout_")


def _remove_identity_dropout(script_module):
    """Dropout with p = 0 (or not training) is the identity in eager PyTorch, which draws no random
    numbers for it; TorchScript's autodiff, which the profiling executor switches to after the first
    calls, rewrites every aten::dropout as empty_like(x).bernoulli_(1 - p), drawing a number per element
    even for p = 0. A model with such a dropout and a random operator after it (Swin's stochastic depth
    after its attention's dropout of 0) then drew other masks than the single process from the second
    call on. Such dropouts (in place or not) are removed from every method's graph."""
    for module in script_module.modules():
        if not module._c._has_method("forward"):  # a submodule that no traced code calls
            continue
        graph = module.graph
        for node in [n for kind in _DROPOUT_KINDS for n in graph.findAllNodes(kind)]:
            inputs = list(node.inputs())
            p, train = (value.toIValue() if value.node().kind() == "prim::Constant" else None
                        for value in inputs[1:3])
            if p == 0 or train is False:
                node.output().replaceAllUsesWith(inputs[0])
                node.destroy()


def trace_script(module, example, what):
    """`module` traced into TorchScript on `example`; `what` names it in a CaptureError."""
    try:
        with warnings.catch_warnings(), _static_shapes():
            # Shape checks and shape arithmetic become constants: the graph is specialized to these shapes.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript's, in 2.x: docs/export.md
            traced = torch.jit.trace(module, tuple(example), check_trace=False)
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CaptureError(f"{what}: torch.jit.trace failed: {type(error).__name__}: {first}") from None
    _remove_identity_dropout(traced)
    return traced
