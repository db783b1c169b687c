#!/usr/bin/env python3
"""PNG plots of gradbox runs from their metrics.jsonl (what `gradbox plot` runs).

    plot_run.py --run OUT [--run OUT2 ...] --out PLOTS

Each --run is a worker's --out folder; several put one line per worker on each plot. Writes:
  loss.png        train loss (smoothed) and validation loss against tokens per worker
  throughput.png  this worker's tokens/s against tokens per worker
  exchange.png    seconds waiting on the exchange, and bytes written, per round
  membership.png  contributors per round (per-step runs: per step)
A plot with nothing to show is not written. Prints the files written, one per line.
"""
import argparse
import json
import os
import sys


def read_metrics(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"gradbox plot: --run {run}: no metrics.jsonl there (is it a worker's --out folder?)")
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                # The last line of a live run may be half-written; anything else is damage.
                print(f"gradbox plot: {path}:{number}: not JSON, skipped", file=sys.stderr)
    return records


def tokens_per_step(run):
    """micro_batch x block x grad_accum from the run's saved configs (None when they are missing).
    Time-boxed rounds vary the micro-batches a step takes; this counts the configured ones."""
    try:
        with open(os.path.join(run, "train_config.json")) as f:
            train = json.load(f)
        with open(os.path.join(run, "model_config.json")) as f:
            model = json.load(f)
    except (OSError, ValueError):
        return None
    block = train.get("block_size") or model.get("block_size")
    return train["micro_batch"] * block * train.get("grad_accum", 1) if block else None


def smoothed(values):
    """TensorBoard's debiased exponential moving average: no lag towards the first value; short
    runs are smoothed less."""
    weight = 0.9 if len(values) > 100 else 0.6
    out, avg = [], 0.0
    for t, v in enumerate(values, 1):
        avg = weight * avg + (1 - weight) * v
        out.append(avg / (1 - weight ** t))
    return out


def label(run):
    """The worker's name when the run has one (every notebook's folder is called "out")."""
    try:
        with open(os.path.join(run, "train_config.json")) as f:
            worker = json.load(f).get("worker")
        if worker:
            return worker
    except (OSError, ValueError):
        pass
    return os.path.basename(os.path.normpath(run)) or run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, help="a worker's --out folder (repeatable)")
    parser.add_argument("--out", required=True, help="folder for the PNG files")
    args = parser.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(label(r), read_metrics(r), tokens_per_step(r)) for r in args.run]
    os.makedirs(args.out, exist_ok=True)
    written = []

    def save(fig, name):
        path = os.path.join(args.out, name)
        fig.tight_layout()
        fig.savefig(path + ".tmp.png", dpi=100)
        os.replace(path + ".tmp.png", path)  # a refreshing notebook never shows half a PNG
        plt.close(fig)
        written.append(path)

    def finish(fig, ax, has_data, name, title, xlabel, ylabel):
        """Labels a one-axes plot and saves it, or drops it when no run had data for it."""
        if not has_data:
            plt.close(fig)
            return
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
        save(fig, name)

    # x: this worker's tokens (step x tokens per step); without the configs, the records' running
    # count (the cluster's when it exchanges).
    def series(records, per_step, key, kind):
        xs, ys, tokens = [], [], 0
        for r in records:
            tokens = r.get("tokens", tokens)
            if key in r and isinstance(r[key], (int, float)) and (kind is None or kind(r)):
                xs.append(r["step"] * per_step if per_step and "step" in r else tokens)
                ys.append(r[key])
        return xs, ys

    # Steps a joiner replays from the folder carry no loss of its own (null): not plotted.
    is_train = lambda r: r.get("loss") is not None and "round" not in r

    fig, ax = plt.subplots(figsize=(8, 4.5))
    any_loss = False
    for name, records, per_step in runs:
        xs, ys = series(records, per_step, "loss", is_train)
        if xs:
            any_loss = True
            ax.plot(xs, ys, alpha=0.25, linewidth=0.8)
            ax.plot(xs, smoothed(ys), label=f"{name} train", color=ax.lines[-1].get_color())
        xs, ys = series(records, per_step, "val_loss", None)
        if xs:
            any_loss = True
            ax.plot(xs, ys, "o--", label=f"{name} validation")
    finish(fig, ax, any_loss, "loss.png", "Loss", "tokens per worker", "loss (nats/token)")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    any_speed = False
    for name, records, per_step in runs:
        xs, ys = [], []
        for r in records:
            if per_step and is_train(r) and r.get("step_seconds", 0) > 0:
                xs.append(r["step"] * per_step)
                ys.append(per_step / r["step_seconds"])
        if xs:
            any_speed = True
            ax.plot(xs, smoothed(ys), label=name)
    finish(fig, ax, any_speed, "throughput.png", "Throughput", "tokens per worker", "this worker's tokens/s (smoothed)")

    fig, (wait_ax, bytes_ax) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    any_round = False
    for name, records, _ in runs:
        rounds = [r for r in records if "round" in r]
        if rounds:
            any_round = True
            wait_ax.plot([r["round"] for r in rounds], [r.get("wait_seconds", 0) for r in rounds], ".-", label=name)
            bytes_ax.plot([r["round"] for r in rounds], [r.get("bytes_written", 0) / 1e6 for r in rounds], ".-",
                          label=name)
        else:  # per-step runs: each step a round
            steps = [r for r in records if is_train(r) and "exchange_wait_seconds" in r]
            if steps:
                any_round = True
                wait_ax.plot([r["step"] for r in steps], [r["exchange_wait_seconds"] for r in steps], ".-", label=name)
                sent = [r for r in steps if "exchange_bytes_written" in r]
                bytes_ax.plot([r["step"] for r in sent], [r["exchange_bytes_written"] / 1e6 for r in sent], ".-", label=name)
    if any_round:
        wait_ax.set_ylabel("waited on the exchange (s)")
        bytes_ax.set_ylabel("MB written")
        bytes_ax.set_xlabel("round (per-step runs: step)")
        wait_ax.set_title("Exchange per round")
        for a in (wait_ax, bytes_ax):
            a.grid(alpha=0.3)
        wait_ax.legend()
        save(fig, "exchange.png")
    else:
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 3.5))
    any_members = False
    for name, records, _ in runs:
        rounds = [r for r in records if "round" in r and "contributors" in r]
        x = "round"
        if not rounds:  # per-step runs: each step a round
            rounds, x = [r for r in records if is_train(r) and "contributors" in r], "step"
        if rounds:
            any_members = True
            ax.step([r[x] for r in rounds], [r["contributors"] for r in rounds], where="post", label=name)
    ax.yaxis.get_major_locator().set_params(integer=True)
    finish(fig, ax, any_members, "membership.png", "Membership", "round (per-step runs: step)", "contributors")

    # Say what was not drawn and why: a missing PNG is otherwise a mystery.
    drawn = {os.path.basename(p) for p in written}
    for name, why in (("loss.png", "no train or validation loss"), ("throughput.png", "no timed steps"),
                      ("exchange.png", "no exchange: a single worker without --shared"),
                      ("membership.png", "no rounds that record their contributors")):
        if name not in drawn:
            print(f"gradbox plot: {name} not drawn: {why} in " + ", ".join(args.run), file=sys.stderr)

    if not written:
        sys.exit("gradbox plot: no train, validation or round records in " + ", ".join(args.run))
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
