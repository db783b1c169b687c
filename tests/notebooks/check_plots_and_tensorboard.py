#!/usr/bin/env python3
"""`gradbox plot` and the TensorBoard event files of a real (tiny) run: the PNGs decode and have
a plot's size; TensorBoard's own reader (EventAccumulator) loads every scalar metrics.jsonl has,
at the same steps with the same values; a bad --run is refused with its name.

    check_plots_and_tensorboard.py --gradbox BIN --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import matplotlib.image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

FORTUNES = "/usr/share/games/fortunes"


def run(argv):
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gradbox", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    g, work = args.gradbox, args.work
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    run([g, "prepare", "--input", os.path.join(FORTUNES, "computers"), os.path.join(FORTUNES, "science"),
         "--out", os.path.join(work, "data"), "--tokenizer", "bpe", "--vocab-size", "400"])
    out = os.path.join(work, "run")
    train = [g, "train", "--data", os.path.join(work, "data"), "--out", out, "--model", "gpt2-tiny",
             "--micro-batch", "4", "--block-size", "64", "--lr", "3e-3", "--warmup-steps", "2", "--eval-interval", "10",
             "--eval-batches", "2", "--log-interval", "10", "--threads", "1"]
    run(train + ["--max-steps", "20"])
    run(train + ["--max-steps", "30"])  # resumed: a second event file beside the first

    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    train_loss = {r["step"]: r["loss"] for r in records if "loss" in r}
    val_loss = {r["step"]: r["val_loss"] for r in records if "val_loss" in r}
    assert len(train_loss) == 30 and sorted(val_loss) == [10, 20, 30], (len(train_loss), sorted(val_loss))

    event_files = [f for f in os.listdir(out) if "tfevents" in f]
    assert len(event_files) == 2, event_files
    acc = EventAccumulator(out, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("train/loss", "train/lr", "train/grad_norm", "train/tokens", "eval/val_loss"):
        assert tag in tags, (tag, tags)
    for tag, want in (("train/loss", train_loss), ("eval/val_loss", val_loss)):
        got = {e.step: e.value for e in acc.Scalars(tag)}
        assert sorted(got) == sorted(want), (tag, sorted(got))
        for step, value in want.items():
            assert abs(got[step] - value) <= 1e-6 * max(1.0, abs(value)), (tag, step, got[step], value)

    plots = os.path.join(work, "plots")
    written = run([g, "plot", "--run", out, "--out", plots]).split()
    names = sorted(os.path.basename(p) for p in written)
    assert names == ["loss.png", "throughput.png"], names  # one worker, no rounds: no exchange plots
    for path in written:
        assert os.path.getsize(path) > 10_000, path
        image = matplotlib.image.imread(path)
        assert image.shape[0] >= 300 and image.shape[1] >= 600, (path, image.shape)

    # A per-step run through a folder (one member): each step is a round, so the exchange plot's
    # "MB written" panel and the membership plot have data (the panel was drawn empty, and
    # membership.png skipped without a word).
    folder_run = os.path.join(work, "folder-run")
    os.makedirs(os.path.join(work, "shared"))
    run(train[:train.index("--out") + 1] + [folder_run] + train[train.index("--out") + 2:] +
        ["--max-steps", "6", "--shared", os.path.join(work, "shared", "run"), "--worker", "a"])
    steps = [json.loads(line) for line in open(os.path.join(folder_run, "metrics.jsonl"))]
    steps = [r for r in steps if "loss" in r]
    assert len(steps) == 6 and all(r["contributors"] == 1 and r["exchange_bytes_written"] > 0 for r in steps), steps
    folder_plots = os.path.join(work, "folder-plots")
    shown = subprocess.run([g, "plot", "--run", folder_run, "--out", folder_plots], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    folder_names = sorted(os.path.basename(p) for p in shown.stdout.split())
    assert folder_names == ["exchange.png", "loss.png", "membership.png", "throughput.png"], folder_names
    # The single worker's plots above: the two it could not draw are named, with the reason.
    alone = subprocess.run([g, "plot", "--run", out, "--out", plots], capture_output=True, text=True)
    assert "exchange.png not drawn" in alone.stderr and "membership.png not drawn" in alone.stderr, alone.stderr

    bad = subprocess.run([g, "plot", "--run", os.path.join(work, "no-such-run"), "--out", plots],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "no-such-run" in bad.stderr and "metrics.jsonl" in bad.stderr, bad.stderr
    print(f"plots {names}, per-step through a folder {folder_names}; TensorBoard: {len(tags)} scalar tags, {len(train_loss)} train/loss points in 2 files")


if __name__ == "__main__":
    main()
