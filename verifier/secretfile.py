"""The one writer of secret files (KEKs, the dev signing key): mode 0600 from creation, never half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_secret(path: Path, data: bytes, *, replace: bool = True) -> bool:
    """Write `data` to `path` atomically (temporary file, then rename or link) with mode 0600.

    replace=False never overwrites a file another process created meanwhile; returns False then.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)
