"""capture(): a user's nn.Module to the project's cost graph (docs/cost-graph.md, docs/capture.md),
with one node per operator and an edge per tensor, measured on this machine."""
import copy
import platform

import torch
import torch.fx as fx

from . import formulas
from .calling import call_model, split_named
from .counted_flops import counted_costs
from .errors import CaptureError, where
from .losses import apply_loss
from .measure import LOSS_NODE, PassTimes, captured_floating, saved_storages, time_loss, time_operator
from .options import CaptureOptions
from .out_of_place import make_out_of_place, mutated_input
from .tracers import trace_model
from .tracing import model_input_nodes
from .values import leaves as _leaves

PASSES = ("forward", "backward_input", "backward_weight")


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_name():
    threads = torch.get_num_threads()
    return f"{_cpu_name()}, {threads} thread{'' if threads == 1 else 's'} (PyTorch {torch.__version__}, CPU)"


def _at_reference(polynomial_json, batch):
    if isinstance(polynomial_json, dict):
        return polynomial_json.get("fixed", 0) + batch * polynomial_json.get("per_sample", 0)
    return polynomial_json or 0


def effective_rates(nodes, batch):
    """The rates this machine reached (per ms): FLOPs over time of the compute-bound operators (more than
    10 FLOPs per byte moved), bytes over time of the others. Rough, as any roofline; the times
    themselves are measured and scale by the power rule."""
    flops = flop_time = moved = byte_time = 0.0
    for node in nodes:
        forward = node["forward"]
        f = _at_reference(forward.get("flops", 0), batch)
        b = _at_reference(forward.get("bytes", 0), batch)
        if forward["time"] <= 0 or (f == 0 and b == 0):
            continue
        if f > 10 * b:
            flops, flop_time = flops + f, flop_time + forward["time"]
        elif b > 0:
            moved, byte_time = moved + b, byte_time + forward["time"]
    flop_rate = flops / flop_time if flop_time else 1e9
    byte_rate = moved / byte_time if byte_time else 1e8
    return round(flop_rate), round(byte_rate)


def _doubled_batch(inputs):
    return [torch.cat([x, x]) if isinstance(x, torch.Tensor) and x.dim() > 0 else x for x in inputs]


def _batch_size(inputs):
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            return x.shape[0]
    raise CaptureError("no input has a batch dimension: the first dimension of an input is its micro-batch")


class _Polynomial:
    """A quantity seen at micro-batch sizes b0 and b1: fixed + per_sample * b."""

    def __init__(self, at_reference, at_double, reference_batch):
        b0, q0, q1 = reference_batch, float(at_reference), float(at_double)
        per_sample = (q1 - q0) / b0
        fixed = q0 - per_sample * b0
        if per_sample < 0:
            per_sample, fixed = 0.0, q0
        elif fixed < 0:
            per_sample, fixed = q0 / b0, 0.0
        self.fixed, self.per_sample = fixed, per_sample

    def json(self):
        def number(x):
            return int(round(x)) if abs(x - round(x)) < 1e-6 else x
        if self.per_sample == 0:
            return number(self.fixed)
        return {"fixed": number(self.fixed), "per_sample": number(self.per_sample)} if self.fixed else {
            "per_sample": number(self.per_sample)}


def _block_of(model, path):
    """The layer an operator belongs to: the first module on its path that is one of a stack of
    like blocks (ResNet's `layer1.0`, ViT's `encoder.layers.encoder_layer_0`, `layers.3`), or None."""
    parts = path.split(".") if path else []
    for depth in range(1, len(parts) + 1):
        parent = model.get_submodule(".".join(parts[:depth - 1])) if depth > 1 else model
        if isinstance(parent, (torch.nn.Sequential, torch.nn.ModuleList)):
            kinds = {type(child) for child in parent.children()}
            if len(parent) >= 2 and len(kinds) == 1:
                return ".".join(parts[:depth])
    return None


def _layers(model, nodes, module_of):
    """Layer name per node: its block, or `stem` before the first block and `head` after the last."""
    blocks = [_block_of(model, module_of.get(n, "")) for n in nodes]
    first = next((i for i, b in enumerate(blocks) if b), None)
    last = max((i for i, b in enumerate(blocks) if b), default=None)
    names = []
    for i, block in enumerate(blocks):
        if block:
            names.append(block)
        elif first is None or i < first:
            names.append("stem")
        elif i > last:
            names.append("head")
        else:  # between blocks: the block before it
            names.append(names[-1])
    return names


