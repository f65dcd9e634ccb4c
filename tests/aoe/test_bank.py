"""The knowledge bank (pycann/aoe/bank.py): storage, keys, errors, the config knob."""

from __future__ import annotations

from pathlib import Path

import pytest

from pycann.aoe.bank import FILENAME, BankError, BankKey, BankRecord, KnowledgeBank, canonical, open_bank
from pycann.config import ConfigError, tune_bank_dir


def key(**kw: object) -> BankKey:
    base: dict[str, object] = dict(kind="kernel", op_type="Conv", shapes=((1, 8, 16, 16), (8, 8, 3, 3)),
                                   dtypes=("float32", "float32"), formats=("NCHW", "NCHW"),
                                   attrs=canonical({"group": 1}), soc_version="CPU:test", kit_version="pycann test")
    base.update(kw)
    return BankKey(**base)  # type: ignore[arg-type]


def test_put_get_round_trip_and_replace(tmp_path: Path) -> None:
    bank = KnowledgeBank(tmp_path)
    assert bank.get(key()) is None
    assert not (tmp_path / FILENAME).exists(), "a read must not create the bank"
    bank.put(BankRecord(key(), {"algorithm": "numpy:im2col_gemm"}, 10.0, 25.0, 6, {"times_us": {"a": 1.5}}))
    rec = KnowledgeBank(tmp_path).get(key())  # a second connection sees the committed row
    assert rec is not None and rec.choice == {"algorithm": "numpy:im2col_gemm"}
    assert (rec.cost_us, rec.baseline_us, rec.trials, rec.detail) == (10.0, 25.0, 6, {"times_us": {"a": 1.5}})
    assert rec.speedup == pytest.approx(2.5)
    bank.put(BankRecord(key(), {"algorithm": "onednn:conv_nhwc"}, 8.0, 25.0, 6))
    assert bank.get(key()).choice == {"algorithm": "onednn:conv_nhwc"}  # type: ignore[union-attr]
    assert bank.count() == 1 and bank.count("kernel") == 1 and bank.count("graph") == 0


@pytest.mark.parametrize("field,value", [("kit_version", "pycann 9.9"), ("soc_version", "CPU:other"),
                                         ("shapes", ((1, 8, 32, 32), (8, 8, 3, 3))), ("dtypes", ("float16", "float16")),
                                         ("formats", ("NHWC", "NHWC")), ("attrs", canonical({"group": 2}))])
def test_every_key_part_separates_records(tmp_path: Path, field: str, value: object) -> None:
    bank = KnowledgeBank(tmp_path)
    bank.put(BankRecord(key(), {"algorithm": "a"}, 1.0, 1.0, 1))
    assert bank.get(key(**{field: value})) is None


def test_not_a_bank_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / FILENAME).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(BankError, match=r"bank\.sqlite.*cannot be used.*TUNE_BANK_PATH"):
        KnowledgeBank(tmp_path).get(key())


def test_bad_kind_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind 'tilings'"):
        KnowledgeBank(tmp_path).put(BankRecord(key(kind="tilings"), {}, 1.0, 1.0, 1))


def test_bank_folder_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CANN's order: the option, then TUNE_BANK_PATH, then the default folder."""
    monkeypatch.setenv("TUNE_BANK_PATH", str(tmp_path / "env"))
    assert tune_bank_dir() == tmp_path / "env"
    assert tune_bank_dir(str(tmp_path / "opt")) == tmp_path / "opt"
    monkeypatch.delenv("TUNE_BANK_PATH")
    assert tune_bank_dir() == Path.home() / ".cache" / "pycann" / "aoe"
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("TUNE_BANK_PATH", str(tmp_path / "file"))
    with pytest.raises(ConfigError, match="TUNE_BANK_PATH=.*is a file"):
        tune_bank_dir()
    assert open_bank(tmp_path / "b") is open_bank(tmp_path / "b")



_FORK_INSIDE_BANK = """import os, signal, threading, time
from pycann.aoe.bank import BankRecord, open_bank
from tests.aoe.test_bank import key
bank = open_bank({folder!r})
bank.put(BankRecord(key(), {{"algorithm": "a"}}, 1.0, 2.0, 3))
assert bank.get(key()) is not None  # (the connection is open at the fork)
inside, left = threading.Event(), threading.Event()
def query():  # a thread inside sqlite (as every use of it, under the bank's lock) for a while
    with bank._lock:
        inside.set()
        time.sleep(1.0)
        left.set()
t = threading.Thread(target=query)
t.start()
inside.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(10)
    if not left.is_set():
        os._exit(5)  # forked while the thread was inside: its lock (and sqlite's mutexes) stay taken here
    rec = bank.get(key())
    bank.put(BankRecord(key(op_type="MatMul"), {{"algorithm": "b"}}, 1.0, 2.0, 3))
    ok = rec is not None and rec.choice == {{"algorithm": "a"}} and bank.count() == 2 and open_bank(bank.folder) is bank
    os._exit(0 if ok else 3)
code = os.waitpid(pid, 0)[1]
t.join()
print("child", code, bank.count())
"""


def test_fork_waits_for_a_thread_inside_the_bank_and_the_child_reads_it(tmp_path: Path) -> None:
    """A thread of the parent inside the bank at a fork (a background plan build's kernel selection,
    while a ``multiprocessing`` 'fork' child starts) left the bank's lock taken in the child, whose first
    plan build waited forever; a fresh lock was not enough either (a child's new sqlite connection hung
    on a mutex of sqlite's own that the thread held). A fork now waits for the thread to leave the bank;
    the child opens its own connection and reads and writes the bank (the parent's stays usable)."""
    from tests.forking import run_script

    res = run_script(tmp_path, _FORK_INSIDE_BANK.format(folder=str(tmp_path)))
    assert res.returncode == 0 and "child 0 2" in res.stdout, res.stdout + res.stderr
