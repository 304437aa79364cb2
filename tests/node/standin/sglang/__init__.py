"""kvpilot's test stand-in for SGLang: NOT SGLang.

The node tests (tests/node_pods.rs) run kvpilot's pods on a real kubelet without GPUs, so the
servers' image is this stand-in (scripts/image.sh build-standin): `python3 -m
sglang.launch_server` accepts the command line kvpilot renders, serves `/health` on `--port`,
and with kvpilot's HiCache backend on its command line loads the connector from PYTHONPATH and
moves pages through the cache sidecar as SGLang's HiCache would. It loads no model and serves no
tokens. The real SGLang's parsers and HiCache code are tested elsewhere (scripts/parity.sh,
scripts/l3-contract.sh).
"""

STAND_IN = "kvpilot test stand-in (not SGLang)"
