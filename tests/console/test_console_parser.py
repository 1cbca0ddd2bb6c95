"""worker/console_metrics.py: the console's lines → points, table-driven (pure, no process)."""

from __future__ import annotations

import pytest

from worker.console_metrics import (
    MAX_LINE_CHARS,
    MAX_SERIES,
    ConsoleMetrics,
    Point,
    compile_patterns,
    parse_default,
    split_lines,
)

P = Point

# (line, points as (step, name, value); step None: the line names no step of its own)
LINES = [
    (
        "iter 10: loss 3.9123, time 40.12ms, mfu -100.00%",
        [(10, "loss", 3.9123), (10, "time", 40.12), (10, "mfu", -100.0)],
    ),
    ("step 20: train loss 3.1021, val loss 3.2113", [(20, "train loss", 3.1021), (20, "val loss", 3.2113)]),
    ("Step 5 | loss 0.25 | lr 6e-4", [(5, "loss", 0.25), (5, "lr", 6e-4)]),
    (
        "{'loss': 2.31, 'learning_rate': 5e-05, 'epoch': 0.5}",
        [(None, "loss", 2.31), (None, "learning_rate", 5e-05), (None, "epoch", 0.5)],
    ),
    ("Epoch 1: 40%|████      | 4/10 [00:01<00:02, 3.51it/s, loss=0.512, v_num=0]", [(14, "loss", 0.512)]),
    (" 40%|████      | 4/10 [00:01<00:02, 3.51it/s, loss=0.512]", [(4, "loss", 0.512)]),
    (
        "10/10 [==============================] - 1s 5ms/step - loss: 0.1234 - accuracy: 0.9000",
        [(None, "loss", 0.1234), (None, "accuracy", 0.9)],
    ),
    ("loss: 0.1 - acc: 0.9", [(None, "loss", 0.1), (None, "acc", 0.9)]),
    ("loss: 0.25", [(None, "loss", 0.25)]),
    ("val/accuracy: 91.5", [(None, "val/accuracy", 91.5)]),
    # Only looks numeric: no point.
    ("date: 2024-01-05", []),
    ("2024-01-05 12:30:01 starting", []),
    ("version: 1.2.3", []),
    ("torch 2.14.1", []),
    ("path: /data/shakespeare/train.bin", []),
    ("saving to out/ckpt_1000.pt", []),
    ("time: 12:30:01", []),
    ("FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated", []),
    ("Downloading: 100%|██████████| 9912422/9912422 [00:01<00:00, 5.2MB/s]", []),
    ("number of parameters: 10.65M", []),
]


@pytest.mark.parametrize(("line", "want"), LINES)
def test_one_line_makes_exactly_its_points(line: str, want: list[tuple[int | None, str, float]]) -> None:
    found = parse_default(line)
    got = [] if found is None else [(at, name, value) for name, value, at in found.values]
    assert got == want


def test_a_step_counter_gives_steps_to_the_lines_without_one() -> None:
    c = ConsoleMetrics()
    text = "Epoch 1/3\n5/5 [=====] - 0s - loss: 0.9 - acc: 0.5\nEpoch 2/3\n5/5 [=====] - 0s - loss: 0.7 - acc: 0.6\n"
    assert c.feed(text) == [P(1, "loss", 0.9), P(1, "acc", 0.5), P(2, "loss", 0.7), P(2, "acc", 0.6)]
    assert (c.step, c.total) == (2, 3)


def test_before_any_counter_a_name_counts_its_own_points() -> None:
    c = ConsoleMetrics()
    assert c.feed("{'loss': 2.0}\n{'loss': 1.5, 'epoch': 1.0}\n") == [
        P(0, "loss", 2.0),
        P(1, "loss", 1.5),
        P(0, "epoch", 1.0),
    ]
    assert c.step is None


def test_carriage_return_redraws_are_lines_and_a_partial_line_waits() -> None:
    c = ConsoleMetrics()
    bar = " {n}/4 [00:0{n}<00:01, loss={v}]"
    text = "\r".join(bar.format(n=n, v=v) for n, v in ((1, 0.9), (2, 0.8), (3, 0.7)))
    assert c.feed(text) == [P(1, "loss", 0.9), P(2, "loss", 0.8)]  # the third is still being drawn
    assert c.feed("\r") == [P(3, "loss", 0.7)]
    assert (c.step, c.total) == (3, 4)
    c.feed(bar.format(n=4, v=0.6))
    assert c.flush() == [P(4, "loss", 0.6)]


def test_colours_are_dropped_and_lines_cut() -> None:
    assert split_lines("\x1b[32mloss: 0.5\x1b[0m\n") == ["loss: 0.5"]
    assert len(split_lines("x" * (3 * MAX_LINE_CHARS))[0]) == MAX_LINE_CHARS


def test_series_past_the_cap_are_dropped() -> None:
    c = ConsoleMetrics()
    points = c.feed("".join(f"m{i}: 1.0\n" for i in range(MAX_SERIES + 5)))
    assert len(points) == MAX_SERIES and c.dropped_names == 5


def test_defaults_off_and_a_user_pattern_with_named_groups() -> None:
    patterns = compile_patterns([
        {"regex": r"^\[(?P<step>\d+)\] (?P<key>\w+)=(?P<value>[-0-9.e]+)"},
        {"regex": r"score is (?P<value>[0-9.]+)", "name": "score"},
    ])  # fmt: skip
    c = ConsoleMetrics(defaults=False, patterns=patterns)
    got = c.feed("[3] loss=0.5\nloss: 0.9\nthe score is 7.5\n")
    assert got == [P(3, "loss", 0.5), P(3, "score", 7.5)]
    assert c.step == 3


def test_user_patterns_add_to_the_defaults() -> None:
    c = ConsoleMetrics(patterns=compile_patterns([{"regex": r"bleu (?P<value>[0-9.]+)", "name": "bleu"}]))
    assert c.feed("iter 2: loss 1.5\nvalid bleu 27.1\n") == [P(2, "loss", 1.5), P(2, "bleu", 27.1)]
