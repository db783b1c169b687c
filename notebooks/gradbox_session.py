"""What the gradbox notebooks do, as plain functions: the cells stay short and the tests drive
the same code headlessly (tests/notebooks/run_notebooks.py).

A session is one worker: it builds gradbox (or takes the build from a cache in the shared
storage, keyed by gradbox commit, torch version and GPU architecture), copies or prepares the
data, starts `gradbox train` in the background (the worker starts its own syncer), shows
progress, and stops with an announced departure.
"""
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

EXECUTABLES = ("gradbox", "gradbox-sync")


@dataclasses.dataclass
class Session:
    source_dir: str          # the gradbox clone
    run_folder: str          # the run's shared folder (a Drive path, or an rclone remote "name:path")
    worker: str              # unique per session
    local_dir: str           # this session's disk: bin/, data/, out/, logs
    storage: str             # a folder (Drive) or an rclone remote beside the run: build cache, datasets
    sync_backend: str = "mounted"  # mounted (Colab's Drive) or rclone (Kaggle)
    python: str = sys.executable   # whose torch the build uses
    env: dict = None               # extra environment of the worker (CUDA_VISIBLE_DEVICES)
    shared_bin: str = ""           # the executables, when another session of this machine built them
    process: subprocess.Popen = None

    # ---- where things are
    @property
    def bin_dir(self):
        return self.shared_bin or os.path.join(self.local_dir, "bin")

    @property
    def gradbox(self):
        return os.path.join(self.bin_dir, "gradbox")

    @property
    def out_dir(self):
        return os.path.join(self.local_dir, "out")

    @property
    def log_path(self):
        return os.path.join(self.local_dir, "worker.log")

    def _storage_path(self, *parts):
        joiner = "/" if is_remote(self.storage) else os.sep
        return joiner.join([self.storage.rstrip("/")] + list(parts))


def one_per_gpu(session, gpus):
    """Kaggle's 2 x T4: one worker per GPU, named <worker>-gpu<i>, each with its own local folder
    and the one build."""
    if gpus <= 1:
        return [session]
    return [dataclasses.replace(session, worker=f"{session.worker}-gpu{i}", local_dir=os.path.join(session.local_dir, f"gpu{i}"),
                                env={"CUDA_VISIBLE_DEVICES": str(i)}, shared_bin=session.bin_dir)
            for i in range(gpus)]


def run_secret(name="GRADBOX_RUN_SECRET"):
    """The run secret that signs every file of the run (Note [Signed files]), or this member's
    credential (`gradbox secret --member NAME`): from this process's environment, else the
    platform's secret store under `name` (Colab: the key icon, Secrets; Kaggle: Add-ons,
    Secrets), else None (an unsigned run). `gradbox secret` makes one. Put in the environment,
    the workers started here take it."""
    secret = os.environ.get("GRADBOX_RUN_SECRET")
    if not secret:
        try:
            from google.colab import userdata  # Colab
            secret = userdata.get(name)
        except Exception:  # not Colab, or no such secret, or not granted to this notebook
            pass
    if not secret:
        try:
            from kaggle_secrets import UserSecretsClient  # Kaggle
            secret = UserSecretsClient().get_secret(name)
        except Exception:
            pass
    if secret:
        os.environ["GRADBOX_RUN_SECRET"] = secret.strip()
        member = credential_member(secret.strip())
        log(f"member credential for {member} from {name}: this session is worker {member}" if member
            else f"run secret from {name}: every file is signed")
        return secret.strip()
    log(f"UNSIGNED RUN: no secret {name} in this platform's secrets; anyone who can write to the run's folder "
        "can inject into it. Make one with `gradbox secret` and give every session the same.")
    return None


def credential_member(secret):
    """The worker name a member credential (`gradbox secret --member NAME`, Note [Member
    signatures]) was made for; None for the run secret itself or no secret. A credential signs
    only as its member, so the session must take that name."""
    prefix = "gradbox-member-1:"
    if secret and secret.startswith(prefix):
        return secret[len(prefix):].split(":", 1)[0]
    return None


def is_remote(path):
    """An rclone remote "name:path" (not a local path that happens to hold a colon)."""
    head = path.split("/", 1)[0]
    return ":" in head and not os.path.isabs(path)


def log(message):
    print(f"[gradbox] {message}", flush=True)


def run(argv, **kwargs):
    """Runs a command, raising with its output when it fails."""
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result.stdout


# ---- storage: a mounted folder or an rclone remote --------------------------------------------

def storage_exists(path):
    if is_remote(path):
        return subprocess.run(["rclone", "lsf", path], capture_output=True).returncode == 0
    return os.path.exists(path)


def storage_get(path, local):
    """Copies a file or folder from the storage to local disk, atomically for a file."""
    if is_remote(path):
        run(["rclone", "copyto", path, local])
        return
    if os.path.isdir(path):
        shutil.copytree(path, local, dirs_exist_ok=True)
    else:
        shutil.copyfile(path, local + ".part")
        os.replace(local + ".part", local)


def storage_put(local, path):
    """Copies a local file or folder into the storage; a file appears whole or not at all."""
    if is_remote(path):
        run(["rclone", "copyto", local, path])
        return
    if os.path.isdir(local):
        shutil.copytree(local, path, dirs_exist_ok=True)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.part-{os.getpid()}"
    shutil.copyfile(local, tmp)
    os.replace(tmp, path)


# ---- the build, cached ------------------------------------------------------------------------

def build_key(session):
    """gradbox commit (plus a hash of uncommitted changes), torch version, GPU architecture."""
    commit = run(["git", "-C", session.source_dir, "rev-parse", "--short=12", "HEAD"]).strip()
    dirty = run(["git", "-C", session.source_dir, "status", "--porcelain", "--untracked-files=no"])
    if dirty:
        diff = run(["git", "-C", session.source_dir, "diff", "HEAD"])
        commit += "-dirty" + hashlib.sha256(diff.encode()).hexdigest()[:8]
    probe = ("import torch; c = torch.cuda.get_device_capability() if torch.cuda.is_available() else None;"
             "print(torch.__version__, 'sm%d%d' % c if c else 'cpu')")
    torch_version, arch = run([session.python, "-c", probe]).split()
    return f"{commit}-torch{torch_version.replace('+', '_')}-{arch}"


def install_build(session, jobs=2):
    """Puts gradbox and gradbox-sync in <local>/bin: from the cache when it holds this key,
    else by building (scripts/setup.sh) and filling the cache for the next session."""
    started = time.time()
    key = build_key(session)
    cached = session._storage_path("build-cache", key + ".tar")
    os.makedirs(session.bin_dir, exist_ok=True)
    # A cached build still links the image's shared libraries (SentencePiece, spdlog, Boost, ...).
    if storage_exists(cached) and _install_packages(session) and _unpack_build(session, cached):
        log(f"build {key}: from the cache in {time.time() - started:.0f} s")
        return "cache"
    log(f"build {key}: not cached; building (about 5 minutes on 2 cores the first time, after the packages)")
    env = dict(os.environ, GRADBOX_BUILD_JOBS=str(jobs))
    code = _run_with_progress(["bash", "scripts/setup.sh", "--python", session.python, "--no-tests"],
                              session.source_dir, env, os.path.join(session.local_dir, "build.log"))
    if code != 0:
        raise RuntimeError(f"the build failed (exit {code}); see {session.local_dir}/build.log")
    for name in EXECUTABLES:
        shutil.copy2(os.path.join(session.source_dir, "build", "bin", name), session.bin_dir)
    _check_executables(session)
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = os.path.join(tmp, key + ".tar")
        with tarfile.open(tar_path, "w") as tar:
            for name in EXECUTABLES:
                tar.add(os.path.join(session.bin_dir, name), arcname=name)
        with open(tar_path + ".sha256", "w") as f:
            f.write(_sha256(tar_path))
        storage_put(tar_path + ".sha256", cached + ".sha256")
        storage_put(tar_path, cached)  # last: a reader that sees the tar sees its checksum
    log(f"build {key}: built in {time.time() - started:.0f} s and cached for the next session")
    return "built"