def _module_of_node(graph_module, node):
    return graph_module.get_submodule(node.target) if node.op == "call_module" else None


def _node_parameters(graph_module, node, values):
    if node.op == "call_module":
        return list(_module_of_node(graph_module, node).parameters())
    if node.op == "get_attr" and isinstance(values[node], torch.nn.Parameter):
        return [values[node]]
    return []


def _is_aten_operator(module):
    return getattr(module, "aten_operator", False)


def _node_buffers(graph_module, node, values):
    """[(name, tensor)] of the buffers and tensor constants an operator holds: a module's own (BatchNorm's
    running statistics), and those it reads through get_attr nodes (a mask or an index held as a buffer,
    a tensor the forward built from constants). They are what an exported chunk holding the operator
    holds besides its parameters: read, never trained."""
    found = []
    if node.op == "call_module":
        module = _module_of_node(graph_module, node)
        prefix = "" if _is_aten_operator(module) else f"{node.target}."  # an ATen operator's are the model's names
        found = [(prefix + name, tensor) for name, tensor in module.named_buffers()]
    for read in node.all_input_nodes:
        value = values.get(read)
        if read.op == "get_attr" and isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
            if all(name != read.target for name, _ in found):
                found.append((read.target, value))
    return found


def _tensor_inputs(node, values):
    return [values[a] for a in node.all_input_nodes if isinstance(values.get(a), torch.Tensor)]


def _attribute_saved(order, saved, feeds, layer_of):
    """Per node (saved bytes, shared bytes, {storage key: bytes} counted in the saved bytes): a storage
    several operators save is counted at the first; the very next operator, when it is fed by that one
    in the same layer, lists it as shared (the cost graph's shared_saved_bytes); any later one does not
    count it again."""
    seen = set()
    result = {}
    for index, name in enumerate(order):
        own, shared, counted = 0, 0, {}
        previous = order[index - 1] if index else None
        for key, size in saved.get(name, {}).items():
            if key not in seen:
                seen.add(key)
                own += size
                counted[key] = size
            elif (previous is not None and key in saved.get(previous, {}) and previous in feeds.get(name, ())
                  and layer_of[previous] == layer_of[name]):
                own += size
                shared += size
                counted[key] = size
        result[name] = (own, shared, counted)
    return result


def _saved_of_inputs(reader, producers, attributed, outputs, tensor_bytes):
    """Per producer: what `reader` counts in its saved bytes of the tensor it reads from it (the edge's
    saved_bytes), at most the tensor's bytes; a storage two inputs share is the first one's. With
    [reader] as the producers: what it counts of its own output."""
    counted = dict(attributed.get(reader, (0, 0, {}))[2])
    result = {}
    for producer in producers:
        keys = [key for key in outputs.get(producer, ()) if key in counted]
        result[producer] = min(tensor_bytes(producer), sum(counted.pop(key) for key in keys))
    return result


def _as_exported(model, graph_module, inputs, names, tracer):
    """The traced graph as the exported chunks run it: in-place operators out-of-place (out_of_place.py),
    so that what autograd saves is measured as the runtime will hold it (an in-place ReLU saves the
    tensor it received; its out-of-place twin a new one). Traced again from a copy of the model, whose
    modules' in-place flags change; the node names are the same."""
    def module_of(node):
        return graph_module.get_submodule(node.target)

    if not any(mutated_input(node, module_of) is not None for node in graph_module.graph.nodes):
        return graph_module
    _, copied, trace, _ = trace_model(copy.deepcopy(model), inputs, names, tracer)
    make_out_of_place(copied, trace.values)
    return copied


def _check_runs(model, inputs, names, loss):
    try:
        torch.manual_seed(0)
        output = call_model(model, inputs, names)
    except CaptureError:
        raise  # an input forward does not take
    except Exception as error:
        line = where(error.__traceback__)
        raise CaptureError(f"the inputs do not fit the model ({type(model).__name__}): {type(error).__name__}: "
                           f"{error}" + (f" at {line}" if line else "")) from None
    try:
        result = apply_loss(loss, output)
    except (TypeError, ValueError, RuntimeError, IndexError) as error:
        raise CaptureError(str(error)) from None
    if not isinstance(result, torch.Tensor) or result.dim() != 0:
        raise CaptureError("the loss must be a scalar tensor")


