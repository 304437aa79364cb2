#!/usr/bin/env python3
"""Unpack only sglang/srt/ of a release wheel: usage unpack_wheel.py WHEEL DEST."""

import sys
import zipfile


def main(wheel, dest):
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.startswith("sglang/srt/")]
        if not members:
            sys.exit(f"{wheel}: no sglang/srt/ inside")
        archive.extractall(dest, members)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
