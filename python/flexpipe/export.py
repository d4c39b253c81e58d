"""export(): a captured model cut at a partition plan's stage boundaries into TorchScript modules, one
per chunk (and one per piece of a chunk where the plan recomputes or offloads), with a manifest that
says what enters and leaves each module, which parameters it holds by their original names, and where
the loss is computed (docs/export.md). Python only cuts and writes; the training runs elsewhere.

The model is rebuilt from the graph's capture record (FILE.py:FACTORY, the example inputs) and traced
again with the capture's tracer, so the fx node names are the cost graph's operator names and a plan's
operator ranges select fx nodes. A cut may fall anywhere in that order: every value that crosses it is
handed over as tensors; numbers computed from shapes are baked in as constants (the graph is
specialized to the captured shapes anyway); parameters are never handed over: a chunk that reads one
holds it."""
import contextlib
import copy
import json
import operator
import os
import re
import warnings
from typing import List, Optional

import torch
import torch.fx as fx
import torch.nn.functional as F

from .errors import CaptureError
from .loading import DTYPES, build_model, example_input
from .losses import LOSSES
from .measure import LOSS_NODE
from .out_of_place import make_out_of_place
from .tracing import draws_random_numbers, model_input_nodes, trace
from .values import at as _at, leaves as _leaves

FORMAT = "flexpipe-export"
VERSION = 1
MANIFEST = "manifest.json"
STAMP = "made-from.checksum"  # written by `flexpipe train` after exporting, removed by every export
_EXPORTED_FILE = re.compile(r"stage_\d+(_piece_\d+)?\.pt")
SEED = 0  # torch.manual_seed before the factory runs: the exported weights are the seeded model's



# ---------------------------------------------------------------------------------------------------
# Reading the inputs

def _read_json(source, what):
    """(document, origin): a dict as it is, or a JSON file; origin names it in errors."""
    if isinstance(source, dict):
        return source, f"the {what}"
    path = os.fspath(source)
    try:
        with open(path) as f:
            return json.load(f), path
    except FileNotFoundError:
        raise CaptureError(f"{path}: no such file") from None
    except OSError as error:
        raise CaptureError(f"{path}: cannot read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise CaptureError(f"{path}:{error.lineno}:{error.colno}: {error.msg}") from None


def _check_graph(graph, origin, need_source=True):
    if not isinstance(graph, dict) or graph.get("format") != "flexpipe-cost-graph":
        raise CaptureError(f"{origin}: not a cost graph (\"format\": \"flexpipe-cost-graph\")")
    nodes = graph.get("nodes")
    if not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) and "name" in n for n in nodes):
        raise CaptureError(f"{origin}: \"nodes\" must be a non-empty array of named operators")
    record = graph.get("capture")
    if not isinstance(record, dict):
        raise CaptureError(f"{origin}: no capture record: export rebuilds the model from the file, factory and "
                           "inputs that `flexpipe capture` records")
    missing = [key for key in (("file", "factory", "inputs") if need_source else ("inputs",)) if key not in record]
    if missing:
        raise CaptureError(f"{origin}: the capture record has no {', '.join(missing)}: export rebuilds the model "
                           "from FILE.py:FACTORY (a graph captured from Python names them with source=...)")
    if record.get("loss", "none") not in LOSSES:
        raise CaptureError(f"{origin}: the capture's loss '{record.get('loss')}' cannot be exported; known: "
                           f"{', '.join(LOSSES)}")
    inputs = record["inputs"]
    if not isinstance(inputs, list) or not inputs:
        raise CaptureError(f"{origin}: capture.inputs must be a non-empty array of {{shape, dtype}}")
    for i, entry in enumerate(inputs):
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if (not isinstance(shape, list) or not shape or not all(isinstance(d, int) and d > 0 for d in shape)
                or entry.get("dtype", "float32") not in DTYPES):
            raise CaptureError(f"{origin}: capture.inputs[{i}] must be {{\"shape\": [positive integers], "
                               f"\"dtype\": one of {', '.join(DTYPES)}}}")


