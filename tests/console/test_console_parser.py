"""core/console_reader: lines → points, table-driven (pure, no process). The real formats are in test_corpus.py."""

from __future__ import annotations

import pytest

from core.console_reader.gate import REPEAT, SeriesGate, suggest_regex
from core.console_reader.job import MAX_LINE_CHARS, MAX_SERIES, ConsoleMetrics, Point, compile_patterns, split_lines
from core.console_reader.steps import role
from core.console_reader.tokens import read_line

P = Point

# (line, its pairs as (key, value)): the tokeniser alone.
PAIRS = [
    ("loss: 0.25", [("loss", 0.25)]),
    ("loss=0.25, acc=0.9", [("loss", 0.25), ("acc", 0.9)]),
    ("val/accuracy 91.5", [("val/accuracy", 91.5)]),
    ("'learning_rate': 5e-05", [("learning_rate", 5e-05)]),
    ("time 40.12ms | mfu -100.00%", [("time", 40.12), ("mfu", -100.0)]),
    ("Loss 6.9012e+00 (6.9100e+00)", [("Loss", 6.9012), ("Loss (avg)", 6.91)]),
    ("tok/sec: 1,023,456", [("tok/sec", 1023456.0)]),
    ("lr=[0.0001]", [("lr", 0.0001)]),
    ("D(x): 0.9 D(G(z)): 0.1", [("D(x)", 0.9), ("D(G(z))", 0.1)]),
    # Only looks numeric: no pair.
    ("date: 2024-01-05", []),
    ("2024-01-05 12:30:01 starting", []),
    ("version: 1.2.3", []),
    ("torch 2.14.1", []),
    ("Python 3.10.12 (main)", []),
    ("path: /data/shakespeare/train.bin", []),
    ("saving to out/ckpt_1000.pt", []),
    ("time: 12:30:01", []),
    ("listening on 10.0.0.1:8080", []),
    ("[logging.py:96:log_dist] [Rank 0]", []),
    ("a 3x3 kernel", []),
    ("Mon Dec  7 01:00:00 2026", []),
    ("Downloading: 100%|██████████| 9912422/9912422 [00:01<00:00, 5.2MB/s]", []),
]


@pytest.mark.parametrize(("line", "want"), PAIRS)
def test_a_line_splits_into_its_key_value_pairs(line: str, want: list[tuple[str, float]]) -> None:
    assert [(p.key, pytest.approx(p.value)) for p in read_line(line).pairs] == want


@pytest.mark.parametrize(
    ("key", "want"),
    [("step", "step"), ("iter", "step"), ("global_step", "step"), ("num_updates", "step"), ("Iter(train)", "step"),
     ("Train Epoch", "epoch"), ("end of epoch", "epoch"), ("Epoch(train)", "epoch"), ("batches", "batch"),
     ("max_steps", None), ("warmup_steps", None), ("loss", None), ("steps_per_epoch", None)],
)  # fmt: skip
def test_which_keys_are_counters(key: str, want: str | None) -> None:
    assert role(key) == want


# Lines a script prints once (or on every line, but that only look numeric): never a series, however often.
ONE_OFF = [
    "Namespace(batch_size=64, epochs=14, lr=1.0, gamma=0.7, seed=1, log_interval=10)",
    "number of parameters: 10.65M",
    "2024-01-05 12:30:01 INFO starting",
    "torch 2.14.1+cu121",
    "saving checkpoint to out/ckpt_1000.pt",
    "[2024-01-01 10:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] hello",
]


def test_lines_that_only_look_numeric_make_no_series() -> None:
    c = ConsoleMetrics()
    text = "".join(line + "\n" for line in ONE_OFF[:2])  # once: a config dump, a count
    text += "".join(line + "\n" for line in ONE_OFF[2:] for _ in range(10))  # ten times over: nothing numeric
    assert c.feed(text) == []
    assert c.summary()["series"] == [] and c.summary()["lines"] == 2 + 4 * 10


def test_a_key_is_a_series_once_it_repeats_and_keeps_its_first_points() -> None:
    c = ConsoleMetrics()
    assert c.feed("step 1 loss 0.9\nstep 2 loss 0.8\n") == []  # held: not yet a series
    assert c.feed("step 3 loss 0.7\n") == [P(1, "loss", 0.9), P(2, "loss", 0.8), P(3, "loss", 0.7)]
    assert c.feed("step 4 loss 0.6\n") == [P(4, "loss", 0.6)]
    assert c.summary()["series"] == ["loss"] and c.summary()["example"] == "step 3 loss 0.7"
    assert REPEAT == 3


