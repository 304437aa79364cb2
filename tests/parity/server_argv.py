#!/usr/bin/env python3
"""One SGLang release's own server argument parser on the command lines kvpilot renders.

Usage: server_argv.py SGLANG_SRC < argvs.json    (a JSON list of {"id", "argv"})
Prints {"results": [{"id", "error": argparse's message or null, "postInit": ..., "parsed": {...}}]}
(`parsed`: the parsed values prefill and decode must agree on, see PAIRED). `parse_only` runs
argparse alone (server_cli.py's corpus), where `-h`/`--help`, which prints the usage and exits,
gives HELP_EXIT as its error.

What runs is the release's `ServerArgs.add_cli_args` on `argparse.ArgumentParser(prog="sglang
serve")`, exactly as its `prepare_server_args` builds it, then `parse_args(argv)`: an unknown
flag, a bad choice, a value of the wrong type or a missing value is argparse's error, as the
server would print it before exiting. Then `ServerArgs.from_cli_args` runs the release's
post-parse checks (`__post_init__`) on a machine with no GPU: a ValueError, AssertionError or
NotImplementedError whose message is not about the missing hardware is a refusal
(`postInit: {"error": ...}`); anything that fails because torch, CUDA or a kernel is absent here
is reported as `postInit: {"skipped": ...}` and not judged.
"""

import argparse
import ast
import contextlib
import dataclasses
import io
import os
import sys
import traceback

import classify
import sglang_env


class ArgumentError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse's parser, raising instead of printing usage and exiting."""

    def error(self, message):
        raise ArgumentError(message)

    def exit(self, status=0, message=None):
        # Only `-h`/`--help` exits without an error: the server never starts.
        raise ArgumentError(HELP_EXIT)


# What kvpilot reports for `-h`/`--help` (src/sglang/server_cli.rs HELP_EXIT).
HELP_EXIT = "argument -h/--help: SGLang prints its help and exits without starting the server"


# What a prefill server and its decode servers must agree on (or the router relies on).
PAIRED = ("disaggregation_mode", "disaggregation_transfer_backend", "page_size", "kv_cache_dtype",
          "disaggregation_bootstrap_port")


# Post-init failures that come from this machine, not from the flags: the stubbed torch and
# kernels, no GPU, no network.
_HARDWARE_WORDS = ("cuda", "gpu", "inert", "torch", "device", "nvidia", "rocm", "hip", "npu", "memory",
                   "triton", "flashinfer", "sgl_kernel", "connection", "resolve", "download", "huggingface",
                   "repo", "config.json", "no such file", "not a directory", "does not appear to have")


def post_init(server_args_cls, namespace):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            server_args_cls.from_cli_args(namespace)
    except (ValueError, AssertionError, NotImplementedError) as e:
        message = str(e)
        if not message or any(word in message.lower() for word in _HARDWARE_WORDS):
            return {"skipped": f"{type(e).__name__}: {message}"[:300]}
        return {"error": message}
    except Exception as e:  # the stubs answer where hardware would
        return {"skipped": f"{type(e).__name__}: {e}"[:300]}
    return {"ok": True}


# Flags whose choices come from the tool-call and reasoning parser modules.
_PARSER_FLAGS = ("--tool-call-parser", "--reasoning-parser")
_PARSER_MODULES = ("sglang.srt.function_call.function_call_parser", "sglang.srt.parser.reasoning_parser")


def load_server_args():
    """The release's ServerArgs, and why the parser modules were stubbed ('' when they were not).
    Some releases import the OpenAI protocol models through the tool-call parser at the top of
    server_args; with the openai package absent their pydantic classes cannot be built. Those
    modules only give the choices of _PARSER_FLAGS, so they are stubbed and argvs using those
    flags are not judged."""
    try:
        from sglang.srt.server_args import ServerArgs
        return ServerArgs, ""
    except Exception as e:  # noqa: BLE001 - any import failure of the parser modules
        reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    for name in [m for m in sys.modules if m == "sglang.srt.server_args" or m.startswith(
            ("sglang.srt.entrypoints", "sglang.srt.function_call", "sglang.srt.parser"))]:
        del sys.modules[name]
    for name in _PARSER_MODULES:
        sys.modules[name] = sglang_env.InertModule(name)
    from sglang.srt.server_args import ServerArgs
    return ServerArgs, reason


def argument_parser():
    """The release's `sglang serve` parser (`ServerArgs.add_cli_args`), raising instead of exiting;
    for scripts that read what it parses, after `sglang_env.install`."""
    server_args_cls, _unloaded = load_server_args()
    parser = Parser(prog="sglang serve")
    server_args_cls.add_cli_args(parser)
    return parser


def field_defaults():
    """The plain defaults of the release's ServerArgs fields (a dataclass, or from 0.5.20 a msgspec
    Struct), for the fields without a command-line option (`no_cli`, such as those a config file
    resolves), which its parser does not set."""
    server_args_cls, _unloaded = load_server_args()
    if dataclasses.is_dataclass(server_args_cls):
        return {field.name: field.default for field in dataclasses.fields(server_args_cls)
                if field.default is not dataclasses.MISSING}
    import msgspec
    return {field.name: field.default for field in msgspec.structs.fields(server_args_cls)
            if field.default is not msgspec.NODEFAULT}


def release_parts(src):
    """What a script that runs one release's hooks on parsed argvs starts from: (the release's
    `sglang/srt` folder, the release as `classify.Release` loads it, its argument parser). The
    parser's pydantic-typed fields accept the harness's inert stand-ins."""
    sglang_env.Inert.__get_pydantic_core_schema__ = _any_schema
    release = classify.Release(src)
    return os.path.join(src, "sglang", "srt"), release, argument_parser()


def declare(server, _source, **fields):
    """`declare_resolution` on a parsed namespace: sets the fields a hook declares."""
    for name, value in fields.items():
        setattr(server, name, value)


# The resolution machinery a release's argument hooks read and write through, on a parsed
# namespace: both views hand it back, and declarations set its fields.
VIEWS = {"resolving_view": lambda view: view, "resolved_view": lambda view: view, "declare_resolution": declare}


@contextlib.contextmanager
def environment(env):
    """The process environment with `env` set, as the release's `envs` reads it, then restored."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def refusal(path, scenario, run):
    """The ValueError or AssertionError `run()` refuses the scenario's server with, or None; exits
    naming `path` and the scenario when it fails any other way (a piece of the release's code the
    harness cannot run is never taken for a verdict)."""
    try:
        run()
    except (ValueError, AssertionError) as e:
        return e
    except Exception as e:
        raise SystemExit(f"{path} failed on {scenario['id']} ({' '.join(scenario['argv'])}): "
                         f"{type(e).__name__}: {e}") from e
    return None


def refusal_result(path, scenario, run):
    """A script's result for one scenario, {"id", "raised", "message"}: the refusal `run()` meets
    (see `refusal`), run with the scenario's env where it has one."""
    with environment(scenario.get("env", {})):
        error = refusal(path, scenario, run)
    message = None if error is None else str(error)
    return {"id": scenario["id"], "raised": message is not None, "message": message}


def hook_function(srt, candidates, what):
    """(file, module, name, syntax tree) of the first of `candidates` ((file under sglang/srt,
    module, class or None, function)) the release defines; exits naming `what` when none is."""
    for relative, module, cls, name in candidates:
        path = os.path.join(srt, relative)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        scope = tree.body
        if cls is not None:
            scope = next((n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), [])
        fn = next((n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if fn is not None:
            return path, module, name, fn
    raise SystemExit(f"{srt}: no {what} in {[c[0] for c in candidates]}")


def statements_through(path, fn, marker, what):
    """The top-level statements of hook `fn` (from `path`) up to the first whose source holds
    `marker`; exits saying the hook no longer `what` where none does."""
    last = next((i for i, n in enumerate(fn.body) if marker in ast.unparse(n)), None)
    if last is None:
        raise SystemExit(f"{path}: {fn.name} no longer {what}")
    return fn.body[:last + 1]


def hook_globals(path, module):
    """The globals of the release's module `module` (file `path`): server_args.py's as imported,
    an argument-hook module's as `sglang_env.exec_subset` runs it."""
    if module == "sglang.srt.server_args":
        load_server_args()
        return vars(sys.modules[module])
    return sglang_env.exec_subset(path, module)


def deprecated_dp_attention(srt):
    """The release's `handle_deprecated_dp_attention` (arg_groups/parallel_hook.py), which turns
    `--dp-size N --enable-dp-attention` into `--attn-dp-size N` before any hook reads the DP
    layout, on the VIEWS stand-ins, where the release's pipeline runs it (0.5.22 on); else None."""
    pipeline = os.path.join(srt, "arg_groups", "pipeline.py")
    if not os.path.exists(pipeline):
        return None
    with open(pipeline, encoding="utf-8") as f:
        if "run_hook(handle_deprecated_dp_attention" not in f.read():
            return None
    path = os.path.join(srt, "arg_groups", "parallel_hook.py")
    hook = hook_globals(path, "sglang.srt.arg_groups.parallel_hook").get("handle_deprecated_dp_attention")
    if hook is None:
        raise SystemExit(f"{path}: handle_deprecated_dp_attention did not define")
    hook.__globals__.update(VIEWS)
    return hook


def _any_schema(_self, _source, _handler):
    from pydantic_core import core_schema
    return core_schema.any_schema()


def parse_only(server_args_cls, cases):
    """argparse's verdict on each argv, with one parser (parse_args keeps no state in it)."""
    parser = Parser(prog="sglang serve")
    server_args_cls.add_cli_args(parser)
    results = []
    for case in cases:
        try:
            # The deprecated actions print warnings; the help action prints the usage.
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                parser.parse_args(case["argv"])
            error = None
        except ArgumentError as e:
            error = str(e)
        except Exception:  # noqa: BLE001 - a custom action's own failure
            error = "harness: " + traceback.format_exc(limit=2)
        results.append({"id": case["id"], "error": error})
    return results


def main(src, cases):
    # server_args imports the OpenAI protocol models, whose pydantic fields name types of
    # packages the harness stubs (xgrammar): such a field accepts anything, as the stub does.
    sglang_env.Inert.__get_pydantic_core_schema__ = _any_schema
    sglang_env.install(src)
    ServerArgs, unloaded = load_server_args()

    results = []
    for case in cases:
        parsers = [flag for flag in _PARSER_FLAGS if any(a.split("=")[0] == flag for a in case["argv"])]
        if unloaded and parsers:
            results.append({"id": case["id"], "error": f"harness: the choices of {parsers} could not be loaded "
                            f"({unloaded}); this argv cannot be judged", "postInit": None})
            continue
        parser = Parser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                namespace = parser.parse_args(case["argv"])
        except ArgumentError as e:
            results.append({"id": case["id"], "error": str(e), "postInit": None})
            continue
        except Exception:
            results.append({"id": case["id"], "error": "harness: " + traceback.format_exc(limit=3),
                            "postInit": None})
            continue
        parsed = {name: getattr(namespace, name, None) for name in PAIRED}
        results.append({"id": case["id"], "error": None, "postInit": post_init(ServerArgs, namespace),
                        "parsed": parsed})
    return {"results": results}


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
