"""shoal.export: the training-mode ONNX export, and the scopes as spec
patterns over its node names."""

import inspect
import json
import os
import re

from . import scopes as _scopes
from .errors import ShoalError

SIDECAR = ".shoal.json"


def _unqualified(path):
    """The name torch.onnx gives a module in node names: its path from the
    last part that is not an index (`transformer.h.0` -> `h.0`,
    `features.0.0` -> `features.0.0`; torch.onnx.utils'
    _unqualified_variable_name). The importer rebuilds the same names for
    the dynamo exporter's nodes."""
    atoms = path.split(".")
    for i in range(len(atoms) - 1, -1, -1):
        if not atoms[i].isdigit():
            return ".".join(atoms[i:])
    return path


def _record_calls(module):
    """Global forward hooks that record the node-name prefix of every
    module call (`/h.0/attn/q`: the exporter's names of the modules on the
    call stack): {prefix: set of module paths}. A module called twice
    gives one prefix; the exporter's `_1` on the second call's names is
    matched by _match."""
    import torch.nn.modules.module as mm

    paths = {id(m): name for name, m in module.named_modules()}
    prefixes = {}
    stack = []  # (module id, prefix)

    def pre(m, _inputs):
        key = id(m)
        if key not in paths:
            return
        if m is module:
            if not stack:
                prefixes.clear()
            stack.append((key, ""))
            return
        if not stack:
            return
        prefix = stack[-1][1] + "/" + _unqualified(paths[key])
        prefixes.setdefault(prefix, set()).add(paths[key])
        stack.append((key, prefix))

    def post(m, _inputs, _output):
        if stack and stack[-1][0] == id(m):
            stack.pop()

    handles = [mm.register_module_forward_pre_hook(pre),
               mm.register_module_forward_hook(post)]
    return prefixes, handles


def _scope_of_path(path, by_path):
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


def _glob_escape(text):
    return "".join("[%s]" % c if c in "*?[]\\" else c for c in text)


_SUFFIX = re.compile(r"^(.*)_[0-9]+$")


def _component_matches(actual, expected):
    """0: no; 2: equal; 1: `expected_k` (a repeated call's name)."""
    if actual == expected:
        return 2
    m = _SUFFIX.match(actual)
    return 1 if m and m.group(1) == expected else 0


def _by_depth(prefixes):
    """The module-call prefixes by their number of folders, for _match."""
    by_depth = {}
    for prefix in prefixes:
        parts = prefix.split("/")[1:]
        by_depth.setdefault(len(parts), []).append((prefix, parts))
    return by_depth


def _match(name, by_depth):
    """The module-call prefixes a node name lies under, deepest first, then
    by exactness: [(depth, exact components, prefix)], the best first."""
    parts = name.split("/")[1:-1]  # the directories; the last part is the op
    best = []
    for depth in range(len(parts), 0, -1):
        for prefix, want in by_depth.get(depth, ()):
            exact = 0
            for a, e in zip(parts, want):
                m = _component_matches(a, e)
                if not m:
                    break
                exact += m == 2
            else:
                best.append((depth, exact, prefix))
        if best:
            break
    best.sort(key=lambda t: -t[1])
    return [b for b in best if b[1] == best[0][1]] if best else []


def assign_nodes(module, graph_nodes, prefixes):
    """Each ONNX node's scope (None: the spec's default). A node is in the
    scope of the innermost module whose call produced it; a node of the
    root module's own forward (`/Add`) in the latest scope of the nodes it
    reads, else of the nodes that read it. Two modules of different scopes
    whose calls the names cannot tell apart are an error. Returns
    {node name: scope}."""
    by_path = dict(module.named_modules())
    by_depth = _by_depth(prefixes)
    scope = {}
    pending = []
    producer = {}
    for n in graph_nodes:
        for out in n.output:
            producer[out] = n
        if n.op_type == "Constant":
            continue  # constants follow the ops that use them
        found = _match(n.name, by_depth)
        if not found:
            pending.append(n)
            scope[n.name] = None
            continue
        candidates = {}
        for _, _, prefix in found:
            for path in prefixes[prefix]:
                candidates[path] = _scope_of_path(path, by_path)
        owners = set(candidates.values())
        if len(owners) > 1:
            raise ShoalError(
                "node %s may come from any of the modules %s, which are in "
                "different scopes (%s): the exported names cannot tell their "
                "calls apart; put them in one scope"
                % (n.name, ", ".join(sorted(candidates)),
                   ", ".join(repr(candidates[p]) for p in sorted(candidates))))
        scope[n.name] = owners.pop()
    # Root-level nodes, in graph order: the latest scope among producers.
    undecided = []
    for n in pending:
        found = [scope[producer[i].name] for i in n.input
                 if i in producer and scope.get(producer[i].name) is not None]
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
    return scope


def spec_scopes(scope):
    """The spec's scopes: per scope, in model order, `DIR/*` for the
    outermost folder of node names (a module call) all of whose nodes are
    in it, else its nodes by name."""
    owners = {}
    for name, s in scope.items():
        parts = name.split("/")
        for k in range(2, len(parts)):
            owners.setdefault("/".join(parts[:k]), set()).add(s)
    members = {}
    for name, s in scope.items():
        if s is not None:
            members.setdefault(s, []).append(name)
    entries = []
    for s in sorted(members, key=lambda s: s.index_in_model):
        patterns = []
        for name in members[s]:
            parts = name.split("/")
            pattern = _glob_escape(name)
            for k in range(2, len(parts)):
                folder = "/".join(parts[:k])
                if owners[folder] == {s}:
                    pattern = _glob_escape(folder) + "/*"
                    break
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
    _model_order(module, nodes, prefixes, used)
    scope = assign_nodes(module, nodes, prefixes)
    # A scope built into this module whose modules made no node.
    for s in sorted(used.values(), key=lambda s: s.index):
        if s.index_in_model is None:
            raise ShoalError(
                "scope %r matches no node of the exported model: none of the "
                "modules built in it ran in %s.forward" % (s, type(module).__name__))
    for s in _scopes.drain_unused():
        raise ShoalError("scope %r built no nn.Module: only modules constructed "
                         "inside a scope belong to it" % s)
    entries = spec_scopes(scope)
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
    # What PyTorch does not train: float buffers, and parameters with
    # requires_grad=False (the training config freezes them).
    initializers = {i.name for i in model.graph.initializer}
    frozen = sorted(n for n, b in module.named_buffers()
                    if n in initializers and b.is_floating_point())
    frozen += sorted(n for n, p in module.named_parameters()
                     if n in initializers and not p.requires_grad)
    with open(path + SIDECAR, "w") as f:
        json.dump({"scopes": spec, "frozen": frozen}, f, indent=1)
    return path


def _model_order(module, nodes, prefixes, used):
    """Each scope's position in the model: its first node's."""
    by_path = dict(module.named_modules())
    by_depth = _by_depth(prefixes)
    order = {}
    for k, n in enumerate(nodes):
        for _, _, prefix in _match(n.name, by_depth):
            for path in prefixes[prefix]:
                s = _scope_of_path(path, by_path)
                if s is not None and id(s) not in order:
                    order[id(s)] = k
    for s in used.values():
        s.index_in_model = order.get(id(s))


def sidecar(path):
    """The scopes and buffers shoal.export recorded for the model at PATH."""
    try:
        with open(path + SIDECAR) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ShoalError("%s was not exported by shoal.export (no %s): export "
                         "the module with shoal.export, or give compile a spec"
                         % (path, path + SIDECAR)) from None