def capture(model, example_inputs, loss=None, *, source=None, time_operators=True, **options):
    """The cost graph (a JSON-ready dict) of `model` on `example_inputs` (tensors whose first dimension
    is the micro-batch: a list in forward's order, or a dict of forward's keyword arguments), ending with
    `loss` ("cross_entropy", "mse", "none"/None, or a callable) on the output (a ModelOutput's logits).
    `options` are CaptureOptions' other fields (options.py): `name`, the `tracer` ("auto", "fx",
    "export"), and the timing: medians of `repeats` runs after `warmup`, by the `clock` ("wall", or
    "cpu": this thread's CPU time, for a shared machine).
    `source` (file, factory, inputs) is recorded so that the model can be rebuilt.
    `time_operators=False` skips the timing (every time is 0, and the capture record says so) for checks
    that need only the structure and the memory."""
    options = CaptureOptions(loss="none" if loss is None else loss, **options)
    loss = options.loss
    timing = options.timing()
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"expected a torch.nn.Module, got {type(model).__name__}")
    inputs, names = split_named(example_inputs)
    model.train()
    _check_runs(model, inputs, names, loss)
    traced = _Traced(model, inputs, names, loss, options.tracer)
    seen_parameters = {}
    json_nodes, edges = [], []
    for n, layer in zip(traced.nodes, traced.layer_names):
        json_nodes.append(_operator_entry(traced, n, layer, seen_parameters, timing if time_operators else None))
        edges += traced.edges_into(n.name, n.all_input_nodes)
    if loss != "none":
        json_nodes.append(_loss_entry(traced, timing if time_operators else None))
        edges += traced.edges_into(LOSS_NODE, traced.output_node.all_input_nodes)
    return _document(traced, options, json_nodes, edges, source, time_operators)


