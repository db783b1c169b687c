"""The quality benchmark's table and plot (scripts/bench/quality_bench.sh runs the modes).

For each corpus and mode: the final validation loss, its gap to per-step, the token efficiency
(the tokens per-step needed to reach this mode's final loss, read off per-step's curve, over the
tokens this mode trained; 1.00 is parity, "> 1" a mode that ends below per-step) and the bytes one
worker uploads per token. Writes quality.png (one panel per corpus, validation loss against
tokens) and token_efficiency.json beside the runs.
"""
import argparse
import json
import math
import os


def curve(run):
    """(tokens, val_loss) pairs of a run, from its first worker's metrics."""
    # A cluster's run folder also holds the shared folder: the first worker is the first with metrics.
    worker = sorted(d for d in os.listdir(run) if os.path.isfile(os.path.join(run, d, "metrics.jsonl")))[0]
    rows = [json.loads(line) for line in open(os.path.join(run, worker, "metrics.jsonl"))]
    tokens_at = {}
    for r in rows:
        if "loss" in r and "tokens" in r:
            tokens_at[r["step"]] = r["tokens"]
    points = [(tokens_at[r["step"]], r["val_loss"]) for r in rows if "val_loss" in r and r["step"] in tokens_at]
    return sorted(points), worker, rows


def tokens_to_reach(points, loss):
    """The first tokens at which the curve (linearly interpolated) reaches `loss`; None if never."""
    best_tokens, best_loss = 0.0, math.inf
    for tokens, value in points:
        if value <= loss:
            if best_loss == math.inf:
                return float(tokens)
            # Between the last best point and this one.
            return best_tokens + (tokens - best_tokens) * (best_loss - loss) / (best_loss - value)
        if value < best_loss:
            best_tokens, best_loss = float(tokens), value
    return None


def upload_per_token(run, worker, rows, params):
    stats = os.path.join(run, worker, "sync", "exchange", "stats.json")
    tokens = max(r["tokens"] for r in rows if "tokens" in r)
    if os.path.exists(stats):
        workers = [w for w in os.listdir(run) if os.path.isfile(os.path.join(run, w, "sync", "exchange", "stats.json"))]
        up = sum(json.load(open(os.path.join(run, w, "sync", "exchange", "stats.json")))["round_bytes_written"]
                 for w in workers)
        return up / len(workers) / tokens, "files"
    rounds = [r for r in rows if "round" in r]
    if rounds:  # DiLoCo: one fp32 delta a worker a round, of one fragment's share of the parameters
        fragments = 1 + max(r.get("fragment", 0) for r in rounds)
        return params * 4 * len(rounds) / fragments / tokens, "fp32 payload"
    steps = max(r["step"] for r in rows if "loss" in r)
    return params * 4 * steps / tokens, "fp32 payload"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--params", type=int, required=True)
    parser.add_argument("--corpora", nargs="+", required=True)
    parser.add_argument("--modes", nargs="+", required=True)
    args = parser.parse_args()

    efficiency = {}
    panels = []
    for corpus in args.corpora:
        base_dir = os.path.join(args.out, corpus, "per-step")
        reference = curve(base_dir)[0] if os.path.isdir(base_dir) else []
        ref_final = reference[-1][1] if reference else None
        print(f"\n{corpus}: {args.params:,} parameters")
        width = max(len(m) for m in args.modes)
        print(f"{'mode':{width}s} {'tokens':>10s} {'val loss':>9s} {'vs per-step':>12s} {'token eff.':>11s} "
              f"{'up B/token':>11s}")
        curves = []
        for mode in args.modes:
            run = os.path.join(args.out, corpus, mode)
            if not os.path.isdir(run):
                print(f"{mode:{width}s} (not run)")
                continue
            points, worker, rows = curve(run)
            if not points:
                print(f"{mode:{width}s} (no validation loss)")
                continue
            tokens, final = points[-1]
            curves.append((mode, points))
            gap = eff = "-"
            if ref_final is not None:
                gap = f"{100 * (final / ref_final - 1):+.1f}%"
                needed = tokens_to_reach(reference, final)
                if needed is None:
                    eff = "> 1"
                    efficiency.setdefault(corpus, {})[mode] = 1.0
                else:
                    efficiency.setdefault(corpus, {})[mode] = round(needed / tokens, 4)
                    eff = f"{needed / tokens:.2f}"
            up, what = upload_per_token(run, worker, rows, args.params)
            print(f"{mode:{width}s} {tokens:>10,d} {final:9.4f} {gap:>12s} {eff:>11s} {up:11.2f}  ({what})")
        panels.append((corpus, curves))

    with open(os.path.join(args.out, "token_efficiency.json"), "w") as f:
        json.dump({"params": args.params, "efficiency": efficiency}, f, indent=1)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    for ax, (corpus, curves) in zip(axes[0], panels):
        for mode, points in curves:
            ax.plot([t / 1e6 for t, _ in points], [v for _, v in points], label=mode,
                    linewidth=2.2 if mode == "per-step" else 1.2)
        ax.set_title(f"{corpus} ({args.params / 1e6:.2f}M parameters)")
        ax.set_xlabel("tokens (millions)")
        ax.set_ylabel("validation loss")
        ax.grid(alpha=0.3)
        if curves:
            finals = [p[-1][1] for _, p in curves]
            ax.set_ylim(min(finals) - 0.1, max(finals) + 1.0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(args.out, "quality.png")
    fig.savefig(path, dpi=110)
    print(f"\nplot: {path}")


if __name__ == "__main__":
    main()
