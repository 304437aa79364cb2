"""kvpilot's connector for SGLang: `kvpilot_sglang.hicache.KvpilotStorage` is a HiCache L3
storage backend (`--hicache-storage-backend dynamic`) backed by the kvpilot cache sidecar.

Standard library plus the torch and SGLang already in SGLang's image; `kvpilot install-connector
DIR` writes this package into DIR. See docs/cache-runtime.md in the kvpilot repository.
"""
