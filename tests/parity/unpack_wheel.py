#!/usr/bin/env python3
"""Unpack sglang/srt/ of a release wheel, and the kernel-side Python files the harness runs with
it (KERNEL_FILES, where the wheel has them), and write DEST/transformers.pin with the transformers
version the release pins (its METADATA), which picks the harness venv that runs it.
Usage: unpack_wheel.py WHEEL DEST"""

import os
import re
import sys
import zipfile


# The DeepSeek-V4 KV layouts (KVLayout), which the pool's PD layout description is made of (P3).
KERNEL_FILES = ("sglang/kernels/ops/attention/dsv4/kv_layout.py",)


def main(wheel, dest):
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.startswith("sglang/srt/") or m in KERNEL_FILES]
        if not members:
            sys.exit(f"{wheel}: no sglang/srt/ inside")
        archive.extractall(dest, members)
        metadata = next(m for m in archive.namelist() if m.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode("utf-8")
    pin = re.search(r"^Requires-Dist: transformers==([0-9][^\s;]*)", text, re.MULTILINE)
    if pin is None:
        sys.exit(f"{wheel}: METADATA pins no transformers version")
    with open(os.path.join(dest, "transformers.pin"), "w", encoding="utf-8") as f:
        f.write(pin.group(1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
