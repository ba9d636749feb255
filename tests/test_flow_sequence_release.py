"""The sequence_release flow end to end, under Prefect's test harness."""

from __future__ import annotations

import json

import pytest

from transit_release.accounting.ledger import Ledger
from transit_release.cli import main

pytestmark = pytest.mark.flow


def test_sequences_command_publishes_charges_once_and_passes_the_audit(prefect_harness, tmp_path, capsys, test_seed):
    data = tmp_path / "data"
    assert main(["synth-metro", "--out", str(data), "--passengers", "30000", "--seed", "3"]) == 0
    home = tmp_path / "home"
    args = ["sequences", "--input", str(data / "sequences.txt"), "--epsilon", "1", "--height", "6",
            "--taxonomy", str(data / "taxonomy.csv"), "--home", str(home), "--queries", "400"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "status: published" in out
    rel = home / "releases" / "sequences-sequences"
    lines = [x for x in (rel / "sequences.txt").read_text().splitlines() if not x.startswith("#")]
    assert lines and all(1 <= len(x.split()) <= 6 for x in lines)
    manifest = json.loads((rel / "manifest.json").read_text())
    assert manifest["privacy"]["epsilon"] == 1.0 and manifest["privacy"]["unit_of_privacy"] == "passenger-sequence"
    assert manifest["noise_source"] == "test-seed"
    spends = Ledger(home / "ledger.sqlite").spends()
    assert len(spends) == 1 and spends[0].event().kind == "prefix_tree"
    # publishing the same release again draws and spends nothing
    assert main(args) == 0
    assert "already published: nothing drawn or spent" in capsys.readouterr().out
    assert len(Ledger(home / "ledger.sqlite").spends()) == 1
    assert main(["audit", "--home", str(home), "--json"]) == 0
    audit_out = capsys.readouterr().out
    result = json.loads(audit_out[audit_out.index("{"):])
    assert result["ok"] and result["loss"]["passenger-sequence"]["basic"]["epsilon"] == 1.0


def test_hybrid_without_a_taxonomy_is_refused(prefect_harness, tmp_path, capsys):
    f = tmp_path / "s.txt"
    f.write_text("1 2 3\n2 3\n")
    rc = main(["sequences", "--input", str(f), "--epsilon", "1", "--height", "3", "--home", str(tmp_path / "h")])
    assert rc == 2
    assert "the hybrid variant needs exactly one of --taxonomy FILE or --fanout F" in capsys.readouterr().err
    assert not (tmp_path / "h" / "releases").exists()


def test_a_tree_too_large_to_build_is_refused_before_any_spend(prefect_harness, tmp_path, capsys):
    f = tmp_path / "s.txt"
    f.write_text("\n".join(" ".join(str(x) for x in range(i, i + 3)) for i in range(0, 940, 3)) + "\n")
    home = tmp_path / "h"
    rc = main(["sequences", "--input", str(f), "--epsilon", "1", "--height", "12", "--variant", "simple",
               "--home", str(home)])
    assert rc == 2
    assert "would grow about" in capsys.readouterr().err
    assert not (home / "releases").exists()
    assert not (home / "ledger.sqlite").exists() or Ledger(home / "ledger.sqlite").spends() == []
