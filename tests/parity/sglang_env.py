"""Makes one SGLang release's Python source importable without torch, CUDA or SGLang's kernels.

SGLang's configuration code (config loading, the model-config registry, the override registry,
the hybrid-architecture helpers) is plain Python, but the modules around it import torch, triton
and SGLang's compiled kernels at top level. `install(src)` puts the release's source first on
`sys.path` and answers every import *made by an sglang module* that no real finder can satisfy
with an inert module, so the real code runs unchanged. Imports made by transformers and the
standard library are never answered, so transformers keeps seeing a machine without torch.

`exec_subset(path, ...)` runs the parts of a module whose top level needs torch statement by
statement: statements that fail are skipped and recorded, functions and classes are kept.
"""

import __future__
import ast
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import logging
import os
import sys
import types

# Families never installed in the harness's venv: stubbed even when a submodule is asked for by
# a non-sglang module (e.g. a half-imported torch.* from inside a stubbed package).
_HEAVY_ROOTS = {"torch", "torchvision", "torchaudio", "triton", "sgl_kernel", "flashinfer"}
# SGLang's own kernel and layer packages: torch code through and through, and no classification
# fact lives there (model_config.py imports only the quantization method names from them).
_HEAVY_SGLANG = ("sglang.srt.layers",)

SKIPPED = []  # "file:line what" for statements exec_subset could not run


class Inert:
    """Stands in for any value an absent module would have provided."""

    def __init__(self, name="inert", *_args, **_kwargs):
        object.__setattr__(self, "_name", name if isinstance(name, str) else "inert")

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Inert(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        # Used as a bare decorator: hand the decorated function back unchanged.
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Inert):
            return args[0]
        return Inert(f"{self._name}()")

    def __mro_entries__(self, _bases):
        # `class X(torch.nn.Module)`: a plain base class with a permissive constructor. Plain
        # `type`, so it combines with ABCMeta, EnumMeta and other metaclasses in the bases.
        return (type(self._name.rsplit(".", 1)[-1], (), {
            "__init__": lambda self, *a, **k: None,
            "__init_subclass__": classmethod(lambda cls, **kw: None),
        }),)

    def __getitem__(self, _key):
        return self

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __bool__(self):
        return False

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0

    def __or__(self, _other):
        return self

    __ror__ = __or__

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def __lt__(self, _other):
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        return False

    def __repr__(self):
        return f"<inert {self._name}>"


class InertModule(types.ModuleType):
    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []
        self.__file__ = f"<inert {name}>"

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        # Optional accelerator namespaces must look absent, so SGLang's platform probes say "no".
        if self.__name__ == "torch" and attr in {"npu", "musa", "hpu", "mlu", "xpu", "mps"}:
            raise AttributeError(attr)
        value = Inert(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class _InertLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return InertModule(spec.name)

    def exec_module(self, module):
        if module.__name__ == "torch":
            module.__version__ = "2.9.1"
        elif module.__name__ == "torch.cuda":  # no GPU
            module.is_available = lambda *a, **k: False
            module.device_count = lambda *a, **k: 0
            module.get_device_capability = lambda *a, **k: (0, 0)
        elif module.__name__ == "torch.version":
            module.cuda = module.hip = None


def _asked_by_sglang():
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith("<frozen") or "importlib" in filename or filename == __file__:
            frame = frame.f_back
            continue
        return str(frame.f_globals.get("__name__", "")).startswith("sglang")
    return False


def _inert_spec(fullname):
    return importlib.machinery.ModuleSpec(fullname, _InertLoader(), is_package=True)


class _HeavyFinder(importlib.abc.MetaPathFinder):
    """First on the path: torch & co. are never imported for real, even if installed."""

    def find_spec(self, fullname, path=None, target=None):
        root = fullname.split(".")[0]
        if fullname == _HEAVY_SGLANG[0] or fullname.startswith(tuple(p + "." for p in _HEAVY_SGLANG)):
            return _inert_spec(fullname)
        if root in _HEAVY_ROOTS and ("." in fullname or _asked_by_sglang()):
            return _inert_spec(fullname)
        return None


class _FallbackFinder(importlib.abc.MetaPathFinder):
    """Last on the path: a module no real finder has, asked for by sglang, becomes inert."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "sglang" or not _asked_by_sglang():
            return None
        parent = sys.modules.get(fullname.split(".")[0])
        if "." in fullname and parent is not None and not isinstance(parent, InertModule):
            if not fullname.startswith("sglang."):
                return None
        return _inert_spec(fullname)


def install(src):
    """Make `src/sglang` importable with inert stand-ins for what it cannot have here."""
    import transformers.utils.import_utils as import_utils

    # Settle transformers' cached availability answers before any stand-in exists.
    for name in dir(import_utils):
        if name.startswith("is_") and name.endswith("_available"):
            with contextlib.suppress(Exception):
                getattr(import_utils, name)()
    _tolerate_reregistration()
    logging.disable(logging.WARNING)
    sys.path.insert(0, src)
    sys.meta_path.insert(0, _HeavyFinder())
    sys.meta_path.append(_FallbackFinder())


def _ignore(*_args, **_kwargs):
    return None


def _tolerate_reregistration():
    """Releases pinned to an older transformers register model types (e.g. `qwen3_asr`) that
    the harness's newer transformers already has; the release's own class then wins, as it would
    on the transformers the release pins."""
    import transformers

    import transformers.utils.import_utils as import_utils

    # Without torch, transformers 5.12 hands out placeholder classes (metaclass DummyObject) for
    # the image/video processor registries that refuse every use; SGLang registers processors on
    # them at import, which classification never reads, so `register` is accepted and ignored.
    dummy = getattr(import_utils, "DummyObject", None)
    if dummy is not None:
        refuse = dummy.__getattribute__

        def accept_register(cls, key):
            return _ignore if key == "register" else refuse(cls, key)

        dummy.__getattribute__ = accept_register

    for name in ("AutoConfig", "AutoTokenizer", "AutoProcessor", "AutoImageProcessor",
                 "AutoFeatureExtractor", "AutoVideoProcessor"):
        try:
            register = getattr(transformers, name).register
        except (AttributeError, ImportError):
            continue
        if register is _ignore:
            continue
        auto = getattr(transformers, name)

        def tolerant(*args, _register=register, **kwargs):
            kwargs["exist_ok"] = True
            return _register(*args, **kwargs)

        setattr(auto, "register", tolerant)


def quietly(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def drop_annotations(fn):
    """Annotations are evaluated at definition time; some name types that need torch here."""
    fn.returns = None
    arguments = fn.args
    for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs:
        arg.annotation = None
    for arg in (arguments.vararg, arguments.kwarg):
        if arg is not None:
            arg.annotation = None


def module_from_subset(path, modname):
    """A module named `modname` holding what exec_subset runs of `path` (not put in
    sys.modules)."""
    module = types.ModuleType(modname)
    module.__dict__.update(exec_subset(path, modname))
    return module


def exec_subset(path, modname, keep_classes=()):
    """Run `path` statement by statement in a fresh namespace; failing statements are skipped.

    Classes named in `keep_classes` are defined with only their methods and properties (class
    bodies of those may reference values that need torch at class-creation time).
    """
    with open(path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), path)
    namespace = {"__name__": modname, "__file__": path, "__builtins__": __builtins__}
    # Statements compile one at a time, so the module's future import must be passed along.
    flags = 0
    if any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
           and any(a.name == "annotations" for a in n.names) for n in tree.body):
        flags = __future__.annotations.compiler_flag
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.ClassDef) and node.name in keep_classes:
            for fn in node.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    drop_annotations(fn)
            node = ast.copy_location(ast.ClassDef(
                name=node.name, bases=[], keywords=[], type_params=[],
                body=[n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))],
                decorator_list=[],
            ), node)
        module = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[]))
        try:
            quietly(exec, compile(module, path, "exec", flags=flags, dont_inherit=True), namespace)
        except Exception as e:  # a statement that needs what is absent here
            SKIPPED.append(f"{os.path.basename(path)}:{node.lineno} {type(e).__name__}: {e}")
    return namespace


def release_main(usage, run):
    """The entry of every release-side script, `python3 SCRIPT SGLANG_SRC < scenarios.json`:
    `run(src, scenarios)` with the release's unpacked sources and the scenarios read from stdin,
    and what it returns printed on stdout as JSON, which the harness's driver reads. Exits with
    `usage` unless the command line names the sources."""
    if len(sys.argv) != 2:
        sys.exit(usage)
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
    return 0
