"""Where the candidate's process runs: a scrubbed environment, a scratch directory of its own, resource
limits, and (where the machine has them) no network, its own process tree and a read-only view of the files.

Tiers, the first that works is used (`tiers()`; remote.py falls back to the next when one cannot even
start the runner):
- `bwrap`: bubblewrap, no network, a PID namespace, everything read-only but the scratch directory, the
  extension build cache and /dev/shm (the tensors' shared memory);
- `unshare`: util-linux's unshare: a user namespace (its capabilities hold there alone), no network, a PID
  namespace whose processes all die with the runner; files as the caller sees them;
- `none`: the environment, scratch directory, limits and process-group kill only.
"""
from __future__ import annotations

import ctypes
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

# What the candidate's process may inherit of the caller's environment; everything else (API keys,
# tokens, credentials, the caller's own settings) stays out.
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CC", "CXX", "TORCH_CUDA_ARCH_LIST",
            "MAX_JOBS", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF")
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def nondumpable() -> bool:
    """Make this process's memory, file descriptors and environment unreadable to other processes of the
    same user (/proc/PID/mem, /fd, /environ become root's; ptrace is refused)."""
    return _prctl(_PR_SET_DUMPABLE, 0)


def dumpable() -> bool:
    return _prctl(_PR_SET_DUMPABLE, 1)


def dumpable_now() -> bool:
    try:
        return ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 1  # PR_GET_DUMPABLE
    except (OSError, AttributeError):
        return False


def subreaper() -> bool:
    """Orphans below this process come back to it, not to init: a daemon the candidate starts stays findable."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def extension_dir() -> str:
    """Where torch builds and caches load_inline extensions for this caller (the candidate keeps using it)."""
    from torch.utils.cpp_extension import _get_build_directory

    return str(Path(_get_build_directory("x", verbose=False)).parent)


def runner_env(scratch: Path, repo_root: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_KEEP}
    env.update(HOME=str(scratch), TMPDIR=str(scratch), PYTHONPATH=repo_root, PYTHONDONTWRITEBYTECODE="1",
               TORCH_EXTENSIONS_DIR=extension_dir(), TRITON_CACHE_DIR=str(scratch / "triton"))
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd + ["true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def tiers() -> list[str]:
    """The sandboxes this machine can give, strongest first; always ends with `none`."""
    out = []
    if shutil.which("bwrap") and _works(["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--"]):
        out.append("bwrap")
    if shutil.which("unshare") and _works(_unshare([])):
        out.append("unshare")
    return out + ["none"]


def _unshare(cmd: list[str], pid: bool = True) -> list[str]:
    # NOTE: a user namespace even for root: the candidate's capabilities hold in it alone (no ptrace of the
    # judge, no mounts that reach the host's processes).
    own_pids = ["--pid", "--fork", "--mount-proc", "--kill-child"] if pid else []
    return ["unshare", "--user", "--map-root-user", "--net", *own_pids, "--", *cmd]


def wrap(tier: str, cmd: list[str], scratch: Path, pid: bool = True) -> list[str]:
    """`cmd` run inside the tier's sandbox; `pid`: in a PID namespace of its own. NOTE: not on a GPU: CUDA IPC
    between the judge and the candidate's process may need them to share one (the subreaper and the
    descendants' kill hold instead)."""
    if tier == "bwrap":
        rw = [scratch, Path(extension_dir()), Path("/dev/shm")]
        binds = [a for p in rw if p.exists() for a in ("--bind", str(p), str(p))]
        own_pids = ["--unshare-pid"] if pid else []
        return ["bwrap", "--die-with-parent", "--unshare-net", *own_pids, "--ro-bind", "/", "/", "--dev-bind", "/dev",
                "/dev", "--proc", "/proc", *binds, "--chdir", str(scratch), "--", *cmd]
    if tier == "unshare":
        return _unshare(cmd, pid)
    return cmd


def describe(tier: str, pid: bool = True) -> str:
    own = "own PID namespace (all its processes die with it)" if pid else "the judge's PID namespace (a GPU)"
    return {"bwrap": f"bubblewrap: no network, {own}, read-only files but its scratch directory",
            "unshare": f"unshare: user namespace, no network, {own}; files writable as for the caller",
            "none": "no namespaces on this machine: scrubbed environment, scratch directory, limits, process "
                    "group killed"}[tier]


def confine(cpu_s: int, memory_bytes: int | None, file_bytes: int = 16 << 30) -> None:
    """Limits the candidate's process cannot raise again (soft = hard), set by the runner before the import."""
    limits = [(resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, file_bytes)]
    if memory_bytes:
        limits.append((resource.RLIMIT_AS, memory_bytes))
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc."""
    parents: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if rest[0] != "Z":
            parents.setdefault(int(rest[1]), []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for k in parents.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def kill_tree(proc: subprocess.Popen) -> int:
    """Kill the candidate's process and everything below it, orphans that came back to this subreaper
    included (looked for again until none is left); its exit status."""
    for _ in range(5):
        below = descendants(proc.pid) | descendants(os.getpid()) | ({proc.pid} if proc.poll() is None else set())
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not below:
            break
    rc = proc.wait()
    _reap()
    return rc


def _reap() -> None:
    """Collect orphans that came back to this subreaper."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
