"""shoal.export: the training-mode ONNX export, and the scopes as spec
patterns over its node names."""

import inspect
import json
import os

from . import scopes as _scopes
from .errors import ShoalError

SIDECAR = ".shoal.json"


def _exporter_name(parent_name, parent_path, path):
    """The name torch.onnx's TorchScript exporter gives a called module:
    its path relative to the module called before it, an index joined to
    that module's name (docs/Annotations.md)."""
    rel = path[len(parent_path) + 1:] if parent_path else path
    if rel[:1].isdigit() and parent_name:
        return parent_name + "." + rel
    return rel


def _record_calls(module):
    """Global forward hooks that record, per module, the node-name prefix
    of each of its calls ("/h.0/attn"), the k-th call of one module
    suffixed "_k" as the exporter does."""
    import torch.nn.modules.module as mm

    paths = {id(m): name for name, m in module.named_modules()}
    prefixes = {}  # prefix -> module path
    stack = []     # (module id, exporter name, path, prefix)
    calls = {}

    def pre(m, _inputs):
        key = id(m)
        if key not in paths:
            return
        path = paths[key]
        if m is module:
            if not stack:
                prefixes.clear()
                calls.clear()
            stack.append((key, "", "", ""))
            return
        if not stack:
            return
        _, parent_name, parent_path, parent_prefix = stack[-1]
        name = _exporter_name(parent_name, parent_path, path)
        k = calls.get(key, 0)
        calls[key] = k + 1
        shown = name if k == 0 else "%s_%d" % (name, k)
        prefix = parent_prefix + "/" + shown
        prefixes[prefix] = path
        stack.append((key, name, path, prefix))

    def post(m, _inputs, _output):
        if stack and stack[-1][0] == id(m):
            stack.pop()

    handles = [mm.register_module_forward_pre_hook(pre),
               mm.register_module_forward_hook(post)]
    return prefixes, handles


def _scope_of_path(module, path, by_path):
    """The scope of the module at `path`: its own, else its nearest
    ancestor's."""
    while True:
        m = by_path.get(path)
        if m is not None:
            s = _scopes.scope_of(m)
            if s is not None:
                return s
        if not path:
            return None
        path = path.rpartition(".")[0]


def _glob_escape(name):
    return "".join("[%s]" % c if c in "*?[]" else c for c in name)


def assign_nodes(module, graph_nodes, prefixes):
    """Each ONNX node's scope (None: the spec's default). A node is in the
    scope of the innermost module whose call produced it; a node of the
    root module's own forward (`/Add`) in the latest scope of the nodes it
    reads, else of the nodes that read it. Returns {node name: scope}."""
    by_path = dict(module.named_modules())
    ordered = sorted(prefixes, key=len, reverse=True)
    node_prefix = {}
    scope = {}
    pending = []
    producer = {}
    for n in graph_nodes:
        for out in n.output:
            producer[out] = n
        if n.op_type == "Constant":
            continue  # constants follow the ops that use them
        p = next((q for q in ordered if n.name.startswith(q + "/")), None)
        node_prefix[n.name] = p
        if p is None:
            pending.append(n)
            scope[n.name] = None
        else:
            scope[n.name] = _scope_of_path(module, prefixes[p], by_path)
    # Root-level nodes, in graph order: the latest scope among producers.
    undecided = []
    for n in pending:
        found = [scope[producer[i].name] for i in n.input
                 if i in producer and producer[i].name in scope
                 and scope.get(producer[i].name) is not None]
        if found:
            scope[n.name] = max(found, key=lambda s: s.index_in_model)
        else:
            undecided.append(n)
    # Those that read only inputs and weights: their readers' scope.
    readers = {}
    for n in graph_nodes:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    for n in reversed(undecided):
        found = {scope.get(r.name) for o in n.output for r in readers.get(o, [])}
        found.discard(None)
        if len(found) == 1:
            scope[n.name] = found.pop()
    return scope, node_prefix


def spec_scopes(scope, node_prefix, prefixes):
    """The spec's scopes: per scope, in model order, `PREFIX/*` for each
    outermost module call all of whose nodes are in it, else the nodes by
    name."""
    members = {}
    for name, s in scope.items():
        if s is not None:
            members.setdefault(s, []).append(name)
    pure = {}
    for p in prefixes:
        owners = {scope[n] for n in scope if n.startswith(p + "/")}
        pure[p] = owners.pop() if len(owners) == 1 else None
    entries = []
    for s in sorted(members, key=lambda s: s.index_in_model):
        patterns = []
        for name in members[s]:
            best = None
            p = node_prefix.get(name)
            while p:
                if p in pure and pure[p] is s:
                    best = p
                p = p.rpartition("/")[0]
            pattern = best + "/*" if best else _glob_escape(name)
            if pattern not in patterns:
                patterns.append(pattern)
        entries.append((s, patterns))
    return entries


