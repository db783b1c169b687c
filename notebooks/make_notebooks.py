#!/usr/bin/env python3
"""Writes colab_worker.ipynb and kaggle_worker.ipynb from the cells below, so the two share
every cell that is not about their platform. Edit here, then run it; a test checks that the
committed notebooks match (tests/notebooks/run_notebooks.py --check-generated).

    python3 notebooks/make_notebooks.py [--check]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text.strip("\n")}


def code(text, tags=()):
    metadata = {"tags": list(tags)} if tags else {}
    return {"cell_type": "code", "metadata": metadata, "execution_count": None, "outputs": [],
            "source": text.strip("\n")}


INTRO = """
# gradbox worker on {platform}

Run every cell (Runtime → Run all). This session becomes one worker of a training run whose
members share nothing but a folder {where}. Other sessions, with this same notebook and the
same `RUN`, join the run at any time; when a session dies, the others go on, and running this
notebook again (with the same or a new `WORKER`) rejoins.

The first session builds gradbox (about 5 minutes on 2 cores, after its packages) and caches the build beside the run; the
next sessions with the same gradbox commit, torch and GPU take it from there in a minute or two.
"""

PARAMETERS_COMMON = """
RUN = "gradbox/run1"         # the run's folder, {run_where}
WORKER = ""                  # this session's name, unique in the run (empty: a random one)
MODEL = "gpt2"               # a preset (gpt2-tiny, gpt2-mini, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-tiny, llama-mini) or a config .json
DATASET = "kjv"              # a prepared dataset in <storage>/datasets, copied to this session's disk once
TEXT = ""                    # a text file or folder to prepare DATASET from when it is not there yet; empty: "kjv" is made from Ubuntu's bible-kjv package (a first run's text, too small for a real model)
TOKENIZER = "gpt2"           # gpt2 (shipped with gradbox) or bpe (trained on TEXT)
PREPARE_ARGS = []            # more `gradbox prepare` flags: cleaning, --format, --vocab-size, ...
MODE = "diloco"              # diloco (rounds of INNER_STEPS local steps) or per-step (every step averaged)
CODEC = "int8"               # fp16, bf16, int8 or int4: what a round's files carry
INNER_STEPS = 100            # DiLoCo: local steps per round
MAX_STEPS = 20000
MICRO_BATCH = 8
EXTRA_ARGS = []              # more `gradbox train` flags, e.g. ["--round-seconds", "1800"]
# How long a worker waits on Drive, whose copies reach other sessions in seconds to minutes
# (p90 ~2 min): a contribution, an owner before the next takes over (8x the p90 lag), a silent
# peer before it counts as dead. gradbox's own defaults (30/60/60 s) suit a local folder.
DEADLINES = ["--contribution-timeout", "300", "--failover-timeout", "960", "--stale-after", "1920"]
WATCH_ROUNDS = 0             # the progress cell returns after this many rounds trained (0: when the worker ends)
WATCH_HOURS = 12
REFRESH_SECONDS = 15
RUN_SECRET = "GRADBOX_RUN_SECRET"  # the platform secret holding the run secret (`gradbox secret`) or this member's credential (`gradbox secret --member NAME`); none: unsigned
GRADBOX_REPO = "https://github.com/gradbox/gradbox.git"
GRADBOX_REF = "main"
ON_PLATFORM = True           # False only off {platform} (the tests): skips what needs {platform_needs}
"""

PARAMETERS_COLAB = PARAMETERS_COMMON.format(run_where="inside My Drive", platform="Colab",
                                            platform_needs="Colab (mounting Drive)") + """
SHARED_ROOT = "/content/drive/MyDrive"
SOURCE_DIR = "/content/gradbox"
LOCAL_DIR = "/content/gradbox-local"
"""

PARAMETERS_KAGGLE = PARAMETERS_COMMON.format(run_where="on the rclone remote `gdrive:`", platform="Kaggle",
                                             platform_needs="Kaggle (its secrets)") + """