def _run_with_progress(argv, cwd, env, log_path, every_s=15):
    """Runs the build with its output in `log_path`, printing a progress line with an ETA from
    ninja's "[done/total]" counts every `every_s` seconds."""
    started, last_print = time.time(), 0.0
    with open(log_path, "w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            out.write(line)
            if line.startswith("setup:"):
                log(line.strip())
            if line.startswith("[") and "/" in line.split("]")[0] and time.time() - last_print > every_s:
                try:
                    done, total = (int(x) for x in line[1:line.index("]")].split("/"))
                except ValueError:
                    continue
                elapsed = time.time() - started
                eta = elapsed / done * (total - done) if done else 0
                log(f"build {done}/{total} ({100 * done // total}%), {elapsed / 60:.1f} min so far, ~{eta / 60:.0f} min left")
                last_print = time.time()
        return proc.wait()


def _install_packages(session):
    result = subprocess.run(["bash", "scripts/setup.sh", "--packages-only"], cwd=session.source_dir,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"installing the Debian packages failed:\n{result.stdout}{result.stderr}")
    return True


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _unpack_build(session, cached):
    """False (and a rebuild) when the cached build is damaged or does not run here."""
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = os.path.join(tmp, "build.tar")
        try:
            storage_get(cached, tar_path)
            storage_get(cached + ".sha256", tar_path + ".sha256")
            with open(tar_path + ".sha256") as f:
                if f.read().strip() != _sha256(tar_path):
                    log(f"{cached}: checksum mismatch; rebuilding")
                    return False
            with tarfile.open(tar_path) as tar:
                names = sorted(tar.getnames())
                if names != sorted(EXECUTABLES):
                    log(f"{cached}: holds {names}, not {list(EXECUTABLES)}; rebuilding")
                    return False
                if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4: no links or paths out
                    tar.extractall(session.bin_dir, filter="data")
                else:
                    tar.extractall(session.bin_dir)  # names checked above: exactly the two executables
            _check_executables(session)
            return True
        except (OSError, RuntimeError, tarfile.TarError) as e:
            log(f"{cached}: unusable ({e}); rebuilding")
            return False


def _check_executables(session):
    for name in EXECUTABLES:
        path = os.path.join(session.bin_dir, name)
        os.chmod(path, 0o755)
        run([path, "--help"])


# ---- data ---------------------------------------------------------------------------------------

# Texts a session can train on with nothing uploaded: the platform's own package manager ships
# them (Colab and Kaggle run Ubuntu, whose bible-kjv is the package the demo uses on Debian).
PACKAGED_TEXTS = {
    "kjv": {"package": "bible-kjv", "program": "bible",
            "command": "bible -f Gen1:1-Rev22:21 | sed -E 's/^[^ ]+ //'",  # a verse a line, no references
            "about": "the King James Bible, 4.1 MB (~1M GPT-2 tokens: enough to see a run train, not a model)"},
}


def packaged_text(session, name):
    """Writes the packaged text `name` to this session's disk (installing its package when the
    platform lacks it) and returns the file."""
    recipe = PACKAGED_TEXTS[name]
    if shutil.which(recipe["program"]) is None:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        log(f"text {name}: installing the {recipe['package']} package")
        run(sudo + ["apt-get", "update", "-qq"])
        run(sudo + ["apt-get", "install", "-y", "-qq", recipe["package"]],
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    path = os.path.join(session.local_dir, "text", name + ".txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".part", "w") as out:
        subprocess.run(["bash", "-o", "pipefail", "-c", recipe["command"]], stdout=out, check=True)
    os.replace(path + ".part", path)
    return path


def fetch_data(session, dataset, text=None, prepare_args=()):
    """A prepared dataset in the shared storage, copied to local disk once. When it is not
    there, prepares it here from `text` (a file or folder) or, with no text, from the packaged
    text of that name (PACKAGED_TEXTS), and publishes it for the other sessions."""
    local = os.path.join(session.local_dir, "data", dataset)
    # meta.json is what `gradbox prepare` writes last, and what a publisher copies last: a
    # folder with it is whole (the cell run twice must not copy again onto it).
    if os.path.isfile(os.path.join(local, "meta.json")):
        log(f"data {dataset}: already on local disk")
        return local
    shared = session._storage_path("datasets", dataset)
    joiner = "/" if is_remote(shared) else os.sep
    if storage_exists(shared + joiner + "meta.json"):
        started = time.time()
        shutil.rmtree(local + ".part", ignore_errors=True)
        storage_get(shared, local + ".part")
        os.replace(local + ".part", local)
        log(f"data {dataset}: copied from {shared} in {time.time() - started:.0f} s")
        return local
    if not text:
        if dataset not in PACKAGED_TEXTS:
            known = ", ".join(f"{k} ({v['about']})" for k, v in PACKAGED_TEXTS.items())
            raise RuntimeError(f"no dataset {shared}: set TEXT to a text file or folder to prepare {dataset!r} from, "
                               f"or DATASET to one made from a package: {known}")
        text = packaged_text(session, dataset)
    shutil.rmtree(local + ".part", ignore_errors=True)
    run([session.gradbox, "prepare", "--input", text, "--out", local + ".part", *prepare_args])
    os.replace(local + ".part", local)
    publish_dataset(local, shared)
    log(f"data {dataset}: prepared from {text} and published to {shared}")
    return local


def publish_dataset(local, shared):
    """Copies a prepared dataset into the storage with its meta.json last, so that a session
    that finds meta.json there finds every file beside it."""
    joiner = "/" if is_remote(shared) else os.sep
    for name in sorted(os.listdir(local), key=lambda n: (n == "meta.json", n)):
        storage_put(os.path.join(local, name), shared + joiner + name)


# ---- the worker -----------------------------------------------------------------------------------

def start_worker(session, data, train_args=(), settle_seconds=20.0):
    """Starts `gradbox train` in the background (the worker starts its syncer); output goes to
    <local>/worker.log. Waits up to `settle_seconds` for the worker to join or fail: a name that
    another live session uses is refused here, with gradbox's message."""
    if session.process and session.process.poll() is None:
        log(f"worker {session.worker} is already running (pid {session.process.pid})")
        return session.process
    os.makedirs(session.out_dir, exist_ok=True)
    argv = [session.gradbox, "train", "--data", data, "--out", session.out_dir, "--shared", session.run_folder,
            "--worker", session.worker, "--sync-backend", session.sync_backend, *train_args]
    with open(session.log_path, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        # Its own process group: the kernel's interrupts do not reach it; stop_worker does.
        env = dict(os.environ, **(session.env or {}))
        session.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    deadline = time.time() + settle_seconds
    while time.time() < deadline and session.process.poll() is None:
        recent = tail(session, 200)
        if "joined" in recent or "training on" in recent:
            break
        time.sleep(0.5)
    code = session.process.poll()
    if code is not None and code != 0:
        raise RuntimeError(f"worker {session.worker} exited {code}:\n{tail(session, 15)}")
    log(f"worker {session.worker} running (pid {session.process.pid}); log: {session.log_path}")
    return session.process


def tail(session, lines=10):
    try:
        with open(session.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except FileNotFoundError:
        return ""


def metrics(session):
    records = []
    try:
        with open(os.path.join(session.out_dir, "metrics.jsonl")) as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # the line being written
    except FileNotFoundError:
        pass
    return records


def rounds_trained(session):
    """Rounds this worker computed in (a joiner first replays rounds it was not part of)."""
    return sum(1 for r in metrics(session) if "round" in r and r.get("inner_steps", 0) > 0)


def status(session):
    """The cluster as `gradbox status` sees it from this worker's mirror of the run."""
    inbox = os.path.join(session.out_dir, "sync", "inbox")
    where = inbox if os.path.isdir(inbox) else session.run_folder
    return subprocess.run([session.gradbox, "status", "--shared", where], capture_output=True, text=True).stdout


def plot(session, plots_dir=None):
    plots_dir = plots_dir or os.path.join(session.local_dir, "plots")
    result = subprocess.run([session.gradbox, "plot", "--run", session.out_dir, "--out", plots_dir],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return []
    return [line for line in result.stdout.splitlines() if line.endswith(".png")]


def watch(session, until=None, timeout_s=600, refresh_s=15, display=True):
    """Shows the progress line, the cluster and the loss plot, refreshing every `refresh_s`,
    until `until(session)` holds, the worker exits, or `timeout_s` passes."""
    if display:
        from IPython.display import Image, clear_output
    deadline = time.time() + timeout_s
    while True:
        done = session.process is None or session.process.poll() is not None or (until and until(session))
        pngs = plot(session)
        if display:
            clear_output(wait=True)
            print(tail(session, 6))
            print(status(session))
            for png in pngs:
                if png.endswith("loss.png"):
                    from IPython.display import display as show
                    show(Image(filename=png))
        if done or time.time() > deadline:
            return pngs
        time.sleep(refresh_s)


def stop_worker(session, timeout_s=300):
    """SIGTERM: the worker finishes its step, checkpoints, announces its departure in the
    folder and stops its syncer after a final upload. Returns the exit code."""
    if session.process is None:
        return None
    if session.process.poll() is None:
        # The worker alone: it stops its syncer itself, after the final upload (a SIGTERM to the
        # whole group would stop the syncer first, and the worker with an error).
        session.process.send_signal(signal.SIGTERM)
        try:
            session.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log(f"worker did not stop in {timeout_s} s; killing it (its last checkpoint stays)")
            os.killpg(session.process.pid, signal.SIGKILL)
            session.process.wait()
    code = session.process.returncode
    log(f"worker {session.worker} stopped (exit {code})")
    return code


def export(session, destination):
    """The run as a Hugging Face folder (config, safetensors, tokenizer), written to the storage."""
    with tempfile.TemporaryDirectory() as tmp:
        run([session.gradbox, "export", "--from", session.out_dir, "--out", os.path.join(tmp, "hf")])
        storage_put(os.path.join(tmp, "hf"), destination)
    log(f"exported to {destination}")


def sample(session, prompt, tokens=60):
    return run([session.gradbox, "sample", "--from", session.out_dir, "--prompt", prompt,
                "--max-new-tokens", str(tokens)])
