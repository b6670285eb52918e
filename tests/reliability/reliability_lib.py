"""Helpers shared by the reliability tests: run divsim under mpiexec with a hard time limit that kills
the whole process tree (Hydra starts every rank in its own session, so killing mpiexec alone can leave
ranks running), find a job's rank processes, and snapshot a folder to prove nothing was written.

It does not judge results; each test script states its own expectations.
"""
import os
import signal
import subprocess
import time


def children_map():
    """{parent pid: [child pids]} of every process visible in /proc."""
    kids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def descendants(pid):
    """pid and every process below it, parents before children."""
    kids, out, todo = children_map(), [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def process_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def rank_pids(mpiexec_pid, binary_name="divsim"):
    """The job's rank processes (by executable name), in start order."""
    return sorted(p for p in descendants(mpiexec_pid)[1:] if process_name(p) == binary_name)


def kill_tree(pid, sig=signal.SIGKILL, ranks_first=True):
    """Sends sig to pid and all its descendants; with ranks_first the leaves go first, so the ranks die
    before mpiexec can react (what a scheduler's kill of the whole job does)."""
    pids = descendants(pid)
    for p in reversed(pids) if ranks_first else pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


class Job:
    """One mpiexec run in the background; wait() enforces a time limit by killing the whole tree."""

    def __init__(self, mpiexec, ranks, argv, cwd, env=None, preexec_fn=None):
        self.started = time.monotonic()
        self.proc = subprocess.Popen([mpiexec, "-n", str(ranks), *argv], cwd=cwd, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec_fn)

    @property
    def pid(self):
        return self.proc.pid

    def wait(self, timeout):
        """(returncode or None if it had to be killed, stdout, stderr)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
            return self.proc.returncode, out, err
        except subprocess.TimeoutExpired:
            kill_tree(self.proc.pid)
            out, err = self.proc.communicate()
            return None, out, err


def run_job(mpiexec, ranks, argv, cwd, timeout=60, env=None, preexec_fn=None):
    return Job(mpiexec, ranks, argv, cwd, env, preexec_fn).wait(timeout)


def snapshot(root):
    """{relative path: (kind, size, mtime_ns)} of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            kind = "dir" if os.path.isdir(path) and not os.path.islink(path) else "file"
            out[os.path.relpath(path, root)] = (kind, st.st_size if kind == "file" else 0, st.st_mtime_ns)
    return out