GPU_WORKERS = 0              # workers this session runs, one per GPU slot (0: one per GPU it has)
SHARED_ROOT = "gdrive:"      # the rclone remote this notebook configures from the RCLONE_DRIVE_TOKEN secret
SOURCE_DIR = "/kaggle/working/gradbox"
LOCAL_DIR = "/kaggle/working/gradbox-local"
"""

MOUNT_COLAB = """
# Colab: Google Drive is the shared folder, mounted (the worker's syncer reads and writes it).
if ON_PLATFORM:
    from google.colab import drive
    drive.mount("/content/drive")
"""

MOUNT_KAGGLE_MD = """
Kaggle cannot mount Drive; gradbox talks to it through rclone. Once, on your own computer:
`rclone authorize "drive"` prints a token (a JSON object) after you sign in. In this notebook:
Add-ons → Secrets → add `RCLONE_DRIVE_TOKEN` with that JSON, and attach it. Internet must be on.
"""

MOUNT_KAGGLE = """
# Kaggle: Drive through rclone, configured from the notebook's secret.
import os, subprocess
if ON_PLATFORM:
    from kaggle_secrets import UserSecretsClient
    token = UserSecretsClient().get_secret("RCLONE_DRIVE_TOKEN")
    subprocess.run(["bash", "-c", "command -v rclone || (apt-get update -qq && apt-get install -y -qq rclone)"], check=True)
    conf = os.path.expanduser("~/.config/rclone/rclone.conf")
    os.makedirs(os.path.dirname(conf), exist_ok=True)
    with open(conf, "w") as f:
        f.write(f"[gdrive]\\ntype = drive\\nscope = drive\\ntoken = {token}\\n")
    os.chmod(conf, 0o600)
    print(subprocess.run(["rclone", "about", "gdrive:"], capture_output=True, text=True).stdout)
"""

SOURCE = """
# gradbox's source: cloned once per session (the notebook's helpers live in it).
import os, subprocess, sys, secrets
if not os.path.isdir(os.path.join(SOURCE_DIR, ".git")):
    subprocess.run(["git", "clone", "--depth", "1", "--branch", GRADBOX_REF, GRADBOX_REPO, SOURCE_DIR], check=True)
sys.path.insert(0, os.path.join(SOURCE_DIR, "notebooks"))
import gradbox_session as gb

run_folder = SHARED_ROOT.rstrip("/") + "/" + RUN
secret = gb.run_secret(RUN_SECRET)  # signs every file the workers write
member = gb.credential_member(secret)  # a member credential signs only as its member: the name is that
session = gb.Session(source_dir=SOURCE_DIR, run_folder=run_folder, worker=member or WORKER or "{prefix}-" + secrets.token_hex(3),
                     local_dir=LOCAL_DIR, storage=run_folder.rsplit("/", 1)[0], sync_backend="{backend}")
os.makedirs(LOCAL_DIR, exist_ok=True)
if not gb.is_remote(run_folder):
    os.makedirs(os.path.dirname(run_folder), exist_ok=True)
{gpus}
print(f"run {{run_folder}}: worker(s)", ", ".join(s.worker for s in sessions))
"""

# Kaggle's 2 x T4: a worker per GPU (until the network fast path joins them into one).
KAGGLE_GPUS = """import torch
sessions = gb.one_per_gpu(session, 1 if member else GPU_WORKERS or torch.cuda.device_count())  # one name per credential"""

BUILD = """
# Build gradbox against this image's torch, or take the cached build (keyed by commit, torch, GPU).
import time
started = time.time()
how = gb.install_build(session)
print(f"gradbox ready ({how}) in {time.time() - started:.0f} s")
"""

DATA = """
# The dataset: copied from the shared storage once, or prepared here from TEXT and published.
prepare_args = ["--tokenizer", TOKENIZER] + list(PREPARE_ARGS)
data_dir = gb.fetch_data(session, DATASET, TEXT, prepare_args)
"""

