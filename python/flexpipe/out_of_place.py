"""In-place operators made out-of-place where nothing can tell the difference: a chunk must never modify
a tensor it received (a leaf of the runtime's autograd graph, possibly relayed further). The export
runs its chunks so, and the capture measures what autograd saves on the same graph, so that the saved
bytes it records are what the runtime's chunks save."""
import operator

import torch
import torch.fx as fx

from .values import leaves


_INPLACE_OPERATORS = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
                      operator.itruediv: operator.truediv}


def mutated_input(node, module_of):
    """The node whose tensor `node` modifies in place, or None: a module with `inplace=True`, a function
    called with `inplace=True`, `operator.iadd` and the like, and PyTorch's NAME_ methods and functions."""
    first = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
    if first is None:
        return None
    if node.op == "call_module":
        return first if getattr(module_of(node), "inplace", False) is True else None
    if node.op == "call_method":
        return first if node.target.endswith("_") and not node.target.startswith("_") else None
    if node.op == "call_function":
        if node.kwargs.get("inplace") is True or node.target in _INPLACE_OPERATORS:
            return first
        name = getattr(node.target, "__name__", "")
        if name.endswith("_") and not name.startswith("_") and getattr(torch, name, None) is node.target:
            return first
    return None


def _out_of_place(node):
    """Makes an in-place call node its out-of-place twin; False when there is none (`copy_`)."""
    if node.op == "call_method":
        if not callable(getattr(torch.Tensor, node.target[:-1], None)):
            return False
        node.target = node.target[:-1]
    elif node.kwargs.get("inplace") is True:
        node.kwargs = {**node.kwargs, "inplace": False}
    elif node.target in _INPLACE_OPERATORS:
        node.target = _INPLACE_OPERATORS[node.target]
    else:
        twin = getattr(torch, node.target.__name__[:-1], None)
        if not callable(twin):
            return False
        node.target = twin
    return True


def _storage(value):
    try:
        return value.untyped_storage().data_ptr() if isinstance(value, torch.Tensor) else None
    except (RuntimeError, NotImplementedError):
        return None


def make_out_of_place(graph_module, values):
    """In-place operators become their out-of-place twins where nothing can tell the difference, so that
    a chunk never modifies a tensor it received (a leaf of the runtime's autograd graph, possibly relayed
    further). An in-place operator returns the tensor it modified, so every later reader of that tensor
    reads the operator's result instead; then the twin computes the same numbers unless a later operator
    reads another view of the same memory. Returns the nodes left in place."""
    nodes = [n for n in graph_module.graph.nodes]
    position = {n: i for i, n in enumerate(nodes)}
    modules = {}
    left = set()

    def module_of(node):
        return graph_module.get_submodule(node.target)

    for node in nodes:
        mutated = mutated_input(node, module_of)
        if mutated is None:
            continue
        for later in nodes[position[node] + 1:]:
            later.replace_input_with(mutated, node)
        storage = _storage(values.get(mutated))
        safe = storage is not None and mutated.op != "get_attr"
        for later in nodes[position[node] + 1:]:
            if not safe:
                break
            for read in later.all_input_nodes:
                if read is not node and position[read] < position[node] and any(
                        _storage(leaf) == storage for _, leaf in leaves(values.get(read))):
                    safe = False
        if node.op == "call_module":
            modules.setdefault(node.target, []).append((node, safe))
        elif not safe or not _out_of_place(node):
            left.add(node)
    for target, calls in modules.items():
        if all(safe for _, safe in calls):
            graph_module.get_submodule(target).inplace = False
        else:
            left.update(node for node, _ in calls)
    return left
