"""Tracing through torch.export: the model's ATen graph grouped back into the operators the partitioner
works with (a leaf module's call, or one functional op), for the models torch.fx cannot trace
(transformers 5 dropped its fx support; torch.export is its path to a graph).

The result has the shape of tracing.trace's: a GraphModule whose nodes are the operators, each a
`call_module` of a small GraphModule holding that operator's ATen nodes and the model's own parameter
and buffer objects (so the state_dict names, and a weight two operators share, stay the model's), the
model's tensor inputs as its placeholders, and its output the one tensor the loss reads."""
import contextlib
import io
import keyword
import logging
import operator

import torch
import torch.fx as fx

from .calling import keyword_inputs
from .errors import CaptureError, where


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class ExportFailed(CaptureError):
    """torch.export itself refused the model; the message is its reason (tracers.py says what to try)."""


class ExportTrace:
    """What tracing.CaptureTracer records that the capture and the export read, for a trace through
    torch.export: every node's concrete value, the module path of each operator (its layer) and which nodes
    only describe shapes (none here: the export specialized every shape)."""

    def __init__(self):
        self.values = {}
        self.module_of = {}
        self.metadata_nodes = set()


def _output_index(out_spec):
    """Which flattened output the loss reads: a ModelOutput's (or dict's) `logits`, else its first tensor."""
    if out_spec.type is not None and out_spec.context and isinstance(out_spec.context, list) and \
            "logits" in out_spec.context:
        index = out_spec.context.index("logits")
        return sum(child.num_leaves for child in out_spec.children()[:index])
    return 0


def _leaf_module(model, path):
    """The module at `path` when it has no submodules (Linear, LayerNorm, RMSNorm, fused experts), else None."""
    try:
        module = model.get_submodule(path)
    except AttributeError:
        return None
    return module if next(module.children(), None) is None else None


def _group_key(model, node):
    """Which operator an ATen node belongs to: the call of the innermost module when that module is a leaf,
    else the functional op that made it (torch_fn: `split` and its getitems are one)."""
    stack = list(node.meta.get("nn_module_stack", {}).items())
    key, (path, _) = stack[-1] if stack else ("", ("", None))
    module = _leaf_module(model, path) if path else None
    if module is not None:
        return ("module", key), path, type(module).__name__
    torch_fn = node.meta.get("torch_fn")
    function = torch_fn[1].rpartition(".")[2] if torch_fn else getattr(node.target, "__name__", str(node.target))
    return ("function", torch_fn[0] if torch_fn else node.name, key), path, function.split(".")[0].strip("_")


def _check_runnable(node):
    """The C++ runtime runs ATen operators only: an op a Python library registered (transformers' grouped
    matrix product for mixture-of-experts) has no C++ kernel there."""
    target = node.target
    namespace = getattr(target, "namespace", None)
    if namespace is not None and namespace not in ("aten", "prims"):
        hint = ""
        if namespace == "transformers":
            hint = ("; for a mixture of experts, build the config with experts_implementation=\"batched_mm\" "
                    "(ATen operators only)")
        raise CaptureError(f"cannot capture the model: it calls {namespace}::{target._opname}, an operator "
                           f"registered in Python that the C++ runtime cannot run{hint}")


class _Group:
    def __init__(self, key, path, kind):
        self.key, self.path, self.kind = key, path, kind
        self.nodes = []


def _inline_regions(module):
    """Inlines the regions torch.export wraps in higher-order ops: `torch.no_grad()` blocks (Llama's rotary
    embedding) as their ATen nodes with every result detached, which is what no_grad means for the values
    and gradients; an `autocast` that is disabled, as its nodes. Each inlined node keeps the region's
    module stack, so it joins the region's operator."""
    graph = module.graph
    while True:
        region = next((n for n in graph.nodes if n.op == "call_function" and
                       getattr(n.target, "__name__", "") in ("wrap_with_set_grad_enabled", "wrap_with_autocast")),
                      None)
        if region is None:
            return
        if region.target.__name__ == "wrap_with_set_grad_enabled":
            enabled, body, operands = region.args[0], region.args[1], region.args[2:]
        else:
            enabled, body, operands = True, region.args[4], region.args[5:]
            if region.args[2]:
                raise CaptureError("cannot capture the model: it runs a region under torch.autocast, whose casts "
                                   "the runtime does not reproduce; train it in one dtype (--dtype)")
        subgraph = getattr(module, body.target).graph
        env = dict(zip([n for n in subgraph.nodes if n.op == "placeholder"], operands))
        results = None
        with graph.inserting_before(region):
            for node in subgraph.nodes:
                if node.op == "placeholder":
                    continue
                if node.op == "output":
                    results = [env[r] for r in node.args[0]]
                    break
                env[node] = graph.node_copy(node, lambda old: env[old])
                env[node].meta = dict(node.meta, **{k: region.meta[k] for k in ("nn_module_stack", "torch_fn")
                                                    if k in region.meta})
            if enabled is False:
                detached = []
                for r in results:
                    d = graph.call_function(torch.ops.aten.detach.default, (r,))
                    d.meta = dict(r.meta)
                    detached.append(d)
                results = detached
        for user in list(region.users):
            user.replace_all_uses_with(results[user.args[1]])
            graph.erase_node(user)
        graph.erase_node(region)


