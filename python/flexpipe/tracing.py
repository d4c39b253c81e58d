"""Operator-level tracing of a user's nn.Module with torch.fx.

Plain `torch.fx.symbolic_trace` stops at the first `n, c, h, w = x.shape` (torchvision's ViT) or
`if src.dim() == 3` (nn.TransformerEncoderLayer). This tracer runs the model on the example inputs
while it traces, so every proxy carries its concrete value. Control flow on tensor *metadata* (shapes,
dtypes, devices) is then decided by that value: the graph is specialized to the example shapes, which
is what a pipeline with fixed micro-batch shapes runs anyway. Control flow on tensor *data* cannot be
specialized without changing the model's meaning: the module where it happens is kept whole, as one
leaf operator, and when that module is the model itself the capture fails naming the line.

Values that no training step can change are *static* too, and control flow on them is decided the
same way: buffers and tensor constants, and whatever is computed from them and from shapes alone
without drawing random numbers (a causal mask built with `torch.triu(torch.full((n, n), -inf))`, the
check `(mask == causal).all()` in nn.TransformerEncoder). Parameters and the model's inputs are data.

Buffers and tensor constants are `get_attr` nodes, recorded like every other node: a buffer read in a
traced forward (proxy_buffer_attributes) or handed to an operator, and a tensor the forward builds
from constants alone (`torch.tensor([...])`, a mask of a fixed size), which becomes an attribute
`_tensor_constant<k>` of the traced module (never of the user's model).
"""
import inspect
import operator

import torch
import torch.fx as fx

from .errors import CaptureError, where

# Attributes and methods of a tensor that read its metadata, never its data.
_METADATA_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "is_sparse",
                        "is_quantized", "is_nested", "is_meta"}
_METADATA_METHODS = {"size", "dim", "ndimension", "numel", "nelement", "is_contiguous", "is_floating_point",
                     "is_complex", "element_size", "get_device", "stride"}

# Functions that read a tensor's metadata.
_METADATA_FUNCTIONS = {torch.is_floating_point, torch.is_complex, torch.numel, torch.is_tensor}

# What draws random numbers (or returns uninitialized memory): never static, whatever its inputs.
_RANDOM_NAMES = {"rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
                 "bernoulli_", "normal", "normal_", "uniform_", "exponential_", "geometric_", "cauchy_",
                 "log_normal_", "random_", "multinomial", "poisson", "dropout", "dropout_", "alpha_dropout",
                 "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d", "rrelu", "rrelu_", "empty",
                 "empty_like", "empty_strided", "stochastic_depth", "native_dropout", "gumbel_softmax"}


