"""Claims on a shared cache's entries: the process that makes an entry's claim file computes it, others wait for it.

Test workers running side by side (pytest -n) and the commands they start share the session's caches (compile reports,
checker explorations); a claim makes an entry both ask for computed once. A claim file holds its owner's pid: a dead
owner's claim is taken over, and so is an empty one older than EMPTY_CLAIM_S (an owner that died between making the
file and writing its pid). Two processes taking over one dead claim at once may both compute the entry: that costs
time, not correctness (entries are stored whole, by rename).
"""

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
EMPTY_CLAIM_S = 5.0
"""How long a claim file may stay empty before it counts as its owner's death (the write takes microseconds)."""


def claim(path: Path) -> bool:
    """Whether this process takes the entry claimed by `path`: it made the claim file (or took a dead owner's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if claimed_by_other(path):
                return False
            path.unlink(missing_ok=True)  # its owner is gone without a result
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def claimed_by_other(path: Path) -> bool:
    """Whether another live process holds the claim `path`."""
    try:
        owner = int(path.read_text() or 0)
        if owner == 0:  # a claim being written is someone's, unless its writer died before writing
            return time.time() - path.stat().st_mtime < EMPTY_CLAIM_S
    except (FileNotFoundError, ValueError):
        return False
    if owner == os.getpid():
        return False
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def release(path: Path) -> None:
    """Give up this process's claim `path` (another's is left alone)."""
    try:
        if int(path.read_text() or 0) == os.getpid():
            path.unlink(missing_ok=True)
    except (FileNotFoundError, ValueError):
        pass


def store_whole(path: Path, data: bytes) -> None:
    """Write `data` into a part file of this process, then rename it into `path`: readers in other processes see the
    whole entry or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f"{path.suffix}.{os.getpid()}.part")
    part.write_bytes(data)
    part.replace(path)


def once(path: Path, claim_path: Path, load: Callable[[Path], T], compute: Callable[[], T],
         store: Callable[[Path, T], None]) -> T:
    """The entry at `path`: loaded if there, else computed and stored by this process if it claims it, else loaded
    once its owner stored it (computed here after all if the owner died without storing it)."""
    while not path.exists():
        if claim(claim_path):
            try:
                if path.exists():  # stored between the look and the claim
                    break
                value = compute()
                store(path, value)
                return value
            finally:
                release(claim_path)
        while claimed_by_other(claim_path) and not path.exists():
            time.sleep(0.05)
    return load(path)