def _scalar_overloads(graph):
    """`aten.mul.Tensor(x, 0.5)` as `aten.mul.Scalar(x, 0.5)`: the same numbers, but the Tensor overload wraps
    the Python number in a tensor that autograd saves without calling the saved-tensor hooks the capture
    measures with (and TorchScript makes it a constant tensor the runtime holds)."""
    for node in graph.nodes:
        target = node.target
        if node.op != "call_function" or getattr(target, "_overloadname", None) != "Tensor" or len(node.args) != 2:
            continue
        if isinstance(node.args[0], fx.Node) and isinstance(node.args[1], (int, float)) and \
                not isinstance(node.args[1], bool):
            scalar = getattr(target.overloadpacket, "Scalar", None)
            if scalar is not None:
                node.target = scalar


def _needed(result):
    """The nodes the loss's input depends on (the export also keeps outputs the loss does not read)."""
    needed, pending = set(), [result]
    while pending:
        node = pending.pop()
        if node not in needed:
            needed.add(node)
            pending.extend(node.all_input_nodes)
    return needed


def _groups(model, graph, needed):
    """The needed ATen nodes in order, cut into operators: runs of consecutive nodes of one key (a run in
    a topological order is closed under the paths between its nodes, so it can be one operator)."""
    groups = []
    for node in graph.nodes:
        if node.op != "call_function" or node not in needed:
            continue
        _check_runnable(node)
        key, path, kind = _group_key(model, node)
        if not groups or groups[-1].key != key:
            groups.append(_Group(key, path, kind))
        groups[-1].nodes.append(node)
    return _fold_views(groups, graph, needed)


def _is_view(node):
    schema = getattr(node.target, "_schema", None)
    return schema is not None and len(schema.returns) == 1 and schema.returns[0].alias_info is not None and \
        not schema.returns[0].alias_info.is_write


def _fold_views(groups, graph, needed):
    """A view (view, slice, transpose, expand, unsqueeze, ...) that would be an operator of its own is
    computed by each operator that reads it instead (a copy per reader: a view costs nothing). A tensor
    received across a cut and saved by an operator through views (`hidden.view(...)[:, -k:]` into the
    LM head, the rotary `cos.unsqueeze(1)` into two products) is then read by the operator that saves
    it, which is where the cost graph holds what a stage receives and saves once."""
    group_of = {node: group for group in groups for node in group.nodes}
    for group in reversed(groups):  # readers first: a chain of views folds into its last reader
        if group.key[0] != "function" or len(group.nodes) != 1 or not _is_view(group.nodes[0]):
            continue
        view = group.nodes[0]
        into = [group_of.get(reader) for reader in view.users]
        if not into or any(g is None or g is group for g in into):
            continue  # the loss reads it, or a node of no operator
        for target in dict.fromkeys(into):
            readers = [n for n in target.nodes if view in n.all_input_nodes]
            with graph.inserting_before(readers[0]):  # before its readers: the order stays topological
                copy = graph.node_copy(view)
            copy.meta = dict(view.meta)
            for reader in readers:
                reader.replace_input_with(view, copy)
            target.nodes.insert(target.nodes.index(readers[0]), copy)
            group_of[copy] = target
            needed.add(copy)
        graph.erase_node(view)
        group.nodes = []
    return [group for group in groups if group.nodes]