def draws_random_numbers(target):
    """Whether a function or method (its target) draws random numbers."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name in _RANDOM_NAMES


# torch.nn modules with submodules that are still one operator to us: traced inside, their forward is
# control flow over many kernels (MultiheadAttention: F.multi_head_attention_forward).
_OPAQUE_TORCH_MODULES = (torch.nn.MultiheadAttention,)


# torch.fx patches these while it traces; running a module for its concrete value needs the originals.
_MODULE_CALL = torch.nn.Module.__call__
_MODULE_GETATTR = torch.nn.Module.__getattr__


# torch's functions that draw random numbers. fx records a call only when a proxy is among its arguments:
# `torch.rand(3)` in a forward would run once, at the trace, and its numbers become a constant. While
# this tracer traces, they always make a node (and are never static).
_RANDOM_FUNCTIONS = ("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
                     "bernoulli", "multinomial", "poisson")
_ORIGINAL_RANDOM = {name: getattr(torch, name) for name in _RANDOM_FUNCTIONS}


class _UnpatchedModules:
    """Runs modules (and torch's random functions) for real in the middle of a trace."""

    def __enter__(self):
        self.patched = torch.nn.Module.__call__, torch.nn.Module.__getattr__
        torch.nn.Module.__call__, torch.nn.Module.__getattr__ = _MODULE_CALL, _MODULE_GETATTR
        self.random = {name: getattr(torch, name) for name in _RANDOM_FUNCTIONS}
        for name, function in _ORIGINAL_RANDOM.items():
            setattr(torch, name, function)

    def __exit__(self, *exc):
        torch.nn.Module.__call__, torch.nn.Module.__getattr__ = self.patched
        for name, function in self.random.items():
            setattr(torch, name, function)


class _RecordedRandomFunctions:
    """While a trace runs: torch.rand and the like make a node even when no argument is a proxy."""

    def __init__(self, tracer):
        self.tracer = tracer

    def __enter__(self):
        def recorded(function):
            def call(*args, **kwargs):
                return self.tracer.create_proxy("call_function", function, args, kwargs)
            return call
        for name, function in _ORIGINAL_RANDOM.items():
            setattr(torch, name, recorded(function))

    def __exit__(self, *exc):
        for name, function in _ORIGINAL_RANDOM.items():
            setattr(torch, name, function)


class _CustomFunctionsRefused:
    """While a trace runs: a custom torch.autograd.Function applied to a proxy is refused (torch.fx cannot
    see into it, and torch 2.11's Function.apply crashes the process on a proxy): the module is kept
    whole, or `--tracer auto` takes torch.export, which traces through it."""

    def __enter__(self):
        self.original = vars(torch.autograd.Function)["apply"]  # the classmethod itself, to put back as it was

        def apply(cls, *args, **kwargs):
            if any(isinstance(a, fx.Proxy) for a in (*args, *kwargs.values())):
                raise fx.proxy.TraceError(f"a custom torch.autograd.Function ({cls.__name__}) cannot be traced by "
                                          "torch.fx")
            return self.original.__func__(cls, *args, **kwargs)
        torch.autograd.Function.apply = classmethod(apply)

    def __exit__(self, *exc):
        torch.autograd.Function.apply = self.original


class DataDependentControlFlow(Exception):
    """Python control flow that depends on a tensor's values: cannot be traced into a static graph."""


class _ModelRaised(Exception):
    """The model itself raised while running on the example inputs (wrong shapes, a bug)."""

    def __init__(self, original, module):
        super().__init__(str(original))
        self.original = original
        self.module = module


class _ConcreteProxy(fx.Proxy):
    """A proxy that answers Python's scalar protocols from its concrete value when that value is
    tensor metadata (a shape entry, a dimension count)."""

    def _metadata_value(self, what):
        tracer = self.tracer
        if self.node not in tracer.metadata_nodes:
            raise DataDependentControlFlow(f"{what} of a value computed from tensor data")
        return tracer.values[self.node]

    @property
    def __class__(self):
        # isinstance(proxy, torch.Tensor) is what its value answers (F._none_or_dtype, F._canonical_mask and
        # many models check it), as for a number; type(proxy) is still this class, which fx goes by.
        value = self.tracer.values.get(self.node)
        if isinstance(value, torch.Tensor) or type(value) in (bool, int, float):
            return type(value)
        return type(self)

    def __iter__(self):
        # fx's own __iter__ reads the caller's bytecode, which it misreads on Python 3.11.
        return self.tracer.iter(self)

    def __len__(self):
        # The length of a tensor is its first dimension and that of a tuple its structure: never data.
        return len(self.tracer.values[self.node])

    def __int__(self):
        return int(self._metadata_value("int()"))

    def __index__(self):
        return operator.index(self._metadata_value("an index"))

    def __float__(self):
        return float(self._metadata_value("float()"))


def _is_primitive(module):
    """A torch.nn module that is one operator: Linear, Conv2d, LayerNorm, ReLU, Dropout, ..."""
    if not module.__module__.startswith("torch.nn") or isinstance(module, (torch.nn.Sequential, torch.nn.ModuleList,
                                                                         torch.nn.ModuleDict)):
        return False
    return isinstance(module, _OPAQUE_TORCH_MODULES) or next(module.children(), None) is None


class CaptureTracer(fx.Tracer):
    """Traces `root` on `example_inputs`, treating `kept_whole` (qualified names) as leaves on top of
    the primitive torch.nn modules. After trace(): `values` maps every node to its concrete value,
    `module_of` maps it to the qualified name of the module whose forward created it, `metadata_nodes`
    holds the static nodes (shapes, buffers, constants and what is computed from them alone) and
    `constants` the tensors the forward built from constants ({attribute name: tensor})."""

    # A buffer read in a traced forward is a get_attr node, not a tensor baked into the graph: every
    # chunk of the export that reads it holds it, as it holds parameters.
    proxy_buffer_attributes = True

    def __init__(self, kept_whole=()):
        super().__init__(autowrap_functions=())
        self.kept_whole = set(kept_whole)
        self.values = {}
        self.metadata_nodes = set()
        self.module_of = {}
        self.constants = {}
        self._constant_names = {}
        self._module_stack = [""]
        self._placeholder_values = {}
        self._input_names = set()

    # Which modules are operators.
    def is_leaf_module(self, module, qualified_name):
        return _is_primitive(module) or qualified_name in self.kept_whole

    def call_module(self, module, forward, args, kwargs):
        name = self.path_of_module(module)
        self._module_stack.append(name)
        try:
            return super().call_module(module, forward, args, kwargs)
        except (DataDependentControlFlow, fx.proxy.TraceError, TypeError, RuntimeError, AttributeError) as error:
            # The innermost module being traced when tracing failed is the one to keep whole.
            if not hasattr(error, "flexpipe_module"):
                error.flexpipe_module = name
            raise
        finally:
            self._module_stack.pop()

    def proxy(self, node):
        return _ConcreteProxy(node, self)

    def create_arg(self, a):
        if isinstance(a, fx.Proxy):  # first: a proxy answers isinstance(proxy, torch.Tensor) as its value does
            return a.node
        if isinstance(a, torch.Tensor) and not isinstance(a, torch.nn.Parameter) and not any(
                a is buffer for buffer in self.root.buffers()):
            # A tensor built from constants alone. fx would store it on the user's model under the first
            # free name, so that a second trace of the same model names it differently; this tracer keeps
            # it, named by its order in this trace, and trace() gives it to the traced module only.
            name = self._constant_names.get(id(a))
            if name is None:
                name = self._constant_names[id(a)] = f"_tensor_constant{len(self.constants)}"
                self.constants[name] = a
            return self.create_node("get_attr", name, (), {})
        return super().create_arg(a)

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        # Every node is recorded with its concrete value here, where fx creates it, whether through a proxy
        # or directly (get_attr of a buffer or constant handed to an operator).
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        if kind != "output" and node not in self.values:
            self.module_of[node] = self._module_stack[-1]
            self.values[node] = self._evaluate(node)
            if self._is_static(node):
                self.metadata_nodes.add(node)
        return node

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        if kind == "call_function" and self._reads_a_specialized_argument((args, kwargs)):
            # fx checks that an argument specialized to its default (a mask that is None) still is, on a
            # placeholder kept for it: nothing the model computes, evaluated now and left out of the graph.
            def value(a):
                return self.values[a.node] if isinstance(a, fx.Proxy) else a
            return target(*fx.node.map_aggregate(args, value), **fx.node.map_aggregate(kwargs, value))
        return super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)

    def _reads_a_specialized_argument(self, arguments):
        found = []
        fx.node.map_aggregate(arguments, lambda a: found.append(a) if isinstance(a, fx.Proxy) and (
            a.node.op == "placeholder" and a.node.target not in self._input_names) else None)
        return bool(found)

    def _is_static(self, node):
        """Whether no training step can change the node's value: it reads metadata, or a buffer or
        constant, or is computed without random numbers from static values alone."""
        kind, target = node.op, node.target
        if kind == "get_attr":
            value = self.values[node]
            return isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
        if kind == "call_function" and target is getattr:
            return node.args[1] in _METADATA_ATTRIBUTES or node.args[0] in self.metadata_nodes
        if (kind == "call_method" and target in _METADATA_METHODS) or (
                kind == "call_function" and target in _METADATA_FUNCTIONS):
            return True
        if kind in ("call_function", "call_method") and not draws_random_numbers(target):
            return all(a in self.metadata_nodes for a in node.all_input_nodes)
        return False

    def _evaluate(self, node):
        def value(arg):
            return fx.node.map_arg(arg, lambda n: self.values[n])

        args, kwargs = value(node.args), value(node.kwargs)
        try:
            with torch.no_grad(), _UnpatchedModules():
                if node.op == "placeholder":
                    # fx names a specialized argument's placeholder NAME_1 and gives it the default.
                    return self._placeholder_values.get(node.target, node.args[0] if node.args else None)
                if node.op == "get_attr":
                    if node.target in self.constants:
                        return self.constants[node.target]
                    target = self.root
                    for part in node.target.split("."):
                        target = getattr(target, part)
                    return target
                if node.op == "call_function":
                    return node.target(*args, **kwargs)
                if node.op == "call_method":
                    return getattr(args[0], node.target)(*args[1:], **kwargs)
                if node.op == "call_module":
                    return self.root.get_submodule(node.target)(*args, **kwargs)
        except Exception as error:  # the model's own failure, not the tracer's
            raise _ModelRaised(error, self._module_stack[-1]) from error
        return None

    # Python's control flow on proxies: decided by the concrete value when it is metadata.
    def to_bool(self, obj):
        if obj.node not in self.metadata_nodes:
            raise DataDependentControlFlow("control flow (if, while, and, or, not) on a value computed from tensor "
                                           "data")
        return bool(self.values[obj.node])

    def iter(self, obj):
        return iter([obj[i] for i in range(len(self.values[obj.node]))])

    def keys(self, obj):
        return self.values[obj.node].keys()

    def trace_with_inputs(self, root, example_inputs):
        # Arguments beyond the example inputs keep their defaults (masks that are None, flags).
        parameters = list(inspect.signature(root.forward).parameters.values())
        if len(parameters) < len(example_inputs) and not any(p.kind == p.VAR_POSITIONAL for p in parameters):
            raise CaptureError(f"{len(example_inputs)} inputs for {type(root).__name__}.forward, which takes "
                               f"{len(parameters)}: {', '.join(p.name for p in parameters)}")
        self._placeholder_values = {p.name: x for p, x in zip(parameters, example_inputs)}
        self._input_names = set(self._placeholder_values)
        concrete = {p.name: p.default for p in parameters[len(example_inputs):]
                    if p.default is not inspect.Parameter.empty}
        self._placeholder_values.update(concrete)
        with _RecordedRandomFunctions(self), _CustomFunctionsRefused():
            graph = self.trace(root, concrete_args=concrete or None)
        return graph