class _Node:
    """An ONNX node under the name spec patterns match."""

    def __init__(self, name, node):
        self.name = name
        self.op_type = node.op_type
        self.input = list(node.input)
        self.output = list(node.output)


def _spec_names(path, model):
    """The names the importer gives the nodes (`shoal-compile --list-nodes`):
    their own, or for the dynamo exporter's `node_*` the TorchScript-style
    name rebuilt from their module path metadata."""
    if all(n.name.startswith("/") or n.op_type == "Constant" for n in model.graph.node):
        return [n.name for n in model.graph.node]
    from .tools import _run, tool
    out = _run([tool("shoal-compile"), path, "--list-nodes"], "shoal-compile --list-nodes")
    names = [line.split("\t")[0] for line in out.splitlines() if line]
    if len(names) != len(model.graph.node):
        raise ShoalError("shoal-compile --list-nodes listed %d nodes of %s, which "
                         "has %d" % (len(names), path, len(model.graph.node)))
    return names


def export(module, example_inputs, path, input_names=None, output_names=None,
           opset=17, dynamo=False):
    """Exports `module` for training as shoal needs it (every parameter
    and buffer an initializer under its state_dict name, nothing folded:
    `torch.onnx.export(..., training=TRAINING, do_constant_folding=False)`,
    or torch 2's `dynamo=True` exporter) and records which nodes each scope
    holds in PATH.shoal.json. Returns PATH."""
    import onnx
    import torch

    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    prefixes, handles = _record_calls(module)
    try:
        if dynamo:
            torch.onnx.export(module, example_inputs, path, opset_version=opset,
                              input_names=input_names, output_names=output_names,
                              dynamo=True, external_data=False, optimize=False)
        else:
            # The TorchScript exporter (torch 2.9 and later default to dynamo).
            extra = {}
            if "dynamo" in inspect.signature(torch.onnx.export).parameters:
                extra["dynamo"] = False
            torch.onnx.export(module, example_inputs, path, opset_version=opset,
                              input_names=input_names, output_names=output_names,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, **extra)
    except Exception as e:
        raise ShoalError("shoal.export: torch.onnx.export of %s failed: %s"
                         % (type(module).__name__, e)) from e
    finally:
        for h in handles:
            h.remove()
    model = onnx.load(path, load_external_data=False)
    nodes = [_Node(name, n) for name, n in zip(_spec_names(path, model), model.graph.node)]
    used = {}
    for m in module.modules():
        s = _scopes.scope_of(m)
        if s is not None:
            used.setdefault(id(s), s)
    scope, node_prefix = _first_pass(module, nodes, prefixes, used)
    # A scope built into this module whose modules made no node.
    for s in sorted(used.values(), key=lambda s: s.index):
        if s.index_in_model is None:
            raise ShoalError(
                "scope %r matches no node of the exported model: none of the "
                "modules built in it ran in %s.forward" % (s, type(module).__name__))
    for s in _scopes.drain_unused():
        raise ShoalError("scope %r built no nn.Module: only modules constructed "
                         "inside a scope belong to it" % s)
    entries = spec_scopes(scope, node_prefix, prefixes)
    names = set()
    spec = []
    for i, (s, patterns) in enumerate(entries):
        name = s.name or "scope%d" % i
        if name in names:
            raise ShoalError("two scopes are named %r (%r)" % (name, s))
        names.add(name)
        entry = {s.kind: s.device_count, "name": name, "nodes": patterns}
        entry.update(s.options)
        spec.append(entry)
    initializers = {i.name for i in model.graph.initializer}
    buffers = sorted(n for n, b in module.named_buffers()
                     if n in initializers and b.is_floating_point())
    with open(path + SIDECAR, "w") as f:
        json.dump({"scopes": spec, "buffers": buffers}, f, indent=1)
    return path


def _first_pass(module, nodes, prefixes, used):
    # Model order: a scope's position is that of its first node.
    order = {}
    by_path = dict(module.named_modules())
    ordered = sorted(prefixes, key=len, reverse=True)
    for k, n in enumerate(nodes):
        p = next((q for q in ordered if n.name.startswith(q + "/")), None)
        if p is None:
            continue
        s = _scope_of_path(module, prefixes[p], by_path)
        if s is not None and id(s) not in order:
            order[id(s)] = k
    for s in used.values():
        s.index_in_model = order.get(id(s))
    return assign_nodes(module, nodes, prefixes)


def sidecar(path):
    """The scopes and buffers shoal.export recorded for the model at PATH."""
    try:
        with open(path + SIDECAR) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ShoalError("%s was not exported by shoal.export (no %s): export "
                         "the module with shoal.export, or give compile a spec"
                         % (path, path + SIDECAR)) from None