def _operator_module(group, exported_module, reads, results):
    """The GraphModule of one operator: `reads` (nodes outside it) in, `results` (its nodes read later) out;
    get_attr nodes become its own attributes, holding the model's tensors themselves."""
    graph = fx.Graph()
    env, attributes = {}, {}
    for read in reads:
        env[read] = graph.placeholder(read.name)

    def reference(old):
        if old not in env:  # a get_attr: a parameter, buffer or constant of the model
            attributes[old.target] = operator.attrgetter(old.target)(exported_module)
            env[old] = graph.get_attr(old.target)
        return env[old]

    for node in group.nodes:
        env[node] = graph.node_copy(node, reference)
    graph.output(env[results[0]] if len(results) == 1 else tuple(env[r] for r in results))
    # The class name is the operator's kind (capture reads it as a module's) and TorchScript's type name.
    kind = group.kind if group.kind.isidentifier() and not keyword.iskeyword(group.kind) else f"{group.kind}_"
    operator_module = fx.GraphModule(attributes, graph, kind)
    operator_module.aten_operator = True  # capture counts its FLOPs (counted_flops.py) and names its buffers as the model
    return operator_module


def _operator_name(group, used_names):
    """A leaf module's call by its path (`transformer_h_0_attn_c_attn`), a function by its name (`matmul`),
    numbered from the second on, as fx names them."""
    base = group.path.replace(".", "_") if group.key[0] == "module" else group.kind
    if not base.isidentifier() or keyword.iskeyword(base) or hasattr(fx.GraphModule, base):  # `and`, `to`
        base = f"{base}_" if base.isidentifier() else "op"
    name, count = base, 0
    while name in used_names:
        count += 1
        name = f"{base}_{count}"
    used_names.add(name)
    return name


@contextlib.contextmanager
def _quiet_torch_logs():
    """torch.export logs warnings and prints the graph it had when it fails: the capture's one error line says
    what failed."""
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict) if name.startswith("torch")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def trace_exported(model, example_inputs, input_names):
    """(GraphModule, ExportTrace, kept_whole={}): the model through torch.export, one node per operator.
    `input_names`: forward's argument per example input (None: by position)."""
    names, kwargs = keyword_inputs(model, example_inputs, input_names)
    try:
        with _quiet_torch_logs():
            exported = torch.export.export(model, (), kwargs, strict=False)
    except Exception as error:  # torch.export raises many kinds, each naming the operation it stopped at
        line = where(error.__traceback__)
        raise ExportFailed(f"{type(error).__name__}: {_first_line(error)}" + (f" at {line}" if line else "")) from None
    # Functionalized (run_decompositions with no decompositions): in-place operators become out-of-place
    # ones, so an operator never modifies a tensor another one made (a chunk must not modify what it
    # received, and timing runs each operator on its recorded inputs again and again).
    module = exported.run_decompositions({}).module()
    _inline_regions(module)
    graph = module.graph
    _scalar_overloads(graph)
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    output_node = next(n for n in graph.nodes if n.op == "output")
    flat_outputs = output_node.args[0]
    result = flat_outputs[_output_index(exported.call_spec.out_spec)]
    if not isinstance(result, fx.Node):
        raise CaptureError("the model's output the loss reads is not a tensor the model computes")

    needed = _needed(result)
    groups = _groups(model, graph, needed)
    top = fx.Graph()
    root = torch.nn.Module()
    env = {}
    for name in names:
        env[placeholders[name]] = top.placeholder(name)
    trace = ExportTrace()
    used_names = set()
    for group in groups:
        members = set(group.nodes)
        reads = []
        for node in group.nodes:
            for read in node.all_input_nodes:
                if read not in members and read.op != "get_attr" and read not in reads:
                    if read.op == "placeholder" and read not in env:
                        raise CaptureError(f"the model reads its argument '{read.name}', which is not an input: "
                                           f"give it with --input {read.name}=SHAPE")
                    reads.append(read)
        # What later operators read (functionalization leaves nodes nothing needed reads: not outputs).
        results = [n for n in group.nodes if n is result or any(u in needed and u not in members for u in n.users)]
        name = _operator_name(group, used_names)
        setattr(root, name, _operator_module(group, module, reads, results))
        call = top.call_module(name, tuple(env[r] for r in reads))
        trace.module_of[call] = group.path
        if len(results) == 1:
            env[results[0]] = call
        else:
            for index, node in enumerate(results):
                env[node] = top.call_function(operator.getitem, (call, index))
                trace.module_of[env[node]] = group.path
    top.output(env[result])
    graph_module = fx.GraphModule(root, top, type(model).__name__)
    _record_values(graph_module, example_inputs, trace)
    return graph_module, trace, {}


def _record_values(graph_module, inputs, trace):
    """Every node's concrete value on the example inputs, as the fx tracer's proxies carry them."""
    class Recorder(fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            trace.values[n] = value
            return value

    torch.manual_seed(0)
    with torch.no_grad():
        Recorder(graph_module).run(*inputs)