def _graph_module(model, graph, constants):
    """The GraphModule of a trace, with the tensor constants it made as its buffers (fx copies what its
    get_attr nodes name from the model: they are lent to the model only while it does)."""
    for name, tensor in constants.items():
        setattr(model, name, tensor)
    try:
        return fx.GraphModule(model, graph, type(model).__name__)
    finally:
        for name in constants:
            delattr(model, name)


def model_input_nodes(graph_module, inputs):
    """The placeholders of the model's inputs (the example inputs, in forward's order) that hold tensors:
    the first nodes of the cost graph."""
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    return [n for n, x in zip(placeholders, inputs) if isinstance(x, torch.Tensor)]


def _module_label(model, name):
    module = model.get_submodule(name) if name else model
    return f"'{name}' ({type(module).__name__})" if name else f"the model ({type(module).__name__})"


def trace(model, example_inputs):
    """Returns (GraphModule, tracer, kept_whole): the model's operator graph specialized to the
    example inputs' shapes. Modules that cannot be traced are kept whole; kept_whole maps each to the
    reason and the line. Raises CaptureError when the model itself cannot be traced or run."""
    kept_whole = {}
    while True:
        tracer = CaptureTracer(kept_whole)
        try:
            graph = tracer.trace_with_inputs(model, example_inputs)
            return _graph_module(model, graph, tracer.constants), tracer, kept_whole
        except _ModelRaised as raised:
            raise CaptureError(f"the inputs do not fit the model: {_module_label(model, raised.module)} raised "
                               f"{type(raised.original).__name__}: {raised.original}"
                               + (f" at {where(raised.original.__traceback__)}"
                                  if where(raised.original.__traceback__) else "")) from None
        except (DataDependentControlFlow, fx.proxy.TraceError, TypeError, RuntimeError, AttributeError) as error:
            module = getattr(error, "flexpipe_module", "")
            line = where(error.__traceback__)
            reason = f"{error}" + (f" at {line}" if line else "")
            if not module or module in kept_whole:
                raise CaptureError(f"cannot trace {_module_label(model, module)}: {reason}") from None
            kept_whole[module] = reason
