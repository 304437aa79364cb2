"""The SGLang releases the parity harness covers: one hashed requirements file per release in
tests/parity/wheels/ (`sglang==X --hash=sha256:...`), so adding a release is adding a file."""

import os
import re
from dataclasses import dataclass

WHEELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wheels")
_PIN = re.compile(r"^sglang==(\d+\.\d+\.\d+(?:\.post\d+)?)\s+--hash=sha256:([0-9a-f]{64})\s*$")


@dataclass(frozen=True)
class Release:
    version: str
    sha256: str
    requirements: str


def version_key(version):
    """Orders 0.5.9 < 0.5.10 < 0.5.10.post1."""
    parts = version.split(".")
    post = int(parts[3][4:]) if len(parts) > 3 else -1
    return tuple(int(p) for p in parts[:3]) + (post,)


def _load():
    releases = []
    for name in sorted(os.listdir(WHEELS_DIR)):
        path = os.path.join(WHEELS_DIR, name)
        pins = [m for m in (_PIN.match(line) for line in open(path, encoding="utf-8")) if m]
        if len(pins) != 1:
            raise SystemExit(f"{path}: expected exactly one `sglang==X --hash=sha256:...` line")
        releases.append(Release(pins[0].group(1), pins[0].group(2), path))
    return sorted(releases, key=lambda r: version_key(r.version))


RELEASES = _load()


def release_python(src, venvs):
    """The venv holding the transformers version the release in `src` pins."""
    with open(os.path.join(src, "transformers.pin"), encoding="utf-8") as f:
        pin = f.read().strip()
    python = os.path.join(venvs, f"venv-{pin}", "bin", "python")
    if not os.access(python, os.X_OK):
        raise RuntimeError(f"{src} pins transformers=={pin}, but there is no {python}; add "
                           f"tests/parity/requirements-transformers-{pin}.txt")
    return python
