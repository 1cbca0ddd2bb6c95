"""Prints the popular training loops' console formats and nothing else (no SDK unless `sdk`): the test
(tests/console/test_console_jobs.py) reads the job's series and step. Run by hand: `python train.py nanogpt`.

Each mode also prints lines that only look numeric (a date, a version, a path), which must make no point.
"""

import os
import sys
import time

MODE = sys.argv[1]
RANK = int(os.environ.get("RANK", "0"))


def out(text: str, err: bool = False, end: str = "\n") -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(text + end)
    stream.flush()


def noise() -> None:
    out("2026-11-25 17:00:01 starting run")
    out("version: 1.2.3")
    out("data: /data/shakespeare/train.bin")
    out("FutureWarning: something is deprecated in 2.14.1", err=True)


def nanogpt() -> None:
    # nanoGPT's train.py: an eval line every 10 iters, an iter line every iter.
    for it in range(0, 31):
        if it % 10 == 0:
            out(f"step {it}: train loss {4.0 - it / 10:.4f}, val loss {4.1 - it / 10:.4f}")
        out(f"iter {it}: loss {4.0 - it / 20:.4f}, time {40 + it}.12ms, mfu -100.00%")
        time.sleep(0.01)


def tqdm_hf() -> None:
    # A Hugging Face Trainer: its tqdm bar redrawn with \r on stderr, its log dicts on stdout.
    total = 12
    for n in range(1, total + 1):
        out(
            f"\r{int(100 * n / total)}%|####| {n}/{total} [00:0{n % 10}<00:01, 3.51it/s]",
            err=True,
            end="",
        )
        if n % 4 == 0:
            out(f"{{'loss': {2.0 - n / 10:.2f}, 'learning_rate': 5e-05, 'epoch': {n / total:.2f}}}")
        time.sleep(0.05)
    out("", err=True)


def lightning() -> None:
    # Lightning's bar: batches within an epoch, `\r` redraws, a postfix with the loss and v_num.
    for epoch in range(2):
        for n in range(1, 5):
            bar = f"Epoch {epoch}: {25 * n}%|####| {n}/4 [00:01<00:02, 3.51it/s, loss={epoch + 1 / n:.3f}, v_num=0]"
            out("\r" + bar, err=True, end="")
            time.sleep(0.02)
        out("", err=True)


def keras_guild() -> None:
    for epoch in range(1, 4):
        out(f"Epoch {epoch}/3")
        bar = "10/10 [==============================] - 1s 5ms/step"
        out(f"{bar} - loss: {1 / epoch:.4f} - accuracy: {0.5 + epoch / 10:.4f}")
    out("step: 9")
    out("val_bleu: 27.5")


def custom() -> None:
    for step in range(1, 6):
        out(f"[{step}] score={step * 1.5}")
        out(f"loss: {1 / step:.3f}")  # a default format: not read (defaults false)


def flood() -> None:
    # 50 MB as fast as one write a line goes: 50,000 lines of 1,000 bytes, each a point of `loss`, then the end.
    # The console is read 1 MiB a tick while it runs: the lines left at its end are read before the last write.
    pad = " " + "z" * 960
    write = sys.stdout.write
    for i in range(50_000):
        write(f"step {i} loss {1 + i / 100_000:.6f}{pad}\n")
    sys.stdout.flush()


def bare() -> None:
    # Numbers with no names: nothing is recognised, and the page suggests a pattern from the commonest line.
    for i in range(20):
        out(f"{i} {1 / (i + 1):.4f} done")
    out("finished in 12 s")


def slow_bare() -> None:
    # The same, slowly: a pattern is added while it runs (read again from the start, then line by line).
    for i in range(40):
        out(f"{i} {1 / (i + 1):.4f} done")
        time.sleep(0.5)


def sdk() -> None:
    import rankzero

    for step in range(1, 9):
        rankzero.log(step, {"loss": float(step)})  # the SDK's value ...
        out(f"iter {step}: loss {100.0 + step:.4f}, time 3.00ms")  # ... wins over the console's
        time.sleep(0.05)


if RANK == 0:
    noise()
    {
        "nanogpt": nanogpt,
        "tqdm_hf": tqdm_hf,
        "lightning": lightning,
        "keras_guild": keras_guild,
        "custom": custom,
        "sdk": sdk,
        "flood": flood,
        "bare": bare,
        "slow_bare": slow_bare,
    }[MODE]()
