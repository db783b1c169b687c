#!/usr/bin/env python3
"""Runs a committed notebook headlessly, as users would, with Drive a folder on this disk.

--platform colab: the Drive "mount" is a plain folder. Kernels a and b found a run and train
together to its last step; c joins mid-run, watches two rounds and leaves through the stop cell
(SIGTERM); a fourth session under a's name is refused while a is live.
--platform kaggle: Drive is an rclone remote ("gdrive:", rclone's local backend standing in for
Google's), reached through the rclone sync backend. Kernel k runs two workers, one per GPU slot;
j joins mid-run from a second session, watches two rounds and leaves.

Then checks what they left: rounds with every member, PNG plots that decode, the export, the
build cache, and departures announced in the folder (and for Colab, TensorBoard scalars,
signatures, the committed defaults: a dataset made with nothing uploaded, a model that fits a
T4). Kernels keep every committed parameter but what time forces (model size, steps, round
length, batch) and what this machine forces (no platform to mount, no GPU to count).

Only the platform cells (tagged "platform": mounting Drive, secrets) are skipped, through the
notebook's ON_PLATFORM parameter. The build cell runs scripts/setup.sh for real against this
checkout's build folder (up to date: seconds), then caches it; later kernels take the cache.

    run_notebooks.py --platform colab|kaggle --source DIR --gradbox BIN --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import matplotlib.image
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

MAX_STEPS = 120  # 30 rounds of 4 steps: a joiner comes and leaves well inside them
NOTEBOOKS = {"colab": "colab_worker.ipynb", "kaggle": "kaggle_worker.ipynb"}


def drive(work):
    """Where the kernels' "Drive" is: a folder (Colab's mount) or an rclone remote (Kaggle)."""
    return os.path.join(work, "drive") if ARGS.platform == "colab" else "gdrive:" + os.path.join(work, "drive")


def parameters(work, worker, watch_rounds, peers, gpu_workers=0):
    params = {
        "RUN": "gradbox/run1",
        "WORKER": worker,
        "MODEL": "gpt2-tiny",
        "INNER_STEPS": 4,
        "MAX_STEPS": MAX_STEPS,
        "MICRO_BATCH": 4,
        "EXTRA_ARGS": ["--block-size", "64", "--threads", "1", "--peers", peers, "--checkpoint-interval", "8",
                       "--eval-interval", "0", "--log-interval", "4", "--heartbeat-interval", "2",
                       "--lr", "3e-3", "--warmup-steps", "2"],
        "DEADLINES": [],  # gradbox's own, sized for a local folder: the committed ones suit Drive's minutes
        "WATCH_ROUNDS": watch_rounds,
        "WATCH_HOURS": 0.25,
        "REFRESH_SECONDS": 2,
        "ON_PLATFORM": False,
        "SHARED_ROOT": drive(work),
        "SOURCE_DIR": ARGS.source,
        "LOCAL_DIR": os.path.join(work, "local-" + worker),
    }
    if ARGS.platform == "kaggle":
        params["GPU_WORKERS"] = gpu_workers
    return params


def notebook_with(params, secret=None):
    nb = nbformat.read(os.path.join(ARGS.source, "notebooks", NOTEBOOKS[ARGS.platform]), as_version=4)
    nbformat.validate(nb)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    overrides = "\n".join(f"{k} = {v!r}" for k, v in params.items())
    if secret:  # this session's own platform secret, in place of the one the kernels inherit
        overrides += f"\nimport os\nos.environ['GRADBOX_RUN_SECRET'] = {secret!r}"
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(overrides, metadata={"tags": ["injected-parameters"]}))
    return nb


class Kernel(threading.Thread):
    """One notebook session, executed cell by cell in a thread of its own."""

    def __init__(self, name, params, expect_error=None, secret=None):
        super().__init__(name=name)
        self.nb = notebook_with(params, secret)
        self.expect_error = expect_error
        self.error = None
        self.done_cells = []

    def run(self):
        client = NotebookClient(self.nb, timeout=900, kernel_name="python3",
                                resources={"metadata": {"path": ARGS.work}})
        try:
            client.execute()
        except CellExecutionError as e:
            self.error = e
        except Exception as e:  # a kernel that died, a timeout
            self.error = e

    def output(self, cell_source_start):
        for cell in self.nb.cells:
            if cell.cell_type == "code" and cell.source.lstrip().startswith(cell_source_start):
                return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                               for o in cell.get("outputs", []))
        return ""


def rounds(work, worker, gpu=None):  # every round record: replayed ones too
    path = os.path.join(work, "local-" + worker, *([f"gpu{gpu}"] if gpu is not None else []), "out", "metrics.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "round" in r:
                out.append(r)
    return out


def check_rounds(founders, joiner, joined):
    """Two founders trained to the run's last round, together, and the joiner trained at least
    two rounds, one of them with both; every replica has the same loss for every round. Returns
    the rounds the joiner trained."""
    (f1, r1), (f2, r2) = founders.items()
    last = MAX_STEPS // 4
    trained = sum(1 for r in joined if r["inner_steps"] > 0)
    check(r1 and r2 and r1[-1]["round"] == last and r2[-1]["round"] == last and trained >= 2,
          f"rounds: {f1} {len(r1)}, {f2} {len(r2)}, {joiner} {len(joined)} ({trained} trained)")
    check(any(r["contributors"] == 2 for r in r1), f"{f1} and {f2} never averaged a round together")
    check(any(r["contributors"] == 3 for r in r1 + joined), f"{joiner} never contributed to a round with {f1} and {f2}")
    by_round = {}
    for r in r1 + r2 + joined:
        by_round.setdefault(r["round"], set()).add(r["round_loss"])
    check(all(len(losses) == 1 for losses in by_round.values()), "replicas disagree on a round's loss")
    return trained


def check_left_signed(work, workers):
    """`gradbox status` of the run's folder: every worker announced its departure, and signed."""
    status = subprocess.run([ARGS.gradbox, "status", "--shared", os.path.join(work, "drive", "gradbox", "run1")],
                            capture_output=True, text=True).stdout
    for worker in workers:
        line = next((l for l in status.splitlines() if l.split()[:1] == [worker]), "")
        check(" left" in line, f"{worker} did not announce its departure:\n{status}")
    check("UNSIGNED" not in status, f"the workers did not sign their files:\n{status}")