class _Traced:
    """The model traced at the example micro-batch b and at 2b, and what the capture reads off the two:
    operators and their layers, what each saves for the backward, and their outputs' sizes, each as a
    polynomial in the micro-batch."""

    def __init__(self, model, inputs, names, loss, tracer):
        self.model, self.inputs, self.names, self.loss = model, inputs, names, loss
        self.batch = _batch_size(inputs)
        self.tracer_name, self.graph_module, self.tracer, self.kept_whole = trace_model(model, inputs, names, tracer)
        self.values = self.tracer.values
        self.values1 = {n.name: v for n, v in self.values.items()}
        # The model's inputs are nodes too (kind `input`, nothing to compute): a later stage that reads one
        # (a decoder its target, a skip from the image) receives it across every cut in between, as the
        # runtime relays it. The placeholders after them are arguments specialized to their defaults.
        self.model_inputs = model_input_nodes(self.graph_module, inputs)
        self.nodes = self.model_inputs + [n for n in self.graph_module.graph.nodes
                                          if n.op not in ("placeholder", "output")]
        self.output_node = next(n for n in self.graph_module.graph.nodes if n.op == "output")
        self._trace_doubled()
        order = [n.name for n in self.nodes] + ([LOSS_NODE] if loss != "none" else [])
        self.module_of = {n: self.tracer.module_of.get(n, "") for n in self.nodes}
        self.layer_names = _layers(model, self.nodes, self.module_of)
        layer_of = {n.name: layer for n, layer in zip(self.nodes, self.layer_names)}
        layer_of[LOSS_NODE] = "loss"
        feeds = {n.name: {a.name for a in n.all_input_nodes if self.produces(a)} for n in self.nodes}
        feeds[LOSS_NODE] = {a.name for a in self.output_node.all_input_nodes if self.produces(a)}
        self._attribute(order, feeds, layer_of, loss)
        # Which values training needs gradients of: those that depend on a parameter.
        self.needs_gradient = set()
        for n in self.nodes:
            if any(p.requires_grad for p in _node_parameters(self.graph_module, n, self.values)) or any(
                    a in self.needs_gradient for a in n.all_input_nodes):
                self.needs_gradient.add(n)
        # Buffers of another type than the captured floating one keep their size when the model trains in
        # another (as the saved tensors': measure.saved_storages).
        self.floating = captured_floating(model, inputs)
        self.floating_size = torch.empty(0, dtype=self.floating).element_size()

    def _trace_doubled(self):
        """The same trace at twice the micro-batch turns every byte and FLOP count into a polynomial."""
        self.doubled = _doubled_batch(self.inputs)
        try:
            _, self.graph_module2, tracer2, _ = trace_model(self.model, self.doubled, self.names, self.tracer_name)
            self.values2 = {n.name: tracer2.values[n] for n in self.graph_module2.graph.nodes if n in tracer2.values}
            if [n.name for n in self.graph_module2.graph.nodes] != [n.name for n in self.graph_module.graph.nodes]:
                raise CaptureError("the graph depends on the batch size")
        except CaptureError:
            self.graph_module2, self.values2 = None, None

    def _attribute(self, order, feeds, layer_of, loss):
        """What each operator saves, at b and at 2b (or twice b's when the graph depends on the batch)."""
        def as_exported(graph_module, inputs):
            return _as_exported(self.model, graph_module, inputs, self.names, self.tracer_name)

        saved, self.outputs, self.unscaled = saved_storages(as_exported(self.graph_module, self.inputs), self.inputs,
                                                            loss)
        self.attributed = _attribute_saved(order, saved, feeds, layer_of)
        if self.graph_module2 is not None:
            saved2, self.outputs2, self.unscaled2 = saved_storages(as_exported(self.graph_module2, self.doubled),
                                                                   self.doubled, loss)
            self.attributed2 = _attribute_saved(order, saved2, feeds, layer_of)
        else:
            self.outputs2, self.unscaled2 = None, set()
            self.attributed2 = {k: (2 * a, 2 * s, {}) for k, (a, s, _) in self.attributed.items()}

    def produces(self, node):
        """Whether a node an operator reads is one of the graph's: not an argument specialized away."""
        return node.op != "placeholder" or node in self.model_inputs

    def polynomial(self, at_reference, at_double):
        return _Polynomial(at_reference, at_double, self.batch)

    def saved(self, name):
        """The saved bytes of `name` and their shared part, each as (at b, at 2b)."""
        own, shared, _ = self.attributed.get(name, (0, 0, {}))
        own2, shared2, _ = self.attributed2.get(name, (0, 0, {}))
        return (own, own2), (shared, shared2)

    def saved_output(self, name):
        """The polynomial of what `name` counts in its saved bytes of its own output (a ReLU's)."""
        at1 = _saved_of_inputs(name, [name], self.attributed, self.outputs,
                               lambda a: formulas.tensor_bytes(self.values1[a]))[name]
        at2 = (_saved_of_inputs(name, [name], self.attributed2, self.outputs2,
                                lambda a: formulas.tensor_bytes(self.values2[a]))[name]
               if self.outputs2 is not None else 2 * at1)
        return self.polynomial(at1, at2)

    def unscaled_saved(self, name):
        """The polynomial of what `name` counts in its saved bytes in tensors not of the captured floating
        type, which keep their size when the model trains in another."""
        at1 = sum(b for key, b in self.attributed.get(name, (0, 0, {}))[2].items() if key in self.unscaled)
        at2 = (sum(b for key, b in self.attributed2.get(name, (0, 0, {}))[2].items() if key in self.unscaled2)
               if self.outputs2 is not None else 2 * at1)
        return self.polynomial(at1, at2)

    def tensor_bytes_of(self, node):
        """Bytes of a node's output as a polynomial in the micro-batch."""
        q0 = formulas.tensor_bytes(self.values1[node.name])
        q1 = formulas.tensor_bytes(self.values2[node.name]) if self.values2 is not None else 2 * q0
        return self.polynomial(q0, q1)

    def unscaled_output(self, node):
        """Whether a node's output is integers or booleans (token ids, a mask): its bytes keep their size when
        the model trains in another floating type, and a stage that receives it holds it in its own type
        (a floating tensor of another type, travelling in the training type, is held in that one)."""
        leaves = [leaf for _, leaf in _leaves(self.values1[node.name]) if isinstance(leaf, torch.Tensor)]
        return bool(leaves) and not any(leaf.is_floating_point() for leaf in leaves)

    def edges_into(self, reader, input_nodes):
        """The edges from what `reader` reads of the graph's nodes, each with the tensor's bytes and what
        `reader` saves of it."""
        producers = [a.name for a in input_nodes if self.produces(a)]
        at1 = _saved_of_inputs(reader, producers, self.attributed, self.outputs,
                               lambda a: formulas.tensor_bytes(self.values1[a]))
        at2 = (_saved_of_inputs(reader, producers, self.attributed2, self.outputs2,
                                lambda a: formulas.tensor_bytes(self.values2[a])) if self.outputs2 is not None else
               {a: 2 * b for a, b in at1.items()})
        edges = []
        for a in input_nodes:
            if not self.produces(a):
                continue
            edge = {"from": a.name, "to": reader, "bytes": self.tensor_bytes_of(a).json(),
                    "saved_bytes": self.polynomial(at1[a.name], at2[a.name]).json()}
            if self.unscaled_output(a):
                edge["unscaled"] = True
            elif self.other_floating_type(a):
                # It travels, and a receiving stage holds it, in the training type; what its reader saves is
                # a copy in its own type (Mixtral's float32 routing weights in a float64 model).
                edge["bytes"] = self.polynomial(self.values1[a.name].numel() * self.floating_size,
                                                self.values2[a.name].numel() * self.floating_size
                                                if self.values2 is not None else
                                                2 * self.values1[a.name].numel() * self.floating_size).json()
                edge["saved_bytes"] = 0
            edges.append(edge)
        return edges

    def other_floating_type(self, node):
        """Whether a node's output is one floating tensor of another type than the captured one."""
        value = self.values1[node.name]
        return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != self.floating


