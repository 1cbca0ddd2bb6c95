"""core/bundles/excluded.py and `rankzero submit --code`: what the upload leaves out, largest first, with the
ignore file and line that excluded each; a warning when the entrypoint names it; `!pattern` puts it back."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from cli.code import _say_what_is_left_out
from core import bundles
from core.bundles.excluded import Rule, excluded, report, warnings


def _tree(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "data" / "train.bin").write_bytes(b"x" * 3000)
    (root / "data" / "val.bin").write_bytes(b"x" * 1000)
    (root / "data" / "meta.pkl").write_bytes(b"x" * 10)
    (root / "out").mkdir()
    (root / "out" / "ckpt.pt").write_bytes(b"x" * 2000)
    (root / "out" / "log.txt").write_bytes(b"x" * 5)
    (root / ".gitignore").write_text("*.bin\n*.pkl\n# outputs\n\nout/\n")
    return root


def test_each_left_out_file_says_which_line_excluded_it_largest_first(tmp_path: Path) -> None:
    items = excluded(_tree(tmp_path))
    assert [(e.path, e.bytes, e.files, e.rule) for e in items] == [
        ("data/train.bin", 3000, 1, Rule(".gitignore", 1, "*.bin")),
        ("out/", 2005, 2, Rule(".gitignore", 5, "out/")),
        ("data/val.bin", 1000, 1, Rule(".gitignore", 1, "*.bin")),
        ("data/meta.pkl", 10, 1, Rule(".gitignore", 2, "*.pkl")),
    ]
    # exactly what pack leaves out
    packed = {f.path for f in bundles.collect(tmp_path)}
    assert packed == {".gitignore", "train.py"}
    lines = report(items, limit=2)
    assert lines[0] == "code: left out 5 files, 0.0 MB:"
    assert lines[1].split() == ["data/train.bin", "0.0", "MB", ".gitignore", "line", "1", "`*.bin`"]
    assert lines[3] == "  … and 2 more (0.0 MB)"


def test_rankzeroignore_puts_a_file_back_and_a_deeper_file_decides(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / ".rankzeroignore").write_text("!data/train.bin\n")
    (root / "data" / ".gitignore").write_text("!val.bin\n")
    assert [e.path for e in excluded(root)] == ["out/", "data/meta.pkl"]
    assert {"data/train.bin", "data/val.bin"} <= {f.path for f in bundles.collect(root)}


def test_the_entrypoint_naming_a_left_out_path_gets_a_warning(tmp_path: Path) -> None:
    items = excluded(_tree(tmp_path))
    (warning,) = warnings("train.py --data=./data/train.bin --out out/run1 --seed 3", items)[:1]
    assert warning.startswith(
        "warning: the entrypoint names ./data/train.bin, which .gitignore line 1 `*.bin` leaves out of the upload"
    )
    assert "add `!*.bin` (or `!data/train.bin`) to .rankzeroignore" in warning
    assert len(warnings("train.py --data=./data/train.bin --out out/run1 --seed 3", items)) == 2  # out/ too
    assert warnings("train.py --epochs 3", items) == [] and warnings(None, items) == []


def test_submit_prints_the_report_and_the_warning(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    _say_what_is_left_out(_tree(tmp_path), "train.py data/train.bin", console)
    text = console.export_text()
    assert "code: left out 5 files" in text and "data/train.bin" in text and ".gitignore line 5 `out/`" in text
    assert "warning: the entrypoint names data/train.bin" in text
    quiet = Console(record=True)
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "train.py").write_text("")
    _say_what_is_left_out(tmp_path / "clean", "train.py", quiet)
    assert quiet.export_text() == ""


# --- issue 27: --include, the record the bundle carries, the failure headline ------------------------------


def test_include_globs_win_over_the_ignore_files(tmp_path: Path) -> None:
    import pytest

    from core.bundles.include import Includes

    root = _tree(tmp_path)
    forced = Includes(["data/*.bin"])
    assert {f.path for f in bundles.collect(root, forced)} == {".gitignore", "train.py", "data/train.bin",
                                                               "data/val.bin"}  # fmt: skip
    assert [e.path for e in excluded(root, forced)] == ["out/", "data/meta.pkl"]
    (root / ".gitignore").write_text("data/\n")  # a folder left out whole is walked for what an include names
    assert {f.path for f in bundles.collect(root, Includes(["train.bin"]))} == {".gitignore", "train.py",
                                                                                  "data/train.bin", "out/ckpt.pt",
                                                                                  "out/log.txt"}  # fmt: skip
    for bad in ("", "!x", "../secret", "x" * 301):
        with pytest.raises(bundles.BundleError, match="--include"):
            Includes([bad])


def test_the_record_of_what_was_left_out_is_kept_beside_the_bundle(tmp_path: Path) -> None:
    from core.bundles.excluded import from_json, read_record, to_json, write_record
    from core.settings import Settings

    items = excluded(_tree(tmp_path / "src"))
    packed = bundles.pack(tmp_path / "src", tmp_path / "b.tar.gz")
    assert from_json(to_json(items)) == items
    settings = Settings(data_dir=tmp_path / "data")
    assert read_record(settings, packed.sha256) == []  # none sent
    bundles.store_dir(settings).mkdir(parents=True)
    write_record(settings, packed.sha256, items)
    assert read_record(settings, packed.sha256) == items
    bundles.remove(settings, packed.sha256)  # removed with its bundle
    assert read_record(settings, packed.sha256) == []
    assert from_json(b'{"entries": [{"path": 3}, "x", {"path": "a", "bytes": "NaN"}]}') == []  # checked, not trusted


def test_a_failure_opening_a_left_out_file_names_it_first(tmp_path: Path) -> None:
    from core.bundles.excluded import headline

    items = excluded(_tree(tmp_path))
    said = headline(
        "rank 0 failed with exit code 1: FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'",
        items,
    )
    assert said is not None
    assert said.startswith("data/train.bin was left out of the upload by .gitignore line 1 `*.bin`")
    inside = headline("FileNotFoundError: [Errno 2] No such file or directory: '<code>/out/ckpt.pt'", items)
    assert inside is not None and inside.startswith("out/ was left out of the upload by .gitignore line 5 `out/`")
    assert headline("No such file or directory: 'data/other.bin'", items) is None  # not one it left out
    assert headline("ValueError: bad shape", items) is None