def wait_for(what, predicate, timeout_s):
    deadline = time.time() + timeout_s
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(1)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def main():
    work = ARGS.work
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    gen = subprocess.run([sys.executable, os.path.join(ARGS.source, "notebooks", "make_notebooks.py"), "--check"],
                         capture_output=True, text=True)
    check(gen.returncode == 0, f"the committed notebooks are not what make_notebooks.py writes: {gen.stderr}")
    for name in ("colab_worker.ipynb", "kaggle_worker.ipynb"):
        nbformat.validate(nbformat.read(os.path.join(ARGS.source, "notebooks", name), as_version=4))

    # A signed run: the kernels inherit the secret as a notebook takes it from the platform.
    os.environ["GRADBOX_RUN_SECRET"] = "the notebooks' test run secret"
    if ARGS.platform == "kaggle":
        os.environ["RCLONE_CONFIG_GDRIVE_TYPE"] = "local"  # "gdrive:" is a folder on this disk
        run_kaggle(work)
    else:
        run_colab(work)


def run_colab(work):
    a = Kernel("a", parameters(work, "a", 0, "a,b"))
    a.start()
    cache = os.path.join(work, "drive", "gradbox", "build-cache")
    # b after a's build is cached (two builds of one build folder at once would collide).
    wait_for("a's build in the cache", lambda: os.path.isdir(cache) and any(f.endswith(".tar") for f in os.listdir(cache)), 600)
    b = Kernel("b", parameters(work, "b", 0, "a,b"))
    b.start()
    wait_for("two rounds of a", lambda: len(rounds(work, "a")) >= 2 or not a.is_alive(), 600)
    # c holds only its own credential, as a volunteer would (Note [Member signatures]); its
    # WORKER is left empty: the credential names it.
    credential = subprocess.run([ARGS.gradbox, "secret", "--member", "c"], capture_output=True, text=True, check=True)
    c = Kernel("c", dict(parameters(work, "c", 2, "a,b"), WORKER=""), secret=credential.stdout.strip())
    c.start()
    twin = Kernel("a-again", dict(parameters(work, "a", 1, "a,b"), LOCAL_DIR=os.path.join(work, "local-twin")))
    twin.start()
    for k in (a, b, c, twin):
        k.join()

    check(twin.error is not None and "--worker a" in str(twin.error) and "another session" in str(twin.error),
          f"a second session named a was not refused with a message naming it: {twin.error}")
    for k in (a, b, c):
        check(k.error is None, f"kernel {k.name} failed: {k.error}")
        check(f"worker {k.name} stopped (exit 0)" in k.output("# Leave cleanly"), f"{k.name}: the stop cell did not leave cleanly")
    check("from the cache" in b.output("# Build gradbox"), "b did not take the build from the cache")

    ra, rb, rc = rounds(work, "a"), rounds(work, "b"), rounds(work, "c")
    c_trained = check_rounds({"a": ra, "b": rb}, "c", rc)

    for worker in ("a", "b", "c"):
        loss_png = os.path.join(work, "local-" + worker, "plots", "loss.png")
        check(os.path.getsize(loss_png) > 10_000, f"{loss_png}: too small")
        image = matplotlib.image.imread(loss_png)
        check(image.shape[0] >= 300 and image.shape[1] >= 600, f"{loss_png}: {image.shape}")

    export = os.path.join(work, "drive", "gradbox", "exports", "a")
    check(os.path.isfile(os.path.join(export, "config.json")) and os.path.isfile(os.path.join(export, "model.safetensors")),
          f"{export}: no Hugging Face folder")
    check(len(a.output("# Text from the newest checkpoint").strip()) > 0, "the sample cell printed nothing")

    check_left_signed(work, ("a", "b", "c"))
    check("every file is signed" in a.output("# gradbox's source"), "the source cell did not take the run secret")
    check("member credential for c" in c.output("# gradbox's source") and "worker(s) c" in c.output("# gradbox's source"),
          f"c's session did not take its name from its credential: {c.output('# gradbox' + chr(39) + 's source')}")
    print(f"notebooks: a {len(ra)} rounds, b {len(rb)}, c {len(rc)} (joined mid-run, trained {c_trained}); twin refused; plots, export,"
          " cache and departures checked")
    check_committed_defaults(work)
    check_fetch_data_twice(work, "kjv")
    for k in (a, b, c):  # the setup times README quotes
        ready = [l for l in k.output("# Build gradbox").splitlines() if "gradbox ready" in l]
        print(f"{k.name}: {ready[0] if ready else '?'}")


