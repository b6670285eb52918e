"""A real single-node Slurm cluster for the tests and for tools/local-slurm: munged + slurmctld + slurmd
from Debian's slurm-wlm and munge packages, started on this machine with all state under one temp folder,
and stopped again.

It is a workstation's stand-in, not a way to run a site: one node declared with 8 CPUs (whatever the machine has),
no cgroups (they do not work in containers), no accounting, the current user (root here) as SlurmUser. It
stops only the daemons it started (by their process handles) after cancelling its own jobs, and leaves
any other Slurm or munge on the machine alone: its own ports, socket, config and SLURM_CONF.
"""
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo")
# Job states after which a job never changes again (unless requeued by hand).
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE"}
SKIP = 77  # CTest SKIP_RETURN_CODE of the slurm tests


def missing_programs():
    return [p for p in PROGRAMS if shutil.which(p) is None and not os.path.exists(f"/usr/sbin/{p}")]


def _program(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(n):
    """n distinct TCP ports free right now (all held open together, so none is handed out twice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(what, predicate, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


class LocalSlurm:
    """Context manager: `with LocalSlurm(cpus=8) as slurm: jobid = slurm.sbatch([...])`."""

    NODE = "divsimnode"

    def __init__(self, cpus=8, keep=False):
        self.cpus = cpus
        self.keep = keep  # keep the temp folder (config, logs, spool) after a clean stop
        self.procs = {}   # name -> Popen of the daemons this fixture started
        # Under /tmp, not $TMPDIR: the munge socket path must stay under the 108-byte socket name limit.
        self.root = tempfile.mkdtemp(prefix="divsim-slurm-", dir="/tmp")
        self.conf = os.path.join(self.root, "slurm.conf")
        self.log = {n: os.path.join(self.root, f"{n}.log") for n in ("munged", "slurmctld", "slurmd")}
        # Clients and jobs see this cluster only: no inherited SLURM_* (a CI job may itself run under Slurm).
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.env["SLURM_CONF"] = self.conf

    # ---- life cycle -------------------------------------------------------------------------------
    def __enter__(self):
        try:
            self._start_munge()
            self._write_config()
            self._start("slurmctld", [_program("slurmctld"), "-D", "-c", "-f", self.conf])
            self._start("slurmd", [_program("slurmd"), "-D", "-f", self.conf, "-N", self.NODE])
            wait_until("node idle", lambda: self.node_state() == "IDLE", 60)
        except BaseException:
            self.dump_logs()
            self.stop()
            raise
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None:
            self.dump_logs()
        self.stop(clean=kind is None)
        return False

    def _start_munge(self):
        d = os.path.join(self.root, "munge")
        os.makedirs(d)
        os.chmod(self.root, 0o755)  # munged refuses a socket folder others cannot traverse
        os.chmod(d, 0o755)
        key = os.path.join(d, "munge.key")
        self.socket = os.path.join(d, "munge.socket")
        subprocess.run([_program("mungekey"), "--create", f"--keyfile={key}"], check=True, timeout=30,
                       capture_output=True)
        os.chmod(key, 0o600)
        self._start("munged", [_program("munged"), "--foreground", f"--key-file={key}",
                               f"--socket={self.socket}", f"--pid-file={d}/munged.pid",
                               f"--seed-file={d}/munged.seed", f"--log-file={self.log['munged']}"])
        wait_until("munge socket", lambda: os.path.exists(self.socket), 20)

    def _start(self, name, cmd):
        # The daemons' own stdout/stderr go to <name>.out beside their log files (startup errors land there).
        out = open(os.path.join(self.root, f"{name}.out"), "w")
        self.procs[name] = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        out.close()
        time.sleep(0.2)
        if self.procs[name].poll() is not None:
            raise RuntimeError(f"{name} exited at start with code {self.procs[name].returncode}")

    def _write_config(self):
        user = pwd.getpwuid(os.getuid()).pw_name
        host = socket.gethostname().split(".")[0]  # slurmctld compares the short name with SlurmctldHost
        ctld_port, slurmd_port = _free_ports(2)
        r = self.root
        os.makedirs(f"{r}/state")
        os.makedirs(f"{r}/spool")
        open(f"{r}/plugstack.conf", "w").close()  # no site SPANK plugins from /etc/slurm
        lines = [
            "ClusterName=divsimtest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # A requeued job waits cred_expire seconds (default 120) before it may start again, and a
            # pending job waits for the next scheduling pass (default every 60 s): both shortened.
            f"AuthInfo=socket={self.socket},cred_expire=10",
            "SchedulerParameters=sched_interval=2",
            "MinJobAge=3600",  # finished jobs stay visible to `scontrol show job` for the whole test
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd.pid",
            f"SlurmctldLogFile={self.log['slurmctld']}",
            f"SlurmdLogFile={self.log['slurmd']}",
            f"PlugStackConfig={r}/plugstack.conf",
            # cgroups do not work in containers: with the cgroup defaults every job fails to launch.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            # Jobs share the node CPU by CPU; more CPUs than the machine has needs config_overrides.
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides",
            "MpiDefault=pmi2",         # srun starts one MPI job, not W single-rank jobs
            "EnforcePartLimits=ALL",   # an oversized job fails at submit instead of pending forever
            "ReturnToService=2",
            "MailProg=/bin/true",
            f"NodeName={self.NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={self.cpus} "
            "State=UNKNOWN",
            f"PartitionName=debug Nodes={self.NODE} Default=YES MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def stop(self, clean=False):
        """Cancels this cluster's jobs, then stops the daemons this fixture started (slurmd first)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run(["scancel", "--full", "--partition=debug"], check=False)
            try:
                wait_until("jobs to end", lambda: not self.run(["squeue", "-h"], check=False).stdout.strip(), 90)
            except TimeoutError as e:
                print(f"local_slurm: {e}; stopping the daemons anyway", file=sys.stderr)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=20)
        if clean and not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            print(f"local_slurm: state, config and logs kept in {self.root}", file=sys.stderr)

    def dump_logs(self, lines=60):
        for name in sorted(os.listdir(self.root)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.root, name), errors="replace") as f:
                    tail = f.readlines()[-lines:]
                print(f"---- {name} (last {len(tail)} lines) ----\n{''.join(tail)}", file=sys.stderr)

    # ---- clients ----------------------------------------------------------------------------------
    def run(self, cmd, check=True, timeout=60, **kw):
        p = subprocess.run(cmd, env=kw.pop("env", self.env), capture_output=True, text=True, timeout=timeout,
                           **kw)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}{p.stderr}")
        return p

    def node_state(self):
        p = self.run(["sinfo", "-h", "-n", self.NODE, "-o", "%T"], check=False, timeout=10)
        return p.stdout.strip().upper() if p.returncode == 0 else ""

    def sbatch(self, args, cwd, env=None):
        """Submits a job (`args` = sbatch options, script, script arguments); returns the job id."""
        full_env = dict(self.env, **(env or {}))
        p = self.run(["sbatch", "--parsable", *args], cwd=cwd, env=full_env)
        return p.stdout.strip().split(";")[0]

    def jobs(self, jobid):
        """{job id: {field: value}} from `scontrol show job -o` (all elements of an array job)."""
        p = self.run(["scontrol", "show", "job", "-o", str(jobid)], check=False, timeout=20)
        out = {}
        for line in p.stdout.splitlines():
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if "JobId" in fields:
                out[fields["JobId"]] = fields
        return out

    def wait(self, jobid, timeout, expect_count=1):
        """Waits until all `expect_count` jobs of `jobid` are in a final state; returns jobs(jobid).

        `sbatch --wait` is not used: it returns 0 for cancelled and failed-to-launch jobs."""
        def done():
            j = self.jobs(jobid)
            return len(j) >= expect_count and all(f["JobState"] in FINAL_STATES for f in j.values())
        try:
            wait_until(f"job {jobid}", done, timeout, interval=1.0)
        except TimeoutError:
            for f in self.jobs(jobid).values():
                print(f"job {f['JobId']}: {f.get('JobState')} {f.get('Reason')}", file=sys.stderr)
            raise
        return self.jobs(jobid)

    def wait_state(self, jobid, state, restarts, timeout):
        """Waits until the job is in `state` after `restarts` requeues; returns its fields, or None once
        it has ended instead."""
        found = {}

        def reached():
            f = self.jobs(jobid).get(str(jobid), {})
            found.update(f)
            return f.get("JobState") in FINAL_STATES or (
                f.get("JobState") == state and int(f.get("Restarts", -1)) == restarts)
        wait_until(f"job {jobid} {state} after {restarts} restarts", reached, timeout)
        return None if found["JobState"] in FINAL_STATES else found