def _check_plan(plan, origin, graph):
    if not isinstance(plan, dict) or plan.get("format") != "flexpipe-partition-plan":
        raise CaptureError(f"{origin}: not a partition plan (\"format\": \"flexpipe-partition-plan\")")
    operators = len(graph["nodes"])
    if plan.get("graph") != graph.get("name") or plan.get("graph_operators") != operators:
        raise CaptureError(f"{origin}: made for '{plan.get('graph')}' with {plan.get('graph_operators')} operators, "
                           f"the graph '{graph.get('name')}' has {operators}")
    stages = plan.get("stages")
    if not isinstance(stages, list) or not stages:
        raise CaptureError(f"{origin}: \"stages\" must be a non-empty array")
    names = [n["name"] for n in graph["nodes"]]
    start = 0
    for k, stage in enumerate(stages):
        count = stage.get("operators") if isinstance(stage, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise CaptureError(f"{origin}: stages[{k}].operators must be a positive integer, got {count!r}")
        if start + count > operators:
            raise CaptureError(f"{origin}: stages[{k}] ends at operator {start + count}, past the {operators} "
                               f"operators of '{graph.get('name')}'")
        for key, index in (("first", start), ("last", start + count - 1)):
            if key in stage and stage[key] != names[index]:
                raise CaptureError(f"{origin}: stages[{k}].{key} is '{stage[key]}', but operator {index} of "
                                   f"'{graph.get('name')}' is '{names[index]}'")
        own = set(names[start:start + count])
        for key in ("recompute", "offload"):
            listed = stage.get(key, [])
            if not isinstance(listed, list):
                raise CaptureError(f"{origin}: stages[{k}].{key} must be an array of operator names")
            for name in listed:
                if name not in own:
                    raise CaptureError(f"{origin}: stages[{k}].{key}: '{name}' is not an operator of stage {k} "
                                       f"({names[start]} .. {names[start + count - 1]})")
        start += count
    if start != operators:
        raise CaptureError(f"{origin}: its stages hold {start} operators, the graph '{graph.get('name')}' has "
                           f"{operators}")


# ---------------------------------------------------------------------------------------------------
# Values: tensors, and structures of them

def _key_name(key):
    node, path = key
    return node.name + "".join(f"[{step}]" for step in path)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


# ---------------------------------------------------------------------------------------------------
# Cutting

class _Cutter:
    """The traced model and what is known of its nodes; builds the GraphModule of any run of them."""

    def __init__(self, graph_module, tracer, model_inputs, kept_whole, inplace_nodes, parameter_names):
        self.gm = graph_module
        self.values = tracer.values
        self.metadata = tracer.metadata_nodes
        self.model_inputs = model_inputs
        self.kept_whole = kept_whole
        self.inplace_nodes = inplace_nodes
        self.parameter_names = parameter_names  # id(tensor) -> its state_dict names in the model
        self.nodes = [n for n in graph_module.graph.nodes if n.op not in ("placeholder", "output")]
        self.output = next(n for n in graph_module.graph.nodes if n.op == "output")
        # Positions in the cost graph's order: the model's inputs first, then the other nodes; arguments
        # specialized to their defaults before all of them.
        inputs = [n for n in graph_module.graph.nodes if n in model_inputs]
        self.position = {n: i for i, n in enumerate(inputs + self.nodes)}
        for i, placeholder in enumerate(n for n in graph_module.graph.nodes
                                        if n.op == "placeholder" and n not in model_inputs):
            self.position[placeholder] = -1 - i
        self.position[self.output] = len(inputs) + len(self.nodes)
        self._data = {}
        self._scripted = {}
        self.needs_grad = self._needs_grad()

    def _needs_grad(self):
        """Nodes whose value depends on a parameter that requires a gradient."""
        result = set()
        for node in self.nodes:
            if node.op == "call_module":
                own = any(p.requires_grad for p in self.gm.get_submodule(node.target).parameters())
            elif node.op == "get_attr":
                own = isinstance(self.values.get(node), torch.Tensor) and self.values[node].requires_grad
            else:
                own = False
            if own or any(a in result for a in node.all_input_nodes):
                result.add(node)
        return result

    def draws_random(self, node):
        """Whether an operator draws random numbers: dropout (a module or a function) and the like."""
        if node.op == "call_module":
            return isinstance(self.gm.get_submodule(node.target), torch.nn.modules.dropout._DropoutNd)
        return node.op in ("call_function", "call_method") and draws_random_numbers(node.target)

    def keys(self, node):
        """The tensors a node's value holds: (node, path) per tensor leaf. Parameters are not handed over."""
        if node.op == "get_attr":
            return []
        return [(node, path) for path, leaf in _leaves(self.values.get(node)) if isinstance(leaf, torch.Tensor)]

    def tensor(self, key):
        return _at(self.values[key[0]], key[1])

    def describe(self, key):
        value = self.tensor(key)
        node = key[0]
        entry = {"name": _key_name(key), "shape": list(value.shape), "dtype": _dtype_name(value.dtype),
                 "requires_grad": bool(node in self.needs_grad and value.is_floating_point())}
        entry["model_input"] = node in self.model_inputs
        return entry

    def depends_on_data(self, node):
        """Whether a value that is not a tensor was computed from tensor data (then it cannot be baked in)."""
        if node not in self._data:
            if node.op in ("placeholder", "get_attr") or node in self.metadata:
                self._data[node] = False
            else:
                self._data[node] = any(self.keys(a) or self.depends_on_data(a) for a in node.all_input_nodes)
        return self._data[node]

    def reads(self, members, consumers):
        """The tensors `consumers` read from nodes outside `members`, in the model's order."""
        found = set()
        for consumer in consumers:
            for read in consumer.all_input_nodes:
                if read not in members:
                    found.update(self.keys(read))
        return sorted(found, key=self.order)

    def order(self, key):
        return self.position[key[0]], tuple(str(step) for step in key[1])

    def build(self, members, inputs, outputs, what):
        """A GraphModule computing `members` (fx nodes, in order) from `inputs` (keys) to `outputs` (keys)."""
        graph = fx.Graph()
        placeholders = {}
        used_names = set()
        for key in inputs:
            name = re.sub(r"\W", "_", _key_name(key))
            while name in used_names:
                name += "_"
            used_names.add(name)
            placeholders[key] = graph.placeholder(name)
        member_set = set(members)
        env = {}

        # The received values a random operator of this module depends on, through the module's operators.
        random_reads, pending, seen = set(), [n for n in members if self.draws_random(n)], set()
        while pending:
            for read in pending.pop().all_input_nodes:
                if read not in member_set:
                    random_reads.add(read)
                elif read not in seen:
                    seen.add(read)
                    pending.append(read)

        def laid_out(placeholder, value):
            """A received tensor with the strides it had in the model. Dropout draws its mask in the memory
            order of its input (empty_like keeps the strides), and a runtime receives a transposed view (the
            output of nn.MultiheadAttention with batch_first) as a contiguous tensor: dropout on it, or on
            what elementwise operators make of it, drew other masks than the model's.
            x.permute(order).contiguous().permute(inverse) lays it out as it was, copying only what arrived
            otherwise."""
            layout = _permuted_layout(value)
            if layout is None:
                return placeholder
            order, inverse = layout
            dense = graph.call_method("contiguous", (graph.call_method("permute", (placeholder, *order)),))
            return graph.call_method("permute", (dense, *inverse))

        def reference(old):
            if old in env:
                return env[old]
            if old.op == "get_attr":  # a parameter, buffer or constant: this module holds it too
                env[old] = graph.get_attr(old.target)
                return env[old]
            value = self.values.get(old)
            leaves = _leaves(value)
            if not any(isinstance(leaf, torch.Tensor) for _, leaf in leaves):
                if self.depends_on_data(old):
                    raise CaptureError(f"{what}: '{old.name}' is a {type(value).__name__} computed from tensor data "
                                       "in an earlier module, which cannot be handed over; move the cut")
                env[old] = value  # shape arithmetic and constants: baked in
                return value
            if old in random_reads:  # what a random operator depends on: laid out as in the model
                env[old] = _rebuild(value, (), lambda path: laid_out(placeholders[(old, path)], _at(value, path)))
            elif isinstance(value, torch.Tensor):
                env[old] = placeholders[(old, ())]
            else:
                env[old] = _rebuild(value, (), lambda path: placeholders[(old, path)])
            return env[old]

        for node in members:
            if node.op in ("get_attr", "placeholder"):
                continue  # materialized where it is read; a model input enters as an input
            if node in self.inplace_nodes:
                target = node.args[0]
                if target not in member_set:
                    raise CaptureError(f"{what}: '{node.name}' modifies '{target.name}' in place, which an earlier "
                                       "module computes (and another view of it is read later); move the cut")
            env[node] = graph.node_copy(node, reference)
        results = []
        for key in outputs:
            if key in placeholders:
                results.append(placeholders[key])
                continue
            node, path = key
            result = env[node]
            for step in path:
                result = graph.call_function(operator.getitem, (result, step)) if isinstance(result, fx.Node) \
                    else result[step]
            results.append(result)
        graph.output(tuple(results))
        module = fx.GraphModule(self.gm, graph, "Chunk")
        for node in graph.nodes:  # a module kept whole (data-dependent control flow) is scripted, not traced
            if node.op == "call_module" and node.target in self.kept_whole:
                self._script_into(module, node.target, what)
        return module

    def _script_into(self, module, target, what):
        if target not in self._scripted:
            original = self.gm.get_submodule(target)
            try:
                self._scripted[target] = torch.jit.script(original)
            except Exception as error:  # TorchScript's frontend raises many kinds
                first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise CaptureError(f"{what}: '{target}' ({type(original).__name__}) has data-dependent control flow "
                                   f"(kept whole by the capture) and torch.jit.script cannot compile it: "
                                   f"{first}") from None
        parent, _, leaf = target.rpartition(".")
        setattr(module.get_submodule(parent) if parent else module, leaf, self._scripted[target])

    def state(self, module):
        """Parameters and buffers of a built module: names in it, and the model's state_dict names."""
        def entries(named, kind):
            result = []
            for name, tensor in named:
                original = self.parameter_names.get(id(tensor), [])
                entry = {"name": name, "shape": list(tensor.shape), "dtype": _dtype_name(tensor.dtype)}
                entry["state_dict"] = original
                entry["_id"] = id(tensor)
                if kind == "parameter":
                    entry["requires_grad"] = tensor.requires_grad
                result.append(entry)
            return result
        return entries(module.named_parameters(), "parameter"), entries(module.named_buffers(), "buffer")


def _permuted_layout(value):
    """(order, inverse) when `value` is a tensor laid out densely in another order than its dimensions'
    (a transposed view): x.permute(order).contiguous().permute(inverse) lays any tensor of its shape out
    as it is; None for a contiguous tensor and any other."""
    if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.is_contiguous():
        return None
    order = sorted(range(value.dim()), key=lambda d: -value.stride(d))
    inverse = [order.index(d) for d in range(value.dim())]
    probe = torch.empty(value.shape, device="meta").permute(order).contiguous().permute(inverse)
    if any(a != b for a, b, size in zip(probe.stride(), value.stride(), value.shape) if size > 1):
        return None
    return order, inverse


def _rebuild(value, path, placeholder):
    """The structure of `value` with its tensors replaced by placeholders (a tuple or list in fx args)."""
    if isinstance(value, torch.Tensor):
        return placeholder(path)
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        items = [_rebuild(item, path + (i,), placeholder) for i, item in enumerate(value)]
        return type(value)(items) if type(value) in (tuple, list) else tuple(items)
    if isinstance(value, dict):
        return {key: _rebuild(item, path + (key,), placeholder) for key, item in value.items()}
    return value


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


def _draws_random_numbers(script_module):
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


def _updates_buffers(module):
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


def _trace(module, example, what):
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


# ---------------------------------------------------------------------------------------------------
# The loss, as a scripted module: forward(outputs, target) -> scalar, as the capture applied it

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


_LOSS_MODULES = {"cross_entropy": CrossEntropyLoss, "mse": MseLoss, "none": OutputIsLoss}


# ---------------------------------------------------------------------------------------------------
# Pieces: runs of one memory decision

def _pieces(chunk_nodes, names_to_layer, recompute, offload):
    """Maximal runs of operators with the same decision; a recompute run ends at a layer boundary too
    (the partitioner's recompute segments)."""
    runs = []
    for node in chunk_nodes:
        if node.name in recompute:
            key = ("recompute", names_to_layer.get(node.name))
        elif node.name in offload:
            key = ("offload", None)
        else:
            key = ("keep", None)
        if runs and runs[-1][0] == key:
            runs[-1][1].append(node)
        else:
            runs.append((key, [node]))
    return runs


# ---------------------------------------------------------------------------------------------------
# export()

def export(graph, plan, out_dir, *, dtype=None, model=None, check=True, tolerance=None):
    """Cuts the captured model of `graph` (a cost graph written by capture: a path or the dict) at the
    stage boundaries of `plan` (a partition plan: a path or the dict) into TorchScript modules written
    to `out_dir` with `manifest.json` (docs/export.md), and returns the manifest.

    `dtype` ("float64", ...) converts the model and its floating inputs before tracing (default: as
    captured). `model` exports that instance (copied) instead of rebuilding it from the capture record's
    FILE.py:FACTORY after torch.manual_seed(0). `check` runs the saved chunks, chained, against the
    model and raises when they disagree by more than `tolerance` (relative to the larger of 1 and the
    output's largest magnitude; default: CHECK_EPSILONS machine epsilons of the type, at most 1e-2).
    Bad input raises one CaptureError."""
    graph, graph_origin = _read_json(graph, "graph")
    _check_graph(graph, graph_origin, need_source=model is None)
    plan, plan_origin = _read_json(plan, "plan")
    _check_plan(plan, plan_origin, graph)
    record = graph["capture"]
    if dtype is not None and (dtype not in DTYPES or not DTYPES[dtype].is_floating_point):
        raise CaptureError(f"unknown floating-point data type '{dtype}'; known: "
                           f"{', '.join(n for n, t in DTYPES.items() if t.is_floating_point)}")
    with torch.random.fork_rng(devices=[]), _torchscript():
        return _export(graph, graph_origin, plan, plan_origin, record, out_dir, dtype, model, check, tolerance)


@contextlib.contextmanager
def _torchscript():
    """TorchScript warns that it is deprecated at every call in PyTorch 2.x; the export uses it on purpose
    (docs/export.md, "Why TorchScript")."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=DeprecationWarning)
        yield


def _export(graph, graph_origin, plan, plan_origin, record, out_dir, dtype, model, check, tolerance):
    torch.manual_seed(SEED)
    model_given = model
    if model is None:
        model = build_model(record["file"], record["factory"])
    else:
        model = copy.deepcopy(model)  # its in-place flags and data type change
    inputs = [example_input(entry["shape"], entry.get("dtype", "float32"), seed)
              for seed, entry in enumerate(record["inputs"])]
    if dtype is not None:
        model = model.to(DTYPES[dtype])
        inputs = [x.to(DTYPES[dtype]) if x.is_floating_point() else x for x in inputs]
    model.train()
    initial = {name: tensor.detach().clone() for name, tensor in model.state_dict(keep_vars=True).items()}
    parameter_names = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        parameter_names.setdefault(id(tensor), []).append(name)

    graph_module, tracer, kept_whole = trace(model, inputs)
    loss = record.get("loss", "none")
    # The cost graph's operators: the model's inputs (capture.model_input_nodes), then every other node.
    operators = model_input_nodes(graph_module, inputs) + [n for n in graph_module.graph.nodes
                                                           if n.op not in ("placeholder", "output")]
    traced_names = [n.name for n in operators] + ([LOSS_NODE] if loss != "none" else [])
    graph_names = [n["name"] for n in graph["nodes"]]
    if traced_names != graph_names:
        where = next((i for i, (a, b) in enumerate(zip(graph_names, traced_names)) if a != b),
                     min(len(graph_names), len(traced_names)))
        captured = f"'{graph_names[where]}'" if where < len(graph_names) else "the end"
        now = f"'{traced_names[where]}'" if where < len(traced_names) else "the end"
        source = f"{record['file']}:{record['factory']}" if model_given is None else type(model).__name__
        raise CaptureError(f"{graph_origin}: {source} traced now differs from the "
                           f"captured graph at operator {where}: {captured} in the graph, {now} traced "
                           f"({len(graph_names)} and {len(traced_names)} operators); capture it again")
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    model_inputs = {node: index for index, node in enumerate(placeholders[:len(inputs)])}
    inplace_nodes = make_out_of_place(graph_module, tracer.values)
    cutter = _Cutter(graph_module, tracer, model_inputs, set(kept_whole), inplace_nodes, parameter_names)

    # Stage k holds operators [starts[k], starts[k + 1]) of the graph's order (the loss is the last one).
    starts = [0]
    for stage in plan["stages"]:
        starts.append(starts[-1] + stage["operators"])
    count = len(plan["stages"])
    input_keys = [key for node in model_inputs for key in cutter.keys(node)]
    output_nodes = [leaf for _, leaf in _leaves(cutter.output.args[0]) if isinstance(leaf, fx.Node)]
    output_keys = []
    for node in output_nodes:
        for key in cutter.keys(node):
            if key not in output_keys:
                output_keys.append(key)
    if not output_keys:
        raise CaptureError(f"{graph_origin}: the model returns no tensor")

    def crossing(k):
        """Tensors produced at or before stage k and read after it (by a later stage or as an output)."""
        end = starts[k + 1]
        found = set()
        for node in list(model_inputs) + operators:
            if cutter.position[node] >= end:
                continue
            for key in cutter.keys(node):
                if key in output_keys or any(cutter.position[user] >= end for user in node.users):
                    found.add(key)
        return sorted(found, key=cutter.order)

    os.makedirs(out_dir, exist_ok=True)
    manifest_path = os.path.join(out_dir, MANIFEST)
    if os.path.exists(manifest_path):  # never a manifest next to modules it does not describe
        os.remove(manifest_path)
    stamp_path = os.path.join(out_dir, STAMP)
    if os.path.exists(stamp_path):  # what `flexpipe train` made the earlier export from (export_stamp.h)
        os.remove(stamp_path)
    layer_of = {n["name"]: n.get("layer") for n in graph["nodes"]}
    chunks, modules_state, files = [], [], []
    boundary_in = input_keys
    for k, stage in enumerate(plan["stages"]):
        what = f"{plan_origin}: stage {k}"
        members = operators[starts[k]:min(starts[k + 1], len(operators))]
        boundary_out = crossing(k) if k < count - 1 else output_keys
        module = cutter.build(members, boundary_in, boundary_out, what)
        example = [cutter.tensor(key) for key in boundary_in]
        traced = _trace(module, example, what)
        file = f"stage_{k}.pt"
        parameters, buffers = cutter.state(module)
        modules_state.append((traced, parameters, buffers))
        files.append(file)
        first, last = graph["nodes"][starts[k]]["name"], graph["nodes"][starts[k + 1] - 1]["name"]
        relays = [key for key in boundary_in if key in boundary_out]
        chunk = {"index": k, "file": file, "operators": stage["operators"], "first": first, "last": last,
                 "inputs": [cutter.describe(key) for key in boundary_in],
                 "outputs": [cutter.describe(key) for key in boundary_out],
                 "relays": [_key_name(key) for key in relays],
                 "parameters": parameters, "buffers": buffers,
                 "random": _draws_random_numbers(traced), "updates_buffers": _updates_buffers(module),
                 "recompute": list(stage.get("recompute", [])), "offload": list(stage.get("offload", []))}
        if stage.get("offload_checkpoints"):
            chunk["offload_checkpoints"] = True
        decided = set(chunk["recompute"]) | set(chunk["offload"])
        decided.discard(LOSS_NODE)
        if decided:
            chunk["pieces"] = _export_pieces(cutter, members, boundary_out, layer_of,
                                             set(chunk["recompute"]), set(chunk["offload"]), k, what,
                                             modules_state, files)
        chunks.append(chunk)
        boundary_in = boundary_out

    # Parameters (buffers) held by several chunks are tied: their gradients add up (both move them).
    holders = {}
    for chunk in chunks:
        for entry in chunk["parameters"] + chunk["buffers"]:
            holders.setdefault(entry["_id"], set()).add(chunk["index"])
    for chunk in chunks:
        for entry in chunk["parameters"] + chunk["buffers"]:
            others = sorted(holders.get(entry["_id"], set()) - {chunk["index"]})
            if others:
                entry["tied_chunks"] = others
        for piece in chunk.get("pieces", []):
            for entry in piece["parameters"] + piece["buffers"]:
                entry.pop("_id", None)
    # The saved modules hold the model as built: tracing ran their forwards (BatchNorm statistics moved).
    with torch.no_grad():
        for name, tensor in model.state_dict(keep_vars=True).items():
            tensor.copy_(initial[name])
        for traced, parameters, buffers in modules_state:
            own = dict(traced.named_parameters())
            own.update(dict(traced.named_buffers()))
            for entry in parameters + buffers:
                if entry["state_dict"] and entry["name"] in own:
                    own[entry["name"]].copy_(initial[entry["state_dict"][0]])
    for (traced, _, _), file in zip(modules_state, files):
        torch.jit.save(traced, os.path.join(out_dir, file))
    for chunk in chunks:
        for entry in chunk["parameters"] + chunk["buffers"]:
            entry.pop("_id", None)

    loss_module = torch.jit.script(_LOSS_MODULES[loss]())
    torch.jit.save(loss_module, os.path.join(out_dir, "loss.pt"))
    final = output_keys
    target = None
    if loss == "cross_entropy":
        logits = cutter.tensor(final[0])
        target = {"shape": list(logits.shape[:-1]), "dtype": "int64"}
    elif loss == "mse":
        value = cutter.tensor(final[0])
        target = {"shape": list(value.shape), "dtype": _dtype_name(value.dtype)}
    floating = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    manifest = {
        "format": FORMAT, "version": VERSION,
        "graph": graph.get("name"), "graph_operators": len(graph["nodes"]),
        "model": {"file": record.get("file"), "factory": record.get("factory"),
                  "seed": SEED if model_given is None else None},
        "dtype": _dtype_name(floating),
        "inputs": [cutter.describe(key) for key in input_keys],
        "outputs": [cutter.describe(key) for key in output_keys],
        "chunks": chunks,
        "loss": {"kind": loss, "file": "loss.pt", "chunk": count - 1, "inputs": [_key_name(k) for k in final],
                 "target": target, "reduction": "mean" if loss in ("cross_entropy", "mse") else "sum"},
    }
    if kept_whole:
        manifest["scripted"] = sorted(kept_whole)
    if check:
        _check_against_model(manifest, out_dir, inputs, model, initial, tolerance)
    for stale in os.listdir(out_dir):  # modules of an earlier export into the same directory
        if _EXPORTED_FILE.fullmatch(stale) and stale not in files:
            os.remove(os.path.join(out_dir, stale))
    text = _json_text(manifest) + "\n"
    with open(manifest_path + ".partial", "w") as out:
        out.write(text)
    os.replace(manifest_path + ".partial", manifest_path)
    return manifest


def _json_text(value, indent=""):
    """JSON with every object or array that holds no object on one line: a tensor, a parameter per line."""
    def flat(v):
        return not isinstance(v, (dict, list)) or (
            all(flat(x) for x in (v.values() if isinstance(v, dict) else v))
            and not any(isinstance(x, dict) for x in (v.values() if isinstance(v, dict) else v)))
    if not isinstance(value, (dict, list)) or flat(value) or (
            isinstance(value, dict) and all(flat(x) for x in value.values()) and len(json.dumps(value)) <= 120):
        return json.dumps(value)
    inner = indent + " "
    if isinstance(value, list):
        return "[\n" + ",\n".join(inner + _json_text(x, inner) for x in value) + "\n" + indent + "]"
    return "{\n" + ",\n".join(f"{inner}{json.dumps(k)}: {_json_text(v, inner)}" for k, v in value.items()) + \
        "\n" + indent + "}"


def _export_pieces(cutter, members, chunk_outputs, layer_of, recompute, offload, k, what, modules_state, files):
    """The chunk as runs of one memory decision, each its own module: inputs from the chunk's inputs or
    earlier pieces, outputs what later pieces or the chunk's outputs read."""
    runs = _pieces([n for n in members if n.op != "placeholder"], layer_of, recompute, offload)
    pieces = []
    member_sets = [set(nodes) for _, nodes in runs]
    for index, ((decision, layer), nodes) in enumerate(runs):
        produced = {key for node in nodes for key in cutter.keys(node)}
        needed = set(chunk_outputs)
        for later in range(index + 1, len(runs)):
            needed.update(cutter.reads(member_sets[later], runs[later][1]))
        outputs = sorted(produced & needed, key=cutter.order)
        inputs = cutter.reads(member_sets[index], nodes)
        if not outputs:
            continue  # only parameters, shape arithmetic or dead code: nothing to hand on
        piece_what = f"{what}, piece {len(pieces)}"
        module = cutter.build(nodes, inputs, outputs, piece_what)
        traced = _trace(module, [cutter.tensor(key) for key in inputs], piece_what)
        file = f"stage_{k}_piece_{len(pieces)}.pt"
        parameters, buffers = cutter.state(module)
        modules_state.append((traced, parameters, buffers))
        files.append(file)
        piece = {"file": file, "memory": decision, "operators": len(nodes), "first": nodes[0].name,
                 "last": nodes[-1].name}
        if decision == "recompute":
            piece["layer"] = layer
        piece.update({"inputs": [cutter.describe(key) for key in inputs],
                      "outputs": [cutter.describe(key) for key in outputs],
                      "parameters": parameters, "buffers": buffers,
                      "random": _draws_random_numbers(traced), "updates_buffers": _updates_buffers(module)})
        pieces.append(piece)
    return pieces


# ---------------------------------------------------------------------------------------------------
# Running the saved modules (export's own check, and the tests)

def load(out_dir):
    """(manifest, {file: ScriptModule}) of an export directory."""
    manifest, origin = _read_json(os.path.join(out_dir, MANIFEST), "manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CaptureError(f"{origin}: not an export manifest (\"format\": \"{FORMAT}\")")
    return manifest, load_modules(manifest, out_dir, origin)


def load_modules(manifest, out_dir, origin=MANIFEST):
    """{file: ScriptModule} of every module a manifest names."""
    files = [chunk["file"] for chunk in manifest["chunks"]] + [manifest["loss"]["file"]]
    files += [piece["file"] for chunk in manifest["chunks"] for piece in chunk.get("pieces", [])]
    modules = {}
    for file in files:
        path = os.path.join(out_dir, file)
        if not os.path.isfile(path):
            raise CaptureError(f"{path}: no such file (named by {origin})")
        with _torchscript():
            modules[file] = torch.jit.load(path)
    return modules


def run_chunks(manifest, modules, inputs):
    """The model's outputs computed by the chunks in order, each fed its inputs by name, contiguous: as a
    runtime's transport delivers what another rank sent, whatever its strides were there."""
    values = {entry["name"]: x for entry, x in zip(manifest["inputs"], inputs)}
    for chunk in manifest["chunks"]:
        outputs = modules[chunk["file"]](*[values[entry["name"]].contiguous() for entry in chunk["inputs"]])
        values = {entry["name"]: y for entry, y in zip(chunk["outputs"], outputs)}
    return [values[entry["name"]] for entry in manifest["outputs"]]


# The check's default tolerance, in machine epsilons of the exported type, relative to the scale of the
# model's output (the larger of 1 and its largest magnitude): 2.3e-13 in float64, 1.2e-4 in float32.
# The chunks run the model's operators in the model's order with the same kernels, so a faithful export
# agrees exactly or to the last bits (0 on the eleven torchvision models docs/export.md names, cut in 4
# at 32x32, in float64, float32 and bfloat16); what may differ is a rounding TorchScript does otherwise
# (autodiff's dropout scales after multiplying), half an epsilon of the values involved, which later
# layers may amplify by orders of magnitude, not by a thousand. A wrong cut (a tensor missing, stale or
# swapped) differs by the order of the outputs themselves, far above it. In float16 and bfloat16, whose
# epsilons are 1e-3 and 8e-3, the product is capped at 1e-2 (the output's second digit).
CHECK_EPSILONS = 1024
_CHECK_CAP = 1e-2


def _check_against_model(manifest, out_dir, inputs, model, initial, tolerance=None):
    """The saved chunks, loaded and chained, against the model on the example inputs (the same seed, so
    the same dropout masks): twice, with gradients on, since TorchScript runs a module's first call as it
    was traced and optimizes it for the later ones, which are what the runtime runs."""
    modules = load_modules(manifest, out_dir)
    for call in range(2):
        torch.manual_seed(SEED)
        expected = [leaf.detach() for _, leaf in _leaves(model(*inputs)) if isinstance(leaf, torch.Tensor)]
        torch.manual_seed(SEED)
        got = [y.detach() for y in run_chunks(manifest, modules, inputs)]
        with torch.no_grad():
            for name, tensor in model.state_dict(keep_vars=True).items():
                tensor.copy_(initial[name])
        for entry, a, b in zip(manifest["outputs"], got, expected):
            if a.shape != b.shape or a.dtype != b.dtype:
                difference = f"{_dtype_name(a.dtype)}{list(a.shape)} against {_dtype_name(b.dtype)}{list(b.shape)}"
            elif a.numel() == 0:
                continue
            elif not b.is_floating_point():
                if torch.equal(a, b):
                    continue
                difference = f"{int((a != b).sum())} of {a.numel()} elements differ"
            else:
                largest = float((a.double() - b.double()).abs().nan_to_num(nan=float("inf")).max())
                finite = b[b.isfinite()]
                scale = max(1.0, float(finite.abs().max()) if finite.numel() else 1.0)
                epsilon = torch.finfo(b.dtype).eps
                relative = tolerance if tolerance is not None else min(CHECK_EPSILONS * epsilon, _CHECK_CAP)
                allowed = relative * scale
                if largest <= allowed and bool((a.isnan() == b.isnan()).all()):
                    continue
                how = ("--export-tolerance" if tolerance is not None else
                       f"{CHECK_EPSILONS} x {_dtype_name(b.dtype)}'s epsilon {epsilon:.3g}"
                       + (f", at most {_CHECK_CAP:g}" if CHECK_EPSILONS * epsilon > _CHECK_CAP else ""))
                difference = (f"largest difference {largest:.3g}, tolerance {allowed:.3g}: {relative:.3g} ({how}) x "
                              f"the output's scale {scale:.3g}")
            when = "" if call == 0 else " from the second call on, once TorchScript optimized the chunks"
            raise CaptureError(f"the exported chunks compute '{entry['name']}' differently from the model{when} "
                               f"({difference}); if that is rounding, export with a larger --export-tolerance "
                               "(relative to the output's scale); otherwise please report this model")
