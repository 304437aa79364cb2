"""The `generate` / `check` step shared by the tables the harness derives from the release wheels
(src/layout/served_architectures.tsv, src/sglang/server_cli.tsv)."""

import difflib
import sys


def generate_or_check(mode, path, text, label, count, regenerate):
    """Writes `text` to `path` (`generate`), or compares them (`check`): 0 when current, 1 and a
    unified diff when stale. `label` starts each line printed, `count` says what the table holds,
    `regenerate` is the command that rewrites it."""
    if mode == "generate":
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return 0
    with open(path, encoding="utf-8") as f:
        current = f.read()
    if current == text:
        print(f"{label}: {path} is current ({count})")
        return 0
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True), path, "regenerated"))
    print(f"{label}: {path} is stale; regenerate with `{regenerate}`")
    return 1
