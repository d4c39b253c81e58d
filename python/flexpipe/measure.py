"""What the operators of a traced model actually cost on this machine: the tensors autograd saves for
the backward, attributed to the operator that saved them, and the median times of the forward,
input-gradient and weight-gradient passes of every operator."""
import statistics
import time
import weakref

import torch
import torch.fx as fx

from .losses import apply_loss

LOSS_NODE = "loss"


def _storage_of(tensor):
    """(key, bytes) of the memory a tensor keeps alive: its whole storage, which views share."""
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less tensors
        return None
    return storage.data_ptr(), storage.nbytes()


def model_storages(model):
    """Storage keys of parameters and buffers: saved by operators, but not activation memory."""
    keys = set()
    for tensor in list(model.parameters()) + list(model.buffers()):
        found = _storage_of(tensor)
        if found:
            keys.add(found[0])
    return keys


class _SavedTensorRecorder(fx.Interpreter):
    """Runs the graph node by node and records, per node, the storages its autograd saves."""

    def __init__(self, module, floating):
        super().__init__(module)
        self.floating = floating  # the captured floating type
        self.current = None
        self.saved = {}  # node name -> {storage key: bytes}
        self.outputs = {}  # node name -> storage keys of the tensors it returns
        self.unscaled = set()  # storage keys of saved tensors of another type than the captured one

    def run_node(self, n):
        self.current = n.name
        result = super().run_node(n)
        tensors = result if isinstance(result, (tuple, list)) else [result]
        self.outputs[n.name] = {found[0] for found in (_storage_of(t) for t in tensors if isinstance(t, torch.Tensor))
                                if found}
        return result

    def pack(self, tensor):
        found = _storage_of(tensor)
        if found and self.current is not None:
            self.saved.setdefault(self.current, {})[found[0]] = found[1]
            if tensor.dtype != self.floating:
                self.unscaled.add(found[0])
        # What is kept is the same storage, so that it lives as long as the graph does (a freed storage's
        # address could name another later), but not the tensor itself: an operator that saves its output
        # (a ReLU) would then hold the output through its saved variable, and the output its grad_fn, a
        # cycle no garbage collector sees, since the record never runs the backward that breaks it
        # (PyTorch 2.11 leaked every such output, and the model with the hook).
        return tensor.detach()

    def record(self, inputs, loss):
        # The hooks are kept by the autograd graph, which the interpreter's values reach: through a bound
        # method the graph would reach the recorder back, a cycle through C++ that no collector sees.
        recorder = weakref.ref(self)

        def pack(tensor):
            return recorder().pack(tensor)

        with torch.autograd.graph.saved_tensors_hooks(pack, _unpack):
            output = self.run(*inputs)
            self.current = LOSS_NODE
            result = apply_loss(loss, output)
            self.current = None
        self.env.clear()
        return output, result


def _unpack(tensor):
    return tensor


