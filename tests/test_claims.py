"""tilepipe.verify.claims: processes asking for one cache entry at once compute it once; a dead owner's claim is
taken over."""

import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from tilepipe.verify import claims


def slow_entry(directory: str) -> str:
    """The entry "value" of `directory`, computed in 0.5 s by whichever process claims it; each computation leaves a
    line in `computed`."""
    def compute() -> str:
        with open(Path(directory) / "computed", "a") as log:
            log.write("x\n")
        time.sleep(0.5)
        return "value"

    path = Path(directory) / "entry"
    return claims.once(path, path.with_suffix(".claim"), Path.read_text, compute, Path.write_text)


def test_processes_asking_at_once_compute_an_entry_once(tmp_path):
    with ProcessPoolExecutor(3, mp_context=get_context("spawn")) as pool:
        values = list(pool.map(slow_entry, [str(tmp_path)] * 3))
    assert values == ["value"] * 3
    assert (tmp_path / "computed").read_text() == "x\n"
    assert not (tmp_path / "entry.claim").exists()


def test_a_dead_owners_claim_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "entry.claim").write_text(dead.stdout.strip())
    assert slow_entry(str(tmp_path)) == "value"
    assert (tmp_path / "computed").read_text() == "x\n"


def test_an_empty_claim_counts_as_its_owners_death_once_it_is_old(tmp_path):
    """An owner that died between making the claim file and writing its pid leaves it empty: fresh, it is someone's
    claim being written; older than EMPTY_CLAIM_S, it is taken over (else its waiters would wait for ever)."""
    path = tmp_path / "entry.claim"
    path.write_text("")
    assert claims.claimed_by_other(path)
    old = time.time() - claims.EMPTY_CLAIM_S - 1
    os.utime(path, (old, old))
    assert not claims.claimed_by_other(path)
    assert slow_entry(str(tmp_path)) == "value"
