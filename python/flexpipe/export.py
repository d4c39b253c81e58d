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
import copy
import operator
import os
import re

import torch
import torch.fx as fx

from .calling import call_model
from .errors import CaptureError
# load and run_chunks are this module's too (`from flexpipe.export import load`); the check below calls
# run_chunks through this module, as the tests replace it here.
from .exported import FORMAT, MANIFEST, VERSION, load, load_modules, manifest_text, run_chunks, torchscript  # noqa: F401
from .loading import DTYPES, build_model, example_input, read_json
from .losses import LOSSES, loss_module, reduction, target_of
from .measure import LOSS_NODE
from .out_of_place import make_out_of_place
from .scripting import script_draws_random_numbers, trace_script, updates_buffers
from .tracers import trace_model
from .tracing import model_input_nodes
from .values import at as _at, leaves as _leaves

STAMP = "made-from.checksum"  # written by `flexpipe train` after exporting, removed by every export
_EXPORTED_FILE = re.compile(r"stage_\d+(_piece_\d+)?\.pt")
SEED = 0  # torch.manual_seed before the factory runs: the exported weights are the seeded model's


# ---------------------------------------------------------------------------------------------------
# Reading the inputs

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
        # The model's inputs and what the loss reads travel as they are (the data, the loss's own module).
        self.natural_keys = {key for node in [*model_inputs, *self.output.all_input_nodes] for key in self.keys(node)}
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

    def keys(self, node):
        """The tensors a node's value holds: (node, path) per tensor leaf. Parameters are not handed over."""
        if node.op == "get_attr":
            return []
        return [(node, path) for path, leaf in _leaves(self.values.get(node)) if isinstance(leaf, torch.Tensor)]

    def tensor(self, key):
        return _at(self.values[key[0]], key[1])

    def layout(self, key):
        """(order, inverse) when a tensor is handed from module to module in its memory order: a transposed
        view (the output of nn.MultiheadAttention with batch_first, queries after a rotary embedding) leaves
        as x.permute(order), dense, and arrives as that permuted back, with the strides it had in the
        model, copying nothing. A runtime hands tensors on dense: otherwise they would arrive laid out
        otherwise, dropout on them would draw other masks than the model's (it draws in its input's memory
        order), and the model's views of them would fail. The loss's inputs stay as they are."""
        return None if key in self.natural_keys else _permuted_layout(self.tensor(key))

    def handed_on(self, key):
        """A tensor as a module receives it: in its memory order where it has a layout (layout())."""
        layout = self.layout(key)
        return self.tensor(key) if layout is None else self.tensor(key).permute(layout[0])

    def describe(self, key):
        value = self.tensor(key)
        node = key[0]
        layout = self.layout(key)
        shape = list(value.shape) if layout is None else [value.shape[d] for d in layout[0]]
        entry = {"name": _key_name(key), "shape": shape, "dtype": _dtype_name(value.dtype),
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

        def received(key):
            """A tensor that arrives in its memory order (layout()): permuted back to the model's strides, a view."""
            layout = self.layout(key)
            return placeholders[key] if layout is None else \
                graph.call_method("permute", (placeholders[key], *layout[1]))

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
            env[old] = received((old, ())) if isinstance(value, torch.Tensor) else \
                _rebuild(value, (), lambda path: received((old, path)))
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
            layout = self.layout(key)
            results.append(result if layout is None else graph.call_method("permute", (result, *layout[0])))
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
    graph, graph_origin = read_json(graph, "graph")
    _check_graph(graph, graph_origin, need_source=model is None)
    plan, plan_origin = read_json(plan, "plan")
    _check_plan(plan, plan_origin, graph)
    record = graph["capture"]
    if dtype is not None and (dtype not in DTYPES or not DTYPES[dtype].is_floating_point):
        raise CaptureError(f"unknown floating-point data type '{dtype}'; known: "
                           f"{', '.join(n for n, t in DTYPES.items() if t.is_floating_point)}")
    with torch.random.fork_rng(devices=[]), torchscript():
        return _export(graph, graph_origin, plan, plan_origin, record, out_dir, dtype, model, check, tolerance)


def _export(graph, graph_origin, plan, plan_origin, record, out_dir, dtype, model, check, tolerance):
    torch.manual_seed(SEED)
    model_given = model
    model, inputs, names = _model_and_inputs(record, model, dtype)
    initial = {name: tensor.detach().clone() for name, tensor in model.state_dict(keep_vars=True).items()}
    parameter_names = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        parameter_names.setdefault(id(tensor), []).append(name)

    _, graph_module, tracer, kept_whole = trace_model(model, inputs, names, record.get("tracer", "fx"))
    loss = record.get("loss", "none")
    # The cost graph's operators: the model's inputs (capture.model_input_nodes), then every other node.
    operators = model_input_nodes(graph_module, inputs) + [n for n in graph_module.graph.nodes
                                                           if n.op not in ("placeholder", "output")]
    source = f"{record['file']}:{record['factory']}" if model_given is None else type(model).__name__
    _check_same_operators(graph, graph_origin, operators, loss, source)
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    model_inputs = {node: index for index, node in enumerate(placeholders[:len(inputs)])}
    inplace_nodes = make_out_of_place(graph_module, tracer.values)
    cutter = _Cutter(graph_module, tracer, model_inputs, set(kept_whole), inplace_nodes, parameter_names)
    boundaries = _Boundaries(cutter, model_inputs, operators, plan, graph_origin)

    _clear_earlier_export(out_dir)
    chunks, modules_state, files = _export_chunks(cutter, boundaries, graph, plan, plan_origin)
    _tie_shared_state(chunks)
    _save_modules(model, initial, modules_state, files, out_dir)
    torch.jit.save(torch.jit.script(loss_module(loss)), os.path.join(out_dir, "loss.pt"))
    final = boundaries.output_keys
    target = target_of(loss, cutter.tensor(final[0]))
    floating = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    manifest = {
        "format": FORMAT, "version": VERSION,
        "graph": graph.get("name"), "graph_operators": len(graph["nodes"]),
        "model": {"file": record.get("file"), "factory": record.get("factory"),
                  "seed": SEED if model_given is None else None},
        "dtype": _dtype_name(floating),
        "inputs": [cutter.describe(key) for key in boundaries.input_keys],
        "outputs": [cutter.describe(key) for key in final],
        "chunks": chunks,
        "loss": {"kind": loss, "file": "loss.pt", "chunk": boundaries.count - 1,
                 "inputs": [_key_name(k) for k in final],
                 "target": {"shape": target[0], "dtype": _dtype_name(target[1])} if target else None,
                 "reduction": reduction(loss)},
    }
    if kept_whole:
        manifest["scripted"] = sorted(kept_whole)
    if check:
        _check_against_model(manifest, out_dir, inputs, names, model, initial, tolerance)
    for stale in os.listdir(out_dir):  # modules of an earlier export into the same directory
        if _EXPORTED_FILE.fullmatch(stale) and stale not in files:
            os.remove(os.path.join(out_dir, stale))
    manifest_path = os.path.join(out_dir, MANIFEST)
    with open(manifest_path + ".partial", "w") as out:
        out.write(manifest_text(manifest) + "\n")
    os.replace(manifest_path + ".partial", manifest_path)
    return manifest


def _model_and_inputs(record, model, dtype):
    """The model (rebuilt from the capture record, or a copy of the one given), the example inputs, in
    `dtype` when one is asked for, in training mode, and their names (None: by position)."""
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
    return model, inputs, [entry.get("name") for entry in record["inputs"]]


def _check_same_operators(graph, graph_origin, operators, loss, source):
    """The model traced now must have the captured graph's operators, in its order."""
    traced_names = [n.name for n in operators] + ([LOSS_NODE] if loss != "none" else [])
    graph_names = [n["name"] for n in graph["nodes"]]
    if traced_names == graph_names:
        return
    where = next((i for i, (a, b) in enumerate(zip(graph_names, traced_names)) if a != b),
                 min(len(graph_names), len(traced_names)))
    captured = f"'{graph_names[where]}'" if where < len(graph_names) else "the end"
    now = f"'{traced_names[where]}'" if where < len(traced_names) else "the end"
    raise CaptureError(f"{graph_origin}: {source} traced now differs from the "
                       f"captured graph at operator {where}: {captured} in the graph, {now} traced "
                       f"({len(graph_names)} and {len(traced_names)} operators); capture it again")


class _Boundaries:
    """Where the plan cuts: stage k holds operators [starts[k], starts[k + 1]) of the graph's order (the
    loss is the last one); the model's input and output tensors, and those that cross each cut."""

    def __init__(self, cutter, model_inputs, operators, plan, graph_origin):
        self.cutter, self.model_inputs, self.operators = cutter, model_inputs, operators
        self.starts = [0]
        for stage in plan["stages"]:
            self.starts.append(self.starts[-1] + stage["operators"])
        self.count = len(plan["stages"])
        self.input_keys = [key for node in model_inputs for key in cutter.keys(node)]
        output_nodes = [leaf for _, leaf in _leaves(cutter.output.args[0]) if isinstance(leaf, fx.Node)]
        self.output_keys = []
        for node in output_nodes:
            for key in cutter.keys(node):
                if key not in self.output_keys:
                    self.output_keys.append(key)
        if not self.output_keys:
            raise CaptureError(f"{graph_origin}: the model returns no tensor")

    def members(self, k):
        return self.operators[self.starts[k]:min(self.starts[k + 1], len(self.operators))]

    def crossing(self, k):
        """Tensors produced at or before stage k and read after it (by a later stage or as an output)."""
        if k == self.count - 1:
            return self.output_keys
        end = self.starts[k + 1]
        found = set()
        for node in list(self.model_inputs) + self.operators:
            if self.cutter.position[node] >= end:
                continue
            for key in self.cutter.keys(node):
                if key in self.output_keys or any(self.cutter.position[user] >= end for user in node.users):
                    found.add(key)
        return sorted(found, key=self.cutter.order)


def _clear_earlier_export(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    manifest_path = os.path.join(out_dir, MANIFEST)
    if os.path.exists(manifest_path):  # never a manifest next to modules it does not describe
        os.remove(manifest_path)
    stamp_path = os.path.join(out_dir, STAMP)
    if os.path.exists(stamp_path):  # what `flexpipe train` made the earlier export from (export_stamp.h)
        os.remove(stamp_path)


def _export_chunks(cutter, boundaries, graph, plan, plan_origin):
    """The manifest's chunks, each traced (with its pieces where the plan recomputes or offloads), with
    (traced module, parameters, buffers) and the file of each module, in the order they are written."""
    layer_of = {n["name"]: n.get("layer") for n in graph["nodes"]}
    starts = boundaries.starts
    chunks, modules_state, files = [], [], []
    boundary_in = boundaries.input_keys
    for k, stage in enumerate(plan["stages"]):
        what = f"{plan_origin}: stage {k}"
        members = boundaries.members(k)
        boundary_out = boundaries.crossing(k)
        module = cutter.build(members, boundary_in, boundary_out, what)
        example = [cutter.handed_on(key) for key in boundary_in]
        traced = trace_script(module, example, what)
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
                 "random": script_draws_random_numbers(traced), "updates_buffers": updates_buffers(module),
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
    return chunks, modules_state, files


def _tie_shared_state(chunks):
    """Parameters (buffers) held by several chunks are tied: their gradients add up (both move them)."""
    holders = {}
    for chunk in chunks:
        for entry in chunk["parameters"] + chunk["buffers"]:
            holders.setdefault(entry["_id"], set()).add(chunk["index"])
    for chunk in chunks:
        for entry in chunk["parameters"] + chunk["buffers"]:
            others = sorted(holders.get(entry["_id"], set()) - {chunk["index"]})
            if others:
                entry["tied_chunks"] = others
    for chunk in chunks:  # the ids were the tensors': nothing a manifest states
        for entry in chunk["parameters"] + chunk["buffers"] + [e for piece in chunk.get("pieces", [])
                                                               for e in piece["parameters"] + piece["buffers"]]:
            entry.pop("_id", None)


def _save_modules(model, initial, modules_state, files, out_dir):
    """The traced modules written with the model's state as built: tracing ran their forwards (BatchNorm
    statistics moved)."""
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
        traced = trace_script(module, [cutter.handed_on(key) for key in inputs], piece_what)
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
                      "random": script_draws_random_numbers(traced), "updates_buffers": updates_buffers(module)})
        pieces.append(piece)
    return pieces


# ---------------------------------------------------------------------------------------------------
# Running the saved modules (export's own check, and the tests)

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


def _check_against_model(manifest, out_dir, inputs, names, model, initial, tolerance=None):
    """The saved chunks, loaded and chained, against the model on the example inputs (the same seed, so
    the same dropout masks): twice, with gradients on, since TorchScript runs a module's first call as it
    was traced and optimizes it for the later ones, which are what the runtime runs."""
    modules = load_modules(manifest, out_dir)
    for call in range(2):
        torch.manual_seed(SEED)
        expected = [leaf.detach() for _, leaf in _leaves(call_model(model, inputs, names))
                    if isinstance(leaf, torch.Tensor)]
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