def test_nothing_recognised_suggests_a_pattern_from_the_most_frequent_numeric_line() -> None:
    c = ConsoleMetrics()
    c.feed("starting\n" + "".join(f"{i} 0.{9 - i} done\n" for i in range(5)) + "took 12 s\n")
    s = c.summary()
    assert s["series"] == [] and s["suggestion"]["line"] == "0 0.9 done"
    assert s["suggestion"]["regex"] == r"^(?P<step>\d+)\s+(?P<value>[-+0-9.eE]+)\s+done$"
    patterns = compile_patterns([{"regex": s["suggestion"]["regex"], "name": "metric"}])
    again = ConsoleMetrics(defaults=False, patterns=patterns)
    assert again.feed("3 0.6 done\n4 0.5 done\n") == [P(3, "metric", 0.6), P(4, "metric", 0.5)]


def test_suggested_regexes_escape_the_line() -> None:
    assert suggest_regex("[a] x=1 (y)") == r"^\[a\]\s+x=(?P<value>[-+0-9.eE]+)\s+\(y\)$"
    assert SeriesGate().suggestion() is None


def test_a_step_counter_gives_steps_to_the_lines_without_one() -> None:
    c = ConsoleMetrics()
    text = "".join(f"step: {s}\nloss: {1 / s:.2f}\n" for s in (10, 20, 30))
    assert c.feed(text) == [P(10, "loss", 0.1), P(20, "loss", 0.05), P(30, "loss", 0.03)]
    assert c.step == 30


def test_before_any_counter_a_name_counts_its_own_points() -> None:
    c = ConsoleMetrics()
    assert c.feed("{'loss': 2.0}\n{'loss': 1.5}\n{'loss': 1.0}\n") == [
        P(0, "loss", 2.0),
        P(1, "loss", 1.5),
        P(2, "loss", 1.0),
    ]
    assert c.step is None


def test_carriage_return_redraws_are_lines_and_a_partial_line_waits() -> None:
    c = ConsoleMetrics()
    bar = " {n}/5 [00:0{n}<00:01, loss={v}]"
    text = "\r".join(bar.format(n=n, v=v) for n, v in ((1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6)))
    assert c.feed(text) == [P(1, "loss", 0.9), P(2, "loss", 0.8), P(3, "loss", 0.7)]  # the fourth is being drawn
    assert c.feed("\r") == [P(4, "loss", 0.6)]
    assert (c.step, c.total) == (4, 5)
    c.feed(bar.format(n=5, v=0.5))
    assert c.flush() == [P(5, "loss", 0.5)]


def test_colours_are_dropped_and_lines_cut() -> None:
    assert split_lines("\x1b[32mloss: 0.5\x1b[0m\n") == ["loss: 0.5"]
    assert len(split_lines("x" * (3 * MAX_LINE_CHARS))[0]) == MAX_LINE_CHARS


def test_a_long_line_is_read_in_one_pass() -> None:
    # A pathological line (what would make a backtracking regex crawl) reads like any other: every pair found.
    line = " ".join(f"k{i}: {i}.5" for i in range(300))[:MAX_LINE_CHARS]
    assert len(read_line(line).pairs) > 250
    assert read_line("1" * MAX_LINE_CHARS).pairs == [] and read_line("a:" * 2000).pairs == []


def test_series_past_the_cap_are_dropped() -> None:
    c = ConsoleMetrics()
    points = c.feed("".join("".join(f"m{i}: 1.0\n" for i in range(MAX_SERIES + 5)) for _ in range(REPEAT)))
    assert len({p.name for p in points}) == MAX_SERIES and c.dropped_names > 0


def test_defaults_off_and_a_user_pattern_with_named_groups() -> None:
    patterns = compile_patterns([
        {"regex": r"^\[(?P<step>\d+)\] (?P<key>\w+)=(?P<value>[-0-9.e]+)"},
        {"regex": r"score is (?P<value>[0-9.]+)", "name": "score"},
    ])  # fmt: skip
    c = ConsoleMetrics(defaults=False, patterns=patterns)
    got = c.feed("[3] loss=0.5\nloss: 0.9\nthe score is 7.5\n")
    assert got == [P(3, "loss", 0.5), P(3, "score", 7.5)]
    assert c.step == 3


def test_user_patterns_add_to_the_defaults_and_are_never_held() -> None:
    c = ConsoleMetrics(patterns=compile_patterns([{"regex": r"bleu (?P<value>[0-9.]+)", "name": "bleu"}]))
    got = c.feed("iter 2: loss 1.5\nvalid bleu 27.1\niter 3: loss 1.4\niter 4: loss 1.3\n")
    assert got == [P(2, "bleu", 27.1), P(2, "loss", 1.5), P(3, "loss", 1.4), P(4, "loss", 1.3)]
