"""kvpilot's test stand-in for the SGLang router: NOT sglang-router.

`python3 -m sglang_router.launch_router` accepts the command line kvpilot renders, finds the
prefill and decode servers the way the real router's service discovery does (it lists pods by
its selectors through the Kubernetes API with the pod's ServiceAccount token), checks each one's
`/health` (and a prefill server's bootstrap port), and answers `/readiness` once it has a healthy
prefill and a healthy decode server. It routes no requests.
"""

STAND_IN = "kvpilot test stand-in (not sglang-router)"
