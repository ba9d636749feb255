"""Every command the README and docs/*.md show runs as written.

The convention: a shell command a reader may copy is shown in a ```bash block; synopses with placeholders
(``...``, ``F``, ``DIR``) go in ```text blocks. Each ```bash command is, by its first words:

- ``transit-release …`` (or ``.venv/bin/transit-release …``): run as written, in order, page by page, in one
  temporary directory per page (the page's home), with the session's Prefect server; it must exit 0. Every such
  command of every page runs in every run of the suite, CI's included;
- ``.venv/bin/python benchmarks/…``: the script exists and takes every option shown (benchmarks run for minutes
  on the full-size week; they print numbers and are not tests);
- one of :data:`EXCLUDED`, with the reason it is not run here;

and anything else fails the test, so a new kind of command cannot slip into the documents unchecked.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest

from transit_release.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: First words of commands shown but not run here, and why.
EXCLUDED = {
    "python3 -m venv": "the README's set-up (creates the venv this test runs in); its test command is .ci/run's, "
                       "checked by test_readme_test_command_is_what_ci_runs",
    "(command -v chromium": "the README's test command: it runs this suite",
    "export ": "sets the environment of the commands that follow it",
    ".venv/bin/prefect ": "a long-lived Prefect server, work pool and worker: tests/test_deployments.py runs the "
                          "deployments on a real server's scheduler",
    "transit-release serve": "runs the schedules until stopped: tests/test_deployments.py",
    "pip install": "installs into the environment; the test environment has it (the [test] extra)",
    "frictionless validate": "names a release by placeholder; tests/test_opendata.py validates every kind's "
                             "datapackage.json as `frictionless validate` does",
    ".venv/bin/transit-release serve": "runs the schedules until stopped: tests/test_deployments.py",
}


def bash_commands(page: Path) -> list[tuple[int, str]]:
    """(line number, command) of every command in the page's ```bash blocks, as written: a trailing backslash
    continues a command on the next line; a comment (`` # …``) is dropped."""
    out, block, pending, start = [], False, [], 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            block = line.strip() == "```bash" and not block
            continue
        if not block:
            continue
        if not pending:
            start = number
        text = re.sub(r"(^|\s)#\s.*$", "", line).rstrip()
        pending.append(text.removesuffix("\\").strip())
        if text.endswith("\\"):
            continue
        command = " ".join(w for w in pending if w)
        if command:
            out.append((start, command))
        pending = []
    return out


def kind(command: str) -> str:
    for prefix in EXCLUDED:
        if command.startswith(prefix):
            return "excluded"
    if command.startswith(("transit-release ", ".venv/bin/transit-release ")):
        return "run"
    if command.startswith(".venv/bin/python benchmarks/"):
        return "benchmark"
    return "unknown"


def _all_commands():
    return [(page, n, c) for page in PAGES for n, c in bash_commands(page)]


def test_every_shown_command_is_known():
    unknown = [f"{page.relative_to(ROOT)}:{n}: {c}" for page, n, c in _all_commands() if kind(c) == "unknown"]
    assert not unknown, "commands the documents show that this test neither runs nor excludes:\n" + "\n".join(unknown)
    assert sum(kind(c) == "run" for _, _, c in _all_commands()) >= 10


def test_readme_test_command_is_what_ci_runs():
    readme = [c for _, c in bash_commands(ROOT / "README.md") if c.startswith("(command -v chromium")]
    assert len(readme) == 1
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci == readme[0]


def test_benchmark_commands_name_scripts_and_options_that_exist():
    for page, n, command in _all_commands():
        if kind(command) != "benchmark":
            continue
        words = shlex.split(command)
        script = ROOT / words[1]
        assert script.is_file(), f"{page.name}:{n}: {words[1]} does not exist"
        source = script.read_text(encoding="utf-8")
        for option in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
            assert f'"{option}"' in source, f"{page.name}:{n}: {words[1]} takes no {option}"


@pytest.mark.flow
@pytest.mark.parametrize("page", [p for p in PAGES if any(kind(c) == "run" for _, c in bash_commands(p))],
                         ids=lambda p: p.name)
def test_page_commands_run_as_written(page, prefect_harness, tmp_path, monkeypatch, capsys):
    """The page's commands, in the page's order, in a fresh directory: each exits 0."""
    monkeypatch.chdir(tmp_path)
    seconds = []
    for n, command in bash_commands(page):
        if kind(command) != "run":
            continue
        argv = shlex.split(command)[1:]
        start = time.monotonic()
        code = main(argv)
        seconds.append((round(time.monotonic() - start, 1), command[:60]))
        out = capsys.readouterr()
        assert code == 0, f"{page.name}:{n}: `{command}` exited {code}\n{out.out[-2000:]}\n{out.err[-2000:]}"
    print(page.name, seconds)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    out, block = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            block = not block
        elif not block and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_links_between_the_documents_resolve():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken
