#!/usr/bin/env python3
"""One SGLang release's own server argument parser on the command lines kvpilot renders.

Usage: server_argv.py SGLANG_SRC < argvs.json    (a JSON list of {"id", "argv"})
Prints {"results": [{"id", "error": argparse's message or null, "postInit": ...}]}.

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
import contextlib
import io
import json
import sys
import traceback

import sglang_env


class ArgumentError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse's parser, raising instead of printing usage and exiting."""

    def error(self, message):
        raise ArgumentError(message)


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


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    cases = json.load(sys.stdin)
    sglang_env.install(argv[1])
    from sglang.srt.server_args import ServerArgs  # noqa: E402  (the release's own module)

    results = []
    for case in cases:
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
        results.append({"id": case["id"], "error": None, "postInit": post_init(ServerArgs, namespace)})
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
