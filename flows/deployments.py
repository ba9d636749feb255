"""The deployments of ``prefect.yaml``, served from one local process (``transit-release serve``).

``prefect deploy --all`` registers the deployments of ``prefect.yaml`` with a
Prefect server, and workers of the process pool run them. ``serve`` reads the
same file (same names, parameters and cron schedules, ``{{ $NAME }}`` filled from
the environment exactly as ``prefect deploy`` does) and runs them with Prefect's
``serve``: one process that both holds the schedules and executes the runs. Prefect's
scheduler service creates the scheduled runs, so ``serve`` needs a server: the one
``PREFECT_API_URL`` names, or else a local one it starts on loopback for as long as
it runs (its database under ``<home>/.prefect``).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from transit_release.errors import ConfigError

PROJECT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = PROJECT / "prefect.yaml"
_UNRESOLVED = re.compile(r"\{\{\s*\$(\w+)\s*\}\}")


def read_deployments(path: str | Path = DEFAULT_FILE) -> list[dict]:
    """The deployments of a ``prefect.yaml``, with ``{{ $NAME }}`` taken from the environment."""
    from prefect.utilities.templating import apply_values

    path = Path(path)
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read deployments from {path}: {exc}") from None
    deployments = apply_values((spec or {}).get("deployments") or [], os.environ, remove_notset=False)
    if not deployments:
        raise ConfigError(f"{path} defines no deployments")
    missing = sorted({m for d in deployments for m in _UNRESOLVED.findall(repr(d.get("parameters", {})))})
    if missing:
        raise ConfigError(f"{path}: set the environment variable(s) {', '.join(missing)} "
                          "(the deployments' parameters read them)")
    return deployments


def runner_deployments(path: str | Path = DEFAULT_FILE) -> list:
    """``RunnerDeployment`` objects for ``prefect.serve``, one per deployment of the file."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.schedules import Cron

    base = Path(path).resolve().parent
    out = []
    for d in read_deployments(path):
        file, _, func = d["entrypoint"].partition(":")
        flow = load_flow_from_entrypoint(f"{base / file}:{func}")
        schedules = [Cron(s["cron"], timezone=s.get("timezone")) for s in d.get("schedules") or []]
        out.append(flow.to_deployment(name=d["name"], description=d.get("description"), tags=d.get("tags"),
                                      parameters=d.get("parameters") or {}, schedules=schedules))
    return out


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_server(prefect_home: Path, timeout: float = 120.0):
    """A Prefect server (with its scheduler) on loopback for the duration; yields its API URL."""
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(prefect_home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_UI_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                             "--port", str(port), "--no-ui"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the local Prefect server exited (code {proc.returncode}): "
                                   f"{(proc.stderr.read() if proc.stderr else '')[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local Prefect server did not answer on {url} within {timeout:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def serve(path: str | Path = DEFAULT_FILE, api_url: str | None = None) -> None:
    """Serve every deployment of ``path`` until interrupted, against ``api_url`` or the configured API."""
    from prefect import serve as prefect_serve
    from prefect.settings import PREFECT_API_URL, temporary_settings

    path = Path(path).resolve()
    # entrypoints are recorded relative to the working directory, and the runs' relative paths
    # (config, policy) are the project's, as for a worker: work from the project directory
    os.chdir(path.parent)
    deployments = runner_deployments(path)
    with temporary_settings(updates={PREFECT_API_URL: api_url} if api_url else {}):
        prefect_serve(*deployments, print_starting_message=True)
