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