def committed_parameters(name):
    """The parameters cell of a committed notebook, as a user who changes nothing runs it."""
    nb = nbformat.read(os.path.join(ARGS.source, "notebooks", name), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    values = {}
    exec(cell.source, {}, values)  # assignments only
    return values


def check_committed_defaults(work):
    """The kernels above override MODEL, MICRO_BATCH and DEADLINES (time). The committed
    defaults must make a dataset in a storage that holds nothing (no text uploaded), name a
    preset that exists and, at the default micro-batch, fits a T4's 15 GB (both platforms' free
    GPU), as gradbox's own memory report judges it on that dataset, and run with the committed
    mode, codec and deadlines."""
    sys.path.insert(0, os.path.join(ARGS.source, "notebooks"))
    import gradbox_session as gb
    for name in ("colab_worker.ipynb", "kaggle_worker.ipynb"):
        p = committed_parameters(name)
        root = os.path.join(work, "defaults-" + name.split("_")[0])
        session = gb.Session(source_dir=ARGS.source, run_folder=os.path.join(root, "drive", p["RUN"]), worker="d",
                             local_dir=os.path.join(root, "local"), storage=os.path.join(root, "drive", "gradbox"),
                             shared_bin=os.path.dirname(ARGS.gradbox))
        data_dir = gb.fetch_data(session, p["DATASET"], p["TEXT"], ["--tokenizer", p["TOKENIZER"]] + list(p["PREPARE_ARGS"]))
        meta = json.load(open(os.path.join(data_dir, "meta.json")))
        check(os.path.isfile(os.path.join(root, "drive", "gradbox", "datasets", p["DATASET"], "meta.json")),
              f"{name}: the default dataset was not published for the other sessions")
        report = subprocess.run([ARGS.gradbox, "train", "--model", str(p["MODEL"]), "--micro-batch", str(p["MICRO_BATCH"]),
                                 "--data", data_dir, "--memory-report", "--memory-budget-gb", "15"],
                                capture_output=True, text=True)
        check(report.returncode == 0 and "\n  fits:" in report.stdout,
              f"{name}: the default MODEL {p['MODEL']!r} at MICRO_BATCH {p['MICRO_BATCH']} does not train on a T4:\n"
              f"{report.stdout[-600:]}{report.stderr}")
        # The committed MODE, CODEC, INNER_STEPS and DEADLINES, as the start cell passes them, on a
        # two-step solo run of the smallest model: gradbox refuses flags it cannot run with.
        mode = ["--sync", "diloco", "--inner-steps", str(p["INNER_STEPS"])] if p["MODE"] == "diloco" else ["--exchange", "sharded", "--overlap"]
        solo = subprocess.run([ARGS.gradbox, "train", "--model", "gpt2-tiny", "--block-size", "32", "--micro-batch", "2",
                               "--max-steps", "2", "--data", data_dir, "--out", os.path.join(root, "solo"),
                               "--shared", os.path.join(root, "drive", "solo-run"), "--worker", "d", "--codec", p["CODEC"],
                               *mode, *p["DEADLINES"], *p["EXTRA_ARGS"]], capture_output=True, text=True)
        check(solo.returncode == 0, f"{name}: the default MODE, CODEC and DEADLINES do not run:\n{solo.stdout[-600:]}{solo.stderr[-600:]}")
        print(f"{name}: defaults make {p['DATASET']!r} with nothing uploaded ({meta.get('train_tokens', '?')} training tokens) "
              f"and {p['MODEL']} at micro-batch {p['MICRO_BATCH']} fits a T4")


def check_fetch_data_twice(work, dataset):
    """The data cell run a second time finds the dataset on local disk and copies nothing."""
    sys.path.insert(0, os.path.join(ARGS.source, "notebooks"))
    import gradbox_session as gb
    session = gb.Session(source_dir=ARGS.source, run_folder=os.path.join(work, "drive", "gradbox", "run1"), worker="b",
                         local_dir=os.path.join(work, "local-b"), storage=os.path.join(work, "drive", "gradbox"))
    local = os.path.join(work, "local-b", "data", dataset)
    before = os.stat(os.path.join(local, "meta.json")).st_mtime_ns
    check(gb.fetch_data(session, dataset) == local, "fetch_data did not return the local copy")
    check(os.stat(os.path.join(local, "meta.json")).st_mtime_ns == before, "fetch_data run twice copied the dataset again")


def run_kaggle(work):
    """One Kaggle session with two workers (a GPU slot each) founds the run; a second session
    joins mid-run, watches two rounds and leaves. Everything goes through rclone."""
    k = Kernel("k", parameters(work, "k", 0, "k-gpu0,k-gpu1", gpu_workers=2))
    k.start()
    wait_for("two rounds of k-gpu0", lambda: len(rounds(work, "k", 0)) >= 2 or not k.is_alive(), 600)
    j = Kernel("j", parameters(work, "j", 2, "k-gpu0,k-gpu1"))
    j.start()
    for kernel in (k, j):
        kernel.join()
    for kernel in (k, j):
        check(kernel.error is None, f"kernel {kernel.name} failed: {kernel.error}")
    stopped = k.output("# Leave cleanly")
    check("worker k-gpu0 stopped (exit 0)" in stopped and "worker k-gpu1 stopped (exit 0)" in stopped,
          f"k: the stop cell did not stop both workers cleanly: {stopped}")
    check("worker j stopped (exit 0)" in j.output("# Leave cleanly"), "j: the stop cell did not leave cleanly")
    check("from the cache" in j.output("# Build gradbox"), "j did not take the build from the cache (through rclone)")

    r0, r1, rj = rounds(work, "k", 0), rounds(work, "k", 1), rounds(work, "j")
    j_trained = check_rounds({"k-gpu0": r0, "k-gpu1": r1}, "j", rj)

    loss_png = os.path.join(work, "local-k", "gpu0", "plots", "loss.png")
    check(os.path.isfile(loss_png) and matplotlib.image.imread(loss_png).shape[1] >= 600, f"{loss_png}: no plot")
    export = os.path.join(work, "drive", "gradbox", "exports", "k-gpu0")
    check(os.path.isfile(os.path.join(export, "config.json")) and os.path.isfile(os.path.join(export, "model.safetensors")),
          f"{export}: no Hugging Face folder (written through rclone)")
    check(len(k.output("# Text from the newest checkpoint").strip()) > 0, "the sample cell printed nothing")
    check(os.path.isfile(os.path.join(work, "drive", "gradbox", "datasets", "kjv", "meta.json")),
          "the dataset k made was not published through rclone")
    check("copied from" in j.output("# The dataset"), f"j did not copy k's dataset: {j.output('# The dataset')}")
    check_left_signed(work, ("k-gpu0", "k-gpu1", "j"))
    print(f"kaggle notebook: k-gpu0 {len(r0)} rounds, k-gpu1 {len(r1)}, j {len(rj)} (joined mid-run, trained {j_trained});"
          " plots, export, dataset, cache and departures checked through rclone")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--platform", choices=sorted(NOTEBOOKS), default="colab")
    parser.add_argument("--source", required=True)
    parser.add_argument("--gradbox", required=True)
    parser.add_argument("--work", required=True)
    ARGS = parser.parse_args()
    main()
