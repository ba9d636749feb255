"""How fast a terminal's Ctrl-C stops a release, at each stage (not a test).

    python benchmarks/bench_interrupt.py [--work DIR] [--scale 0.002] [--stages before-charge:0,after-charge:2,...]

For each stage (and number of local Dask workers), runs ``transit-release release`` on a synthetic week with
its own temporary Prefect server, as a terminal user does, in a session of its own (a terminal's process
group); the run waits at the stage (``TRANSIT_RELEASE_PAUSE_AT``), and SIGINT goes to the whole process group,
as a terminal sends Ctrl-C. Prints, per stage: the exit code, the seconds from the signal to the command's exit,
which of the command's children were in its process group (those get the Ctrl-C themselves), whether any
child outlived it by more than 15 s, and the command's last line.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STAGES = "before-charge:0,before-charge:2,after-charge:2,after-staging:0,after-intent:0"


def processes() -> dict[int, tuple[str, int, int, str]]:
    """pid → (state, parent, process group, command) of every process."""
    out = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:70]
                out[int(p.name)] = (fields[0], int(fields[1]), int(fields[2]), cmd)
            except (OSError, IndexError, ValueError):
                continue
    return out


def descendants(pid: int, table: dict) -> set[int]:
    found, frontier = set(), {pid}
    while frontier:
        frontier = {q for q, v in table.items() if v[1] in frontier} - found
        found |= frontier
    return found


def one(work: Path, trips: Path, stops: Path, stage: str, workers: int) -> dict:
    home, cue, err = work / f"home-{stage}-{workers}", work / f"cue-{stage}-{workers}", work / f"err-{stage}-{workers}"
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    env.update({"TRANSIT_RELEASE_PAUSE_AT": stage, "TRANSIT_RELEASE_PAUSE_FILE": str(cue)})
    cmd = [sys.executable, "-m", "transit_release.cli", "release", "--trips", str(trips), "--stops", str(stops),
           "--home", str(home), "--period-start", "2016-08-08", "--period-end", "2016-08-14", "--release-id", "r",
           "--workers", str(workers)]
    with open(err, "w+") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=fh, start_new_session=True)
        while not cue.exists():
            if proc.poll() is not None:
                fh.seek(0)
                return {"stage": stage, "workers": workers, "error": fh.read()[-500:]}
            time.sleep(0.05)
        time.sleep(0.3)
        table = processes()
        children = descendants(proc.pid, table)
        in_group = [table[c][3] for c in children if table[c][2] == proc.pid]
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        seconds = time.monotonic() - start
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            now = processes()
            left = [now[c][3] for c in children if c in now and now[c][0] != "Z"]
            if not left:
                break
            time.sleep(0.2)
        fh.seek(0)
        last = [line for line in fh.read().splitlines() if line.strip()][-1:]
    return {"stage": stage, "workers": workers, "exit": code, "seconds": round(seconds, 2),
            "children": len(children), "children_in_group": in_group, "outlived_15s": left, "line": last}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", help="working directory (default: a temporary one)")
    p.add_argument("--scale", type=float, default=0.002)
    p.add_argument("--stages", default=DEFAULT_STAGES, help=f"stage:workers,... (default {DEFAULT_STAGES})")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-interrupt-"))
    week = work / "week"
    if not (week / "trips.csv").exists():
        subprocess.run([sys.executable, "-m", "transit_release.cli", "synth", "--out", str(week), "--scale",
                        str(args.scale), "--seed", "11", "--quiet"], check=True, cwd=ROOT)
    for item in args.stages.split(","):
        stage, workers = item.split(":")
        print(one(work, week / "trips.csv", week / "stops.csv", stage, int(workers)), flush=True)


if __name__ == "__main__":
    main()