START = """
# The worker (and its syncer) in the background: this notebook stays responsive.
train_args = ["--model", MODEL, "--max-steps", str(MAX_STEPS), "--micro-batch", str(MICRO_BATCH), "--codec", CODEC]
if MODE == "diloco":
    train_args += ["--sync", "diloco", "--inner-steps", str(INNER_STEPS)]
elif MODE == "per-step":
    train_args += ["--exchange", "sharded", "--overlap"]
else:
    raise ValueError(f"MODE must be diloco or per-step, not {MODE!r}")
for s in sessions:
    gb.start_worker(s, data_dir, train_args + list(DEADLINES) + list(EXTRA_ARGS))
"""

WATCH = """
# Progress: the worker's last lines, the cluster (gradbox status) and the loss, refreshed.
# Interrupting this cell does not stop the worker; the stop cell does.
until = (lambda s: gb.rounds_trained(s) >= WATCH_ROUNDS) if WATCH_ROUNDS else None
plots = gb.watch(sessions[0], until=until, timeout_s=WATCH_HOURS * 3600, refresh_s=REFRESH_SECONDS)
print("\\n".join(plots))
"""

TENSORBOARD_MD = """
The worker also writes TensorBoard event files beside its metrics. To look at them here:
`%load_ext tensorboard` then `%tensorboard --logdir {local}/out`.
"""

SAMPLE = """
# Text from the newest checkpoint.
print(gb.sample(sessions[0], "The meaning of life is", tokens=60))
"""

EXPORT = """
# The model as a Hugging Face folder (config.json, model.safetensors, tokenizer), in the storage.
gb.export(sessions[0], sessions[0]._storage_path("exports", sessions[0].worker))
"""

STOP = """
# Leave cleanly: the worker checkpoints, announces its departure and uploads its last files.
codes = [gb.stop_worker(s) for s in sessions]
{flush}
"""

FLUSH_COLAB = """if ON_PLATFORM:
    drive.flush_and_unmount()  # everything written to Drive is sent before the session ends"""


def notebook(cells, platform):
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "accelerator": "GPU",
            "gradbox": {"platform": platform, "generated_by": "notebooks/make_notebooks.py"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def colab():
    return notebook([
        md(INTRO.format(platform="Colab", where="in your Google Drive")),
        code(PARAMETERS_COLAB, tags=["parameters"]),
        code(MOUNT_COLAB, tags=["platform"]),
        code(SOURCE.format(prefix="colab", backend="mounted", gpus="sessions = [session]")),
        code(BUILD),
        code(DATA),
        code(START),
        code(WATCH),
        md(TENSORBOARD_MD.format(local="/content/gradbox-local")),
        code(SAMPLE),
        code(EXPORT),
        code(STOP.format(flush=FLUSH_COLAB)),
    ], "colab")


def kaggle():
    return notebook([
        md(INTRO.format(platform="Kaggle", where="on your Google Drive, reached through rclone")),
        code(PARAMETERS_KAGGLE, tags=["parameters"]),
        md(MOUNT_KAGGLE_MD),
        code(MOUNT_KAGGLE, tags=["platform"]),
        code(SOURCE.format(prefix="kaggle", backend="rclone", gpus=KAGGLE_GPUS)),
        code(BUILD),
        code(DATA),
        code(START),
        code(WATCH),
        md(TENSORBOARD_MD.format(local="/kaggle/working/gradbox-local")),
        code(SAMPLE),
        code(EXPORT),
        code(STOP.format(flush="")),
    ], "kaggle")


def with_ids(nb, prefix):
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"{prefix}-{i:02d}"  # stable ids: regenerating changes nothing
    return nb


def render(nb):
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, nb in (("colab_worker.ipynb", with_ids(colab(), "colab")),
                     ("kaggle_worker.ipynb", with_ids(kaggle(), "kaggle"))):
        path = os.path.join(HERE, name)
        text = render(nb)
        if check:
            with open(path) as f:
                if f.read() != text:
                    stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
            print(path)
    if stale:
        sys.exit("stale (run notebooks/make_notebooks.py): " + ", ".join(stale))


if __name__ == "__main__":
    main()
