#!/usr/bin/env python3
"""The SGLang router's own argument parsing on the router command lines kvpilot renders.

Usage: router_argv.py < cases.json    (a JSON list of {"id", "package", "argv"})
Prints {"results": [{"id", "error": argparse's message or null, "args": {...} or null}]}.

`package` is `sglang_router` (PyPI sglang-router 0.3.2) or `smg` (its successor, smg 1.13.0);
what runs is that package's `launch_router.parse_router_args(argv)`, exactly as
`python3 -m <package>.launch_router` calls it: argparse's refusal (it exits with status 2) is the
error, else the RouterArgs fields kvpilot relies on are returned as parsed.
"""

import contextlib
import importlib
import io
import json
import sys

FIELDS = ("pd_disaggregation", "service_discovery", "service_discovery_namespace", "service_discovery_port",
          "prefill_selector", "decode_selector", "selector", "policy", "host", "port", "prometheus_port",
          "prometheus_host", "prefill_urls", "decode_urls", "worker_urls", "bootstrap_port_annotation")


def parse(package, argv):
    launch_router = importlib.import_module(f"{package}.launch_router")
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parsed = launch_router.parse_router_args(list(argv))
    except SystemExit as e:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        return {"error": lines[-1] if lines else f"exit {e.code}", "args": None}
    args = {field: getattr(parsed, field) for field in FIELDS if hasattr(parsed, field)}
    return {"error": None, "args": json.loads(json.dumps(args, default=str))}


def main():
    cases = json.load(sys.stdin)
    results = [{"id": case["id"], **parse(case["package"], case["argv"])} for case in cases]
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()