_POWER_SCALING = {"rule": "power", "batch_exponent": 1, "sequence_exponent": 0}


def _operator_entry(traced, n, layer, seen_parameters, timing):
    """The cost graph node of operator `n`: what it holds, its passes' times, FLOPs and bytes, what it
    saves and outputs. `seen_parameters` maps the parameters earlier operators hold to their names (a
    parameter held again is tied to the first); `timing` None: not timed."""
    graph_module, values = traced.graph_module, traced.values
    module = _module_of_node(graph_module, n)
    kind = "input" if n.op == "placeholder" else formulas.operator_name(n, module, values[n])
    parameters = _node_parameters(graph_module, n, values)
    new = [p for p in parameters if id(p) not in seen_parameters]
    tied = seen_parameters[id(parameters[0])] if parameters and not new else None
    for p in new:
        seen_parameters[id(p)] = n.name
    entry = {"name": n.name, "kind": kind, "layer": layer}
    count = sum(p.numel() for p in new)
    if count:
        entry["parameters"] = count
    if tied:
        entry["tied_to"] = tied
    buffers = _node_buffers(graph_module, n, values)
    if buffers:
        entry["buffers"] = [dict({"name": name, "bytes": tensor.numel() * tensor.element_size()},
                                 **({"unscaled": True} if tensor.dtype != traced.floating else {}))
                            for name, tensor in buffers]
    entry["scaling"] = dict(_POWER_SCALING)
    parameter_bytes = sum(p.numel() * p.element_size() for p in parameters)

    def costs_at(vals, graph_module):
        if _is_aten_operator(module):  # specialized to its batch: the trace at that batch's own
            return counted_costs(graph_module.get_submodule(n.target), [vals[a.name] for a in n.args], parameter_bytes)
        node_inputs = [vals[a.name] for a in n.all_input_nodes if isinstance(vals.get(a.name), torch.Tensor)]
        return formulas.costs(kind, n, module, node_inputs, vals[n.name], parameter_bytes)

    known = costs_at(traced.values1, traced.graph_module)
    times = PassTimes()
    if timing is not None and n.op != "placeholder" and isinstance(values[n], (torch.Tensor, tuple, list)) and \
            formulas.tensor_bytes(values[n]):
        times = time_operator(n, module, values, parameters, lambda a: a in traced.needs_gradient, timing)
    if known is None:
        note = f"FLOPs unknown ({kind}): measured time only"
        if traced.module_of[n] in traced.kept_whole and n.op == "call_module":
            note = f"kept whole, could not be traced: {traced.kept_whole[traced.module_of[n]]}; " + note
        entry["note"] = note
    known2 = costs_at(traced.values2, traced.graph_module2) if traced.values2 is not None and known is not None else None
    for pass_name in PASSES:
        entry[pass_name] = _pass_entry(traced, times, pass_name, known, known2)
    saved, shared = traced.saved(n.name)
    if any(saved):
        entry["saved_bytes"] = traced.polynomial(*saved).json()
        if not count and not tied:  # without weights, what I needs is all W would
            entry["freed_by_input"] = traced.polynomial(*saved).json()
    if any(shared):
        entry["shared_saved_bytes"] = traced.polynomial(*shared).json()
    for key, part in (("unscaled_saved_bytes", traced.unscaled_saved), ("saved_output_bytes", traced.saved_output)):
        if amount := part(n.name).json():
            entry[key] = amount
    output_bytes = traced.tensor_bytes_of(n)
    if output_bytes.fixed or output_bytes.per_sample:
        entry["output_bytes"] = output_bytes.json()
    return entry


