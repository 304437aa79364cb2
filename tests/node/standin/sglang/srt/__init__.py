"""Part of kvpilot's test stand-in for SGLang (not SGLang): see sglang/__init__.py."""
