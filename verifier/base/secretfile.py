"""The one home of owner-only files: HERO_HOME and everything secret or personal in it are 0700 / 0600.

The database (job results name people; the audit log), KEKs, signing keys and dev keys are only ever
readable by the service's OS user, whatever the umask; secrets are written atomically, never half-written.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Creates `path` (and missing parents) owner-only; tightens it if it already exists."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        try:
            path.chmod(DIR_MODE)
        except OSError as exc:  # a read-only mount (a Kubernetes Secret volume): nobody can add files to it
            if exc.errno != errno.EROFS:
                raise
    return path


def write_secret(path: Path, data: bytes, *, replace: bool = True) -> bool:
    """Atomically writes an owner-only file. With replace=False an existing file wins (returns False)."""
    path = Path(path)
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # never replace a key another process created meanwhile
            return True
        except FileExistsError:
            return False
    finally:
        Path(tmp).unlink(missing_ok=True)


def restrict_files(paths: list[Path]) -> None:
    """chmod 0600 the files that exist (e.g. a SQLite database and its -wal / -shm companions)."""
    for p in paths:
        try:
            if p.stat().st_mode & 0o777 != FILE_MODE:
                p.chmod(FILE_MODE)
        except FileNotFoundError:
            continue
