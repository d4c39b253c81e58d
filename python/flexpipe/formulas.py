"""FLOPs and bytes moved per pass, from shapes, for the operators whose formulas are standard.

A multiply-add counts two FLOPs. Bytes are the tensors a pass reads and writes once (inputs,
parameters, outputs, and their gradients for the backward). `costs(...)` returns None for an operator
whose FLOPs are not known: the capture keeps it, with its measured time and a note.
"""
import math
import operator

import torch

# Elementwise operators and FLOPs per output element.
_ELEMENTWISE = {
    "add": 1, "sub": 1, "mul": 1, "truediv": 1, "div": 1, "neg": 1, "relu": 1, "relu6": 1, "hardtanh": 1,
    "leaky_relu": 2, "threshold": 1, "sigmoid": 4, "tanh": 4, "silu": 5, "gelu": 8, "hardswish": 4,
    "hardsigmoid": 3, "mish": 8, "elu": 4, "softplus": 4, "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "pow": 1,
    "dropout": 2, "softmax": 5, "log_softmax": 5, "masked_fill": 1, "where": 1, "clamp": 1, "abs": 1,
    "iadd": 1, "imul": 1, "mean": 1, "sum": 1, "erf": 8, "cos": 1, "sin": 1, "square": 1,
    "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1, "logical_and": 1, "logical_or": 1, "logical_not": 1,
    "all": 1, "any": 1, "triu": 1, "tril": 1, "stochastic_depth": 2, "minimum": 1, "maximum": 1, "floordiv": 1,
    "mod": 1, "remainder": 1,
}
# Operators that only move or view data: no FLOPs.
_MOVEMENT = {
    "view", "reshape", "permute", "transpose", "flatten", "unflatten", "expand", "expand_as", "contiguous",
    "getitem", "cat", "stack", "split", "chunk", "unsqueeze", "squeeze", "clone", "to", "type_as", "flip",
    "narrow", "select", "repeat", "tile", "roll", "pad", "identity", "t", "movedim", "unbind", "float", "half",
    "long", "int", "bool", "detach", "new_zeros", "new_ones", "zeros_like", "ones_like", "getattr", "size",
    "swapaxes", "swapdims", "view_as", "reshape_as", "masked_select", "index_select", "gather", "take_along_dim",
    "patch_merging_pad", "get_relative_position_bias",  # torchvision's Swin: slicing and gathering
}
# Operators that write a new tensor from shapes and constants (a mask, positions): its bytes, no FLOPs.
_CREATION = {"full", "zeros", "ones", "arange", "eye", "linspace", "full_like", "tensor", "as_tensor", "new_full",
             "new_empty", "new_tensor", "empty", "empty_like", "scalar_tensor"}
_POOLING = {"max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
            "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool2d"}
_MATMUL = {"matmul", "bmm", "mm", "baddbmm", "addmm"}


def tensor_bytes(value):
    """Bytes of every tensor in a (nested) value; views count their logical size."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    return 0


def _numel(value):
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (tuple, list)):
        return sum(_numel(v) for v in value)
    return 0


def operator_name(node, module, value=None):
    """A short kind for the node: the module class (`conv2d`, `linear`) or the function's name; a get_attr
    node's is `parameter`, or `buffer` for a buffer or a tensor constant (`value` is the node's)."""
    if node.op == "call_module":
        return type(module).__name__.lower()
    if node.op == "get_attr":
        return "buffer" if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) else \
            "parameter"
    target = node.target
    if isinstance(target, str):
        return target.rstrip("_")
    name = getattr(target, "__name__", str(target))
    return name.strip("_").rstrip("_")


class Costs:
    """FLOPs and bytes of the forward (F), input-gradient (I) and weight-gradient (W) passes."""

    def __init__(self, f=0.0, i=0.0, w=0.0, f_bytes=0.0, i_bytes=0.0, w_bytes=0.0):
        self.flops = {"forward": float(f), "backward_input": float(i), "backward_weight": float(w)}
        self.bytes = {"forward": float(f_bytes), "backward_input": float(i_bytes), "backward_weight": float(w_bytes)}


def _weight_gradient_bytes(parameter_bytes, inputs, out):
    return 2 * parameter_bytes + inputs + out if parameter_bytes else 0


def costs(kind, node, module, inputs, output, parameter_bytes):
    """Costs of one operator given the concrete values of its tensor inputs (a list) and output;
    None when its FLOPs are unknown."""
    in_bytes = sum(tensor_bytes(x) for x in inputs)
    out_bytes = tensor_bytes(output)
    moved = in_bytes + parameter_bytes + out_bytes
    out_elements = _numel(output)
    gradient_bytes = in_bytes + out_bytes + parameter_bytes  # read grad out and what was saved, write grad in

    def with_flops(f, i, w):
        return Costs(f, i, w, moved, gradient_bytes if i or kind in _ELEMENTWISE else 0,
                     _weight_gradient_bytes(parameter_bytes, in_bytes, out_bytes) if w else 0)

    if node.op in ("get_attr", "placeholder") or not isinstance(output, (torch.Tensor, tuple, list)) or \
            out_elements == 0:
        return Costs()
    if node.op == "call_function" and isinstance(node.target, type) and issubclass(node.target, tuple):
        return Costs()  # a named tuple of the outputs (GoogLeNet's, Inception's): no data moves
    if kind == "shifted_window_attention":
        f = _window_attention_flops(node, inputs)
        return with_flops(f, 2 * f, 0)  # its weights are inputs (get_attr): their gradients are in I
    if kind == "einsum":
        f = _einsum_flops(node, inputs)
        if f is not None:
            return with_flops(f, 2 * f, 0)
    if isinstance(module, torch.nn.Linear) or kind == "linear":
        weight = module.weight if module is not None else inputs[1]
        f = 2 * out_elements * weight.shape[1]
        return with_flops(f, f, f if module is not None else 0)
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        kernel = math.prod(module.kernel_size) * module.in_channels // module.groups
        if isinstance(module, torch.nn.modules.conv._ConvTransposeNd):
            f = 2 * _numel(inputs[0]) * module.out_channels // module.groups * math.prod(module.kernel_size)
        else:
            f = 2 * out_elements * kernel
        return with_flops(f, f, f)
    if isinstance(module, torch.nn.MultiheadAttention):
        query, key = inputs[0], inputs[1] if len(inputs) > 1 else inputs[0]
        batch_first = module.batch_first
        length = query.shape[1] if batch_first and query.dim() == 3 else query.shape[0]
        source = key.shape[1] if batch_first and key.dim() == 3 else key.shape[0]
        batch = query.numel() // (length * module.embed_dim)
        e = module.embed_dim
        projections = 2 * batch * e * e * (2 * length + 2 * source)
        attention = 2 * 2 * batch * length * source * e
        return with_flops(projections + attention + 5 * batch * module.num_heads * length * source,
                          projections // 2 + 2 * attention, projections // 2)
    if isinstance(module, (torch.nn.modules.batchnorm._NormBase, torch.nn.LayerNorm, torch.nn.GroupNorm)):
        affine = parameter_bytes > 0
        return with_flops(5 * out_elements, 8 * out_elements, 2 * out_elements if affine else 0)
    if kind in ("layer_norm", "batch_norm", "group_norm", "instance_norm"):
        return with_flops(5 * out_elements, 8 * out_elements, 0)
    if kind in _MATMUL or node.target in (operator.matmul, torch.matmul, torch.bmm, torch.mm):
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        inner = tensors[0].shape[-1] if tensors else 0
        f = 2 * out_elements * inner
        return with_flops(f, 2 * f, 0)
    if kind in ("embedding",) or isinstance(module, torch.nn.Embedding):
        return with_flops(0, 0, out_elements if module is not None else 0)
    if kind in _POOLING or isinstance(module, (torch.nn.modules.pooling._MaxPoolNd, torch.nn.modules.pooling._AvgPoolNd,
                                               torch.nn.modules.pooling._AdaptiveAvgPoolNd,
                                               torch.nn.modules.pooling._AdaptiveMaxPoolNd)):
        elements = sum(_numel(x) for x in inputs)
        return with_flops(elements, elements, 0)
    if kind in ("scaled_dot_product_attention",):
        q, k = inputs[0], inputs[1]
        f = 2 * 2 * q.numel() * k.shape[-2]
        return with_flops(f, 2 * f, 0)
    module_kind = type(module).__name__.lower() if module is not None else kind
    if module_kind in _ELEMENTWISE or kind in _ELEMENTWISE:
        per = _ELEMENTWISE.get(module_kind, _ELEMENTWISE.get(kind, 1))
        return with_flops(per * out_elements, per * out_elements, 0)
    if isinstance(module, (torch.nn.ReLU, torch.nn.GELU, torch.nn.SiLU, torch.nn.Sigmoid, torch.nn.Tanh,
                           torch.nn.Dropout, torch.nn.Softmax, torch.nn.LogSoftmax, torch.nn.Hardswish,
                           torch.nn.LeakyReLU, torch.nn.ReLU6, torch.nn.Identity, torch.nn.Flatten)):
        per = 0 if isinstance(module, (torch.nn.Identity, torch.nn.Flatten)) else 1
        return with_flops(per * out_elements, per * out_elements, 0)
    if kind in _CREATION:
        return Costs(0, 0, 0, out_bytes)
    if kind in _MOVEMENT or module_kind in _MOVEMENT:
        return Costs(0, 0, 0, moved if kind in ("cat", "stack", "contiguous", "clone", "repeat", "pad") else 0)
    return None


def _window_attention_flops(node, inputs):
    """torchvision's Swin attention (shifted_window_attention(input[B, H, W, C], qkv_weight, proj_weight, ...,
    window_size, num_heads, ...)): the q, k, v and output projections of every token of the feature map
    padded to whole windows, and the scores and weighted sums within each window, plus the softmax."""
    x = inputs[0]
    window = node.args[4] if len(node.args) > 4 else node.kwargs.get("window_size")
    heads = node.args[5] if len(node.args) > 5 else node.kwargs.get("num_heads")
    batch, height, width, channels = x.shape
    rows, columns = -(-height // window[0]) * window[0], -(-width // window[1]) * window[1]
    tokens, per_window = batch * rows * columns, window[0] * window[1]
    return (2 * tokens * channels * 4 * channels + 2 * 2 * tokens * per_window * channels
            + 5 * heads * tokens * per_window)


def _einsum_flops(node, inputs):
    """A multiply-add per point of the space of every index the equation names (two operands), one
    operation per point with one operand; None for an equation with an ellipsis."""
    equation = node.args[0] if node.args and isinstance(node.args[0], str) else None
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if equation is None or "..." in equation or not tensors:
        return None
    operands = equation.replace(" ", "").split("->")[0].split(",")
    if len(operands) != len(tensors):
        return None
    sizes = {}
    for letters, tensor in zip(operands, tensors):
        if len(letters) != tensor.dim():
            return None
        sizes.update(zip(letters, tensor.shape))
    return (2 if len(tensors) > 1 else 1) * math.prod(sizes.values())


def loss_costs(kind, logits):
    """Cross-entropy is a log-softmax and a gather; MSE a difference, a square and a mean."""
    n = logits.numel()
    per = 5 if kind == "cross_entropy" else 3
    return Costs(per * n, per * n, 0, 2 * tensor_bytes(logits), 2 * tensor_bytes(logits), 0)