def captured_floating(model, inputs):
    """The captured floating type, which the capture record names (`dtype`) and the C++ side scales from
    when the model trains in another: the first floating input's, else the first floating parameter's
    (a language model's inputs are token ids), else float32."""
    floating = [x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    floating += [p.dtype for p in model.parameters() if p.is_floating_point()]
    return floating[0] if floating else torch.float32


def saved_storages(graph_module, inputs, loss):
    """{node name: {storage key: bytes}} of every tensor autograd saves in one forward (and the loss),
    parameters and buffers excluded; {node name: storage keys of its output}; and the keys of the
    saved tensors not of the captured floating type (integer indices, a double scalar). A key names
    one storage while a reader of the output runs (the output is alive then), so a reader's saved key
    that is a key of its input's output is that very tensor, or a view of it."""
    recorder = _SavedTensorRecorder(graph_module, captured_floating(graph_module, inputs))
    torch.manual_seed(0)
    output, result = recorder.record(inputs, loss)
    excluded = model_storages(graph_module)
    saved = {name: {k: b for k, b in storages.items() if k not in excluded} for name, storages in recorder.saved.items()}
    del output, result
    return saved, recorder.outputs, recorder.unscaled


# What a time is measured with: the wall clock (what a step takes), or this thread's CPU time, which
# other processes on a shared machine do not inflate (exact only with one intra-op thread).
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


class Timing:
    """How each time is taken: `warmup` untimed runs, then the median of `repeats` timed ones."""

    def __init__(self, warmup, repeats, clock):  # the defaults are CaptureOptions' (options.py)
        if clock not in CLOCKS:
            raise ValueError(f"unknown clock '{clock}'; known: {', '.join(CLOCKS)}")
        self.warmup, self.repeats, self.clock = warmup, repeats, clock


def _median_ms(fn, timing):
    clock = CLOCKS[timing.clock]
    for _ in range(timing.warmup):
        fn()
    samples = []
    for _ in range(timing.repeats):
        start = clock()
        fn()
        samples.append(clock() - start)
    return 1e3 * statistics.median(samples)


def _out_of_place(node, module):
    """Timing runs each operator on its own inputs again and again: an in-place operator would modify
    them (and a leaf that needs a gradient cannot be modified in place), so time its out-of-place twin."""
    if module is not None and getattr(module, "inplace", False):
        twin = type(module).__new__(type(module))
        twin.__dict__.update(module.__dict__)
        twin.inplace = False
        return lambda *a, **k: twin(*a, **k)
    if node.op == "call_method":
        name = node.target[:-1] if node.target.endswith("_") and not node.target.endswith("__") else node.target
        return lambda self, *a, **k: getattr(self, name)(*a, **k)
    if node.op == "call_function":
        target = node.target
        in_place = {"iadd": "add", "imul": "mul", "isub": "sub", "itruediv": "truediv"}
        if getattr(target, "__name__", "") in in_place:
            import operator
            target = getattr(operator, in_place[target.__name__])

        def call(*a, **k):
            if k.get("inplace"):
                k = dict(k, inplace=False)
            return target(*a, **k)
        return call
    return module


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


class PassTimes:
    def __init__(self, forward=0.0, backward_input=0.0, backward_weight=0.0):
        self.forward = forward
        self.backward_input = backward_input
        self.backward_weight = backward_weight


def time_operator(node, module, values, parameters, needs_gradient, timing):
    """Median forward, input-gradient and weight-gradient times (ms) of one operator run alone on
    copies of its recorded inputs. `needs_gradient(input_node)`: whether training needs the gradient
    of that input (not for the data)."""
    fn = _out_of_place(node, module)
    leaves = []

    def prepare(arg):
        value = values[arg]
        if isinstance(value, torch.Tensor):
            copy = value.detach()
            if copy.is_floating_point() and needs_gradient(arg):
                copy = copy.clone().requires_grad_(True)
                leaves.append(copy)
            return copy
        return value

    args = fx.node.map_arg(node.args, prepare)
    kwargs = fx.node.map_arg(node.kwargs, prepare)
    if node.op == "get_attr":
        return PassTimes()

    def forward():
        return fn(*args, **kwargs)

    forward_ms = _median_ms(forward, timing)
    parameters = [p for p in parameters if p.requires_grad]
    output = [t for t in _tensors(forward()) if t.requires_grad]
    if not output:
        return PassTimes(forward_ms)
    seeds = [torch.ones_like(t) for t in output]

    def gradient(wrt):
        return lambda: torch.autograd.grad(output, wrt, seeds, retain_graph=True, allow_unused=True)

    input_ms = _median_ms(gradient(leaves), timing) if leaves else 0.0
    weight_ms = _median_ms(gradient(parameters), timing) if parameters else 0.0
    return PassTimes(forward_ms, input_ms, weight_ms)


def time_loss(loss, output, timing):
    """The loss as one more operator: forward and input-gradient times (ms)."""
    logits = [t.detach().clone().requires_grad_(True) for t in _tensors(output) if t.is_floating_point()]
    structured = logits[0] if isinstance(output, torch.Tensor) else logits

    def forward():
        torch.manual_seed(0)
        return apply_loss(loss, structured)

    forward_ms = _median_ms(forward, timing)
    result = forward()
    input_ms = _median_ms(lambda: torch.autograd.grad(result, logits, retain_graph=True), timing)
    return PassTimes(forward_ms, input_ms, 0.0)


def time_whole_step(model, inputs, loss, timing):
    """Median time (ms) of the whole model's forward, loss and backward: what the operators' times
    should add up to."""
    def step():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        result = apply_loss(loss, model(*inputs))
        result.backward()

    return _median_ms(step, timing)