def _pass_entry(traced, times, pass_name, known, known2):
    """One pass of an operator: its time, and its FLOPs and bytes where the formulas know them."""
    entry = {"time": round(getattr(times, pass_name), 6)}
    if known is not None:
        f1 = known2.flops[pass_name] if known2 else 2 * known.flops[pass_name]
        b1 = known2.bytes[pass_name] if known2 else 2 * known.bytes[pass_name]
        flops = traced.polynomial(known.flops[pass_name], f1).json()
        moved = traced.polynomial(known.bytes[pass_name], b1).json()
        if flops:
            entry["flops"] = flops
        if moved:
            entry["bytes"] = moved
    return entry


def _loss_entry(traced, timing):
    """The loss as the graph's last node; `timing` None: not timed."""
    loss = traced.loss
    output_arg = traced.output_node.args[0]
    output_value = traced.values[output_arg] if isinstance(output_arg, fx.Node) else None
    loss_kind = loss if isinstance(loss, str) else getattr(loss, "__name__", "loss")
    logits = output_value if isinstance(output_value, torch.Tensor) else None
    times = time_loss(loss, output_value, timing) if timing is not None else PassTimes()
    entry = {"name": LOSS_NODE, "kind": loss_kind, "layer": "loss", "scaling": dict(_POWER_SCALING)}
    known = formulas.loss_costs(loss_kind, logits) if logits is not None else None
    for pass_name in PASSES:
        pass_entry = {"time": round(getattr(times, pass_name), 6)}
        if known is not None and known.flops[pass_name]:
            pass_entry["flops"] = {"per_sample": known.flops[pass_name] / traced.batch}
            pass_entry["bytes"] = {"per_sample": known.bytes[pass_name] / traced.batch}
        entry[pass_name] = pass_entry
    saved, _ = traced.saved(LOSS_NODE)
    if any(saved):
        entry["saved_bytes"] = traced.polynomial(*saved).json()
        entry["freed_by_input"] = entry["saved_bytes"]
        if unscaled := traced.unscaled_saved(LOSS_NODE).json():
            entry["unscaled_saved_bytes"] = unscaled
    entry["output_bytes"] = 4
    return entry


def _document(traced, options, json_nodes, edges, source, time_operators):
    """The cost graph document around its nodes and edges: layers, hardware, the capture record."""
    loss, inputs = options.loss, traced.inputs
    layer_list = []
    for layer in traced.layer_names + (["loss"] if loss != "none" else []):
        if all(entry["name"] != layer for entry in layer_list):
            layer_list.append({"name": layer, "role": "loss" if layer == "loss" else "other"})
    flop_rate, byte_rate = effective_rates(json_nodes, traced.batch)
    document = {
        "format": "flexpipe-cost-graph", "version": 1,
        "name": options.name or type(traced.model).__name__,
        "time_unit": "ms",
        "reference": {"microbatch_size": traced.batch, "seq_len": 1},
        "hardware": {"name": hardware_name(), "flop_rate": flop_rate, "byte_rate": byte_rate},
        "capture": {
            "inputs": [dict({"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")},
                            **({"name": name} if name is not None else {}))
                       for x, name in zip(inputs, traced.names)],
            "tracer": traced.tracer_name,
            "dtype": str(traced.floating).replace("torch.", ""),
            "loss": loss if isinstance(loss, str) else "custom",
            "threads": torch.get_num_threads(), "warmup": options.warmup,
            "repeats": options.repeats if time_operators else 0,
            "clock": options.clock,
            "torch": torch.__version__,
        },
        "layers": layer_list,
        "nodes": json_nodes,
        "edges": edges,
    }
    if source:
        document["capture"].update(source)
    if traced.kept_whole:
        document["capture"]["kept_whole"] = [{"module": m, "reason": r} for m, r in traced.kept_whole.items()]
    return document
