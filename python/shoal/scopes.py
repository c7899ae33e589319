"""The two primitives, recorded while the user builds an nn.Module.

    with shoal.replicate(2):          # data parallel
        self.embed = nn.Embedding(...)
    with shoal.split(2):              # tensor parallel
        self.blocks = nn.ModuleList(...)

Every nn.Module constructed inside a scope belongs to it (EPL's rule: the
ops built inside `with epl.split(8):` form that TaskGraph). When the module
is exported (shoal.export), the ONNX nodes each module produced are found
by the module's call path, and the scopes are written as the annotation
spec's glob patterns (docs/Annotations.md). Scopes do not nest.
"""

import copy
import itertools
import threading
import traceback

from .errors import ShoalError

_state = threading.local()
_counter = itertools.count()
_config = {}
_entered = []  # scopes entered since the last export


def _active():
    return getattr(_state, "scope", None)


class Scope:
    """One `with shoal.replicate(n)` or `with shoal.split(n)` block."""

    def __init__(self, kind, device_count, name=None, **options):
        if not isinstance(device_count, int) or isinstance(device_count, bool) \
                or device_count < 1:
            raise ShoalError("shoal.%s: device_count must be a positive integer, "
                             "got %r" % (kind, device_count))
        self.kind = kind
        self.device_count = device_count
        self.name = name
        self.options = options
        self.index = next(_counter)
        self.where = None  # "file:line" of the with statement
        self.built = 0  # nn.Modules constructed inside
        self.index_in_model = None  # its first node's position (export)

    def __repr__(self):
        return "%s(%d)%s%s" % (self.kind, self.device_count,
                               " '%s'" % self.name if self.name else "",
                               " at %s" % self.where if self.where else "")

    def __enter__(self):
        frame = traceback.extract_stack(limit=2)[0]
        self.where = "%s:%d" % (frame.filename, frame.lineno)
        outer = _active()
        if outer is not None:
            raise ShoalError(
                "nested scopes: %r is inside %r; shoal's scopes do not nest "
                "(close the outer one first: consecutive scopes are pipeline "
                "stages when the config has micro-batches)" % (self, outer))
        _state.scope = self
        _install_hook()
        _entered.append(self)
        return self

    def __exit__(self, *exc):
        _state.scope = None
        return False

    def apply(self, *modules):
        """Puts modules built elsewhere (a Hugging Face model's layers) in
        this scope, as if they had been built inside it:
        `shoal.split(2, name="blocks").apply(model.transformer.h)`.
        Returns the scope."""
        if self.where is None:
            frame = traceback.extract_stack(limit=2)[0]
            self.where = "%s:%d" % (frame.filename, frame.lineno)
        _install_hook()
        for m in modules:
            old = scope_of(m)
            if old is not None and old is not self:
                raise ShoalError("%s is in %r already; a module is in one scope"
                                 % (type(m).__name__, old))
            object.__setattr__(m, "_shoal_scope", self)
            self.built += 1
        return self


def replicate(device_count=1, name=None, recompute=None):
    """Data parallelism: the modules built inside run whole on each of
    `device_count` devices, each on its share of the batch."""
    options = {"recompute": recompute} if recompute else {}
    return Scope("replicate", device_count, name, **options)


def split(device_count, name=None, recompute=None, sequence_parallel=False):
    """Tensor parallelism: the modules built inside are split over
    `device_count` devices (Megatron's layout for attention and MLPs)."""
    options = {}
    if recompute:
        options["recompute"] = recompute
    if sequence_parallel:
        options["sequence_parallel"] = True
    return Scope("split", device_count, name, **options)


_hooked = False


def _install_hook():
    """Wraps nn.Module.__init__ once: a module constructed while a scope is
    open records it."""
    global _hooked
    if _hooked:
        return
    try:
        import torch.nn as nn
    except ImportError as e:  # pragma: no cover - torch is a dependency
        raise ShoalError("shoal's scopes annotate torch.nn modules: %s" % e)
    original = nn.Module.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        scope = _active()
        if scope is not None and "_shoal_scope" not in self.__dict__:
            object.__setattr__(self, "_shoal_scope", scope)
            scope.built += 1

    nn.Module.__init__ = init
    _hooked = True


def drain_unused():
    """The scopes entered since the last call that built no module."""
    unused = [s for s in _entered if s.built == 0]
    del _entered[:]
    return unused


def scope_of(module):
    """The scope module was built in, or None."""
    return module.__dict__.get("_shoal_scope")


# EPL's config names, mapped to the training config's and the spec's.
_EPL_NAMES = {
    "pipeline.num_micro_batch": ("pipeline", "num_micro_batch"),
    "pipeline.strategy": ("pipeline", "schedule"),
    "pipeline.schedule": ("pipeline", "schedule"),
    "pipeline.virtual_stages": ("pipeline", "virtual_stages"),
    "zero.level": ("zero", None),
    "gradient_checkpoint.type": ("recompute", None),
    "amp.level": ("precision", None),
}
_EPL_VALUES = {
    ("pipeline", "schedule"): {"PreferBackward": "1f1b", "PreferForward": "gpipe",
                               "gpipe": "gpipe", "1f1b": "1f1b",
                               "interleaved": "interleaved"},
    ("zero", None): {"v0": 0, "v1": 1, "v2": 2, "v3": 3, "": 0},
    ("recompute", None): {"collection": "full", "auto": "selective", "": "none"},
    ("precision", None): {"O1": "fp16", "O0": "fp32", "": "fp32"},
}
_TRAIN_KEYS = {"loss", "optimizer", "frozen", "zero", "recompute", "precision",
               "loss_scale", "grad_bucket_mb"}
_SPEC_KEYS = {"pipeline", "default", "inputs"}


def config(options=None, **kwargs):
    """The options of the next compile, by the training config's names
    (loss, optimizer, frozen, zero, recompute, precision, loss_scale,
    grad_bucket_mb), the spec's (pipeline, default, inputs), or EPL's in a
    dict (`{"pipeline.num_micro_batch": 4, "zero.level": "v1",
    "gradient_checkpoint.type": "collection", "amp.level": "O1"}`).
    Returns the whole config so far; shoal.reset() clears it."""
    merged = {}
    for key, value in copy.deepcopy(dict(options or {}, **kwargs)).items():
        if key in _EPL_NAMES:
            top, sub = _EPL_NAMES[key]
            table = _EPL_VALUES.get((top, sub))
            if table is not None and isinstance(value, str):
                if value not in table:
                    raise ShoalError("shoal.config: %s=%r is not one of %s"
                                     % (key, value, sorted(k for k in table if k)))
                value = table[value]
            if sub is None:
                merged[top] = value
            else:
                merged.setdefault(top, {})[sub] = value
        elif key in _TRAIN_KEYS or key in _SPEC_KEYS:
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key].update(value)
            else:
                merged[key] = value
        else:
            raise ShoalError(
                "shoal.config: unknown option %r (the training config's: %s; "
                "the spec's: %s; or EPL's: %s)"
                % (key, ", ".join(sorted(_TRAIN_KEYS)), ", ".join(sorted(_SPEC_KEYS)),
                   ", ".join(sorted(_EPL_NAMES))))
    for key, value in merged.items():
        if isinstance(value, dict) and isinstance(_config.get(key), dict):
            _config[key].update(value)
        else:
            _config[key] = value
    return dict(_config)


def reset():
    """Forgets the config and the scopes entered so far (the scopes stay
    with the modules built in them)."""
    _config.clear()
    del _entered[:]
    _state.scope = None


def current_config():
    return dict(_config)
