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
