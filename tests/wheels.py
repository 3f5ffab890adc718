"""Wheels made by hand for tests and studies: a package at a version, its modules given as
text, installable by pip and uv from a `--find-links` folder (no build, no index)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping
from pathlib import Path


def make_wheel(folder: Path, name: str, version: str, files: Mapping[str, str]) -> Path:
    """`name`-`version`-py3-none-any.whl in `folder`, holding `files` (path -> text)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    entries = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: perfguard-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{info}/top_level.txt": "".join(sorted({p.split("/")[0] + "\n" for p in files})),
    }
    record = []
    for path, text in entries.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        for path, text in entries.items():
            out.writestr(path, text)
        out.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel
