"""The published bytes of every kind of release, under the test seed, are the ones recorded here.

One small release per kind and mechanism (Opal at card and trip level, sequences by prefix tree and by n-grams,
trajectories by SafePath and by the Markov model, station sets from a set file and from tap data) is made with the
test-only noise seed, and every public file is compared with a recorded SHA-256:

- the data files (CSV and text) byte for byte; Parquet files by their content (schema and rows, read back), so
  that a new pyarrow writing other metadata is no failure;
- ``manifest.json`` without what differs from run to run or from checkout to checkout: ``created_at``, the
  ledger head, the code version and the files' entries for ``DATACARD.md`` and the Parquet files (the card holds
  the ledger head and the creation time; Parquet as above);
- ``DATACARD.md`` with the creation time, the ledger head and the code version masked.

A refactoring leaves these digests as they are. Re-record them (``TRANSIT_RELEASE_RECORD_DIGESTS=<file>``, then
copy the printed mapping into :data:`RECORDED`) only with a change that is meant to alter what is published, and
say so in its commit message.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.flow

SEQUENCE_PERIOD = {"period_start": "2026-01-01", "period_end": "2026-01-31"}
TRAJECTORY_WEEK = {"period_start": "2026-01-05", "period_end": "2026-01-11"}
OPAL_WEEK = {"period_start": "2016-08-08", "period_end": "2016-08-14"}

#: What each kind published, as recorded from the code at 5b300f7 (before the release kinds shared one tail):
#: {release: {file: sha256}}. Re-recorded only by a change meant to alter published bytes.
RECORDED: dict[str, dict[str, str]] = {
    "opal-card": {
        "DATACARD.md": "fb50ee356890e820f4ea5afcd58c2726688c4dc259314a031bb833fd57d59a1d",
        "location.csv": "3c9c83914a2674480a7aac6493b6edec358f9d21f9d143343ca872d997ae1c46",
        "location.parquet": "cb17fff7b55bc521450c6befae509bc10f66082d138586093976729b78cf7a20",
        "manifest.json": "7b496fc81e7bfd612ad7062c3fec4c070d5cde8dd6d3f21622223ef4864e59ba",
        "time-loc.csv": "6ad175cc13215a2d434c1fbdac05ad482d4d2260672c95eb0099cd00a63f90c1",
        "time-loc.parquet": "86948706581e252e32688cdf54a98a0e8a9fff064f7ff714cd0950fbee3ad935",
        "time.csv": "73557c45eb42fe817208022636704047817d4359a08657ed12e05018ac31a8ec",
        "time.parquet": "19e13ac2ebd858abb435fced4f486d3d3e92f4b064792393bf2e7c7effdb7798",
    },
    "opal-trip": {
        "DATACARD.md": "662df180f27cc11caf46717c6647ab9910105e1ba9bd920447305c1cb2df6362",
        "location.csv": "955fc8cb1160029d0a8b79e9f151f88301bc3afb37fcab03f5f8f67b27fc1610",
        "location.parquet": "f27a941f7a8c11379cb0f9012c509953434f823f17ccf9657745b4d88c40d11f",
        "manifest.json": "e573cf8349519053708ce3ed3226c112b0b8a059f7de6db4093421723f2843d7",
        "time-loc.csv": "9191631f4acfcbbf5dba5b8f7568a22e25f1b27cef2718fb6fe0a235907dc32b",
        "time-loc.parquet": "99a1b29c4a4ec39b227fe40fdfe8c51133a7fb32ac0a9a849ea9254c3d2a2ef4",
        "time.csv": "6283252afdbd521c09e749a22c9de5fe008e3598939fc9335249b889f669b5f4",
        "time.parquet": "a95e90139eba5b71a5c2c4ba9c4f165077f1049be8264ba9a3be97cbf7347147",
    },
    "sequences-from-taps": {
        "DATACARD.md": "1edd9c3a4021495f176fac24418fbf760353b14340d6cfe354fda8611d37df0e",
        "manifest.json": "f5f865c419f4b8cfa971c31e5d5cfac09e759f4db29d9ba6ecd03c2c382ff998",
        "sequences.csv": "20c2fa3379155b5ae93c9bafc7f22f466c867e324594767c42d37d8ffb96bf11",
        "sequences.parquet": "e2fd20fb875600c4003ba89496e0d72a64009fba892e2abd269c6147b44034f2",
        "sequences.txt": "0cdcb77c39f45f6653f3bdda282782b6c1797514d3e236d4ff9ce53a3b8ff982",
    },
    "sequences-ngram": {
        "DATACARD.md": "83a86e0e985d9956ca88d0190cf08ef13537ac1a5f7e5c6dd159b69d3921babc",
        "manifest.json": "cdb312dc9860818b7af513a81e8aca738e32bd14bf485a5a3c1ea91c09e2f2fc",
        "ngrams.csv": "d3b88996bee5da4000cb523113e00756a3f4fcdd263d26ff02afcec62353b026",
        "ngrams.parquet": "f01d07f900d7f3a243bdab66b43a2f8d88d777cd4f8908509bbf2255ca3f069b",
        "sequences.csv": "47284b6fe94dafacd39f5b1c9d92dec26086c57f0f39fa656dc414751dc801c7",
        "sequences.parquet": "27dae3171c0a1c55e273d2e32539300420f90aab4cb35fd5a375ce7bdeea70d2",
        "sequences.txt": "e2afb91e461417d22b30cbbdb8235da3eed54b8a604626bd7790fb588f04ae10",
    },
    "sequences-prefix-tree": {
        "DATACARD.md": "b980be9ec51dfb4b2d0042455dcdfde7b95fb4070370662df99dba5d762b1029",
        "manifest.json": "a6c46e04c5eabbe4b60deb9a24e5c4b31aa024e85d3d4a056e17955f5829eefb",
        "sequences.csv": "717ff6473255bb08f1120ddb96e566647f74a492823ea6f244aa18cb5db4cc68",
        "sequences.parquet": "9c2d55558231c89cff1a9b0dea2dee36e07117e07d4977dbb2172d60df2021eb",
        "sequences.txt": "a6be2dd39cdbd66d70f45fa88680ed12516e76a61d92c8196101bce1f153fa9f",
    },
    "sets": {
        "DATACARD.md": "8b25b8e19fb093bbe69dd026abdc416e22556532d08ccceb34bed4c2c39e272d",
        "manifest.json": "9ebf1a1ee5df5b5d63f009984ecb3ff33cb7821191dec8e726c35080fc1a74c7",
        "sets.csv": "2e8f56973b2adc3b33caca5854fa985e6dbaa4a1cd02c970dab2edd94597e00a",
        "sets.parquet": "67f243c509e521502206de7b3db79eea3d6707e77a2e6b2a4a6aca3ae4a5ee19",
        "sets.txt": "d2229a3cf8beb5cc3b6f534136e07c44224f359d5bdb24048a7fe09abdc507b6",
    },
    "sets-from-taps": {
        "DATACARD.md": "9f7f0c8949f6ddb035220435d09f8f5b127b9760788778bc73a0f32b00201457",
        "manifest.json": "8e0cb1a0ae0f885a158323385fb99dc56c2214708f2b47688a99a03e5cd51830",
        "sets.csv": "abf1c589d6ddbb30b025c1c1806aa81d1c8957cd0701a6c5f5af2cde7f3729f2",
        "sets.parquet": "ab56f7965f1b08dfaaceb8e251d7dd2da09c33a876c51927e4ef0fb8e167a044",
        "sets.txt": "cbb533c274d1355f56b8d6bff944e2f178be77c4226c4440365d148809e384c7",
    },
    "trajectories-markov": {
        "DATACARD.md": "ce5ea83c50a2c0f34dd115240a6e08d55929db71d49fd5667c0bdfc7c0363af7",
        "manifest.json": "54c5bfe498c4857773700d603342594a3994fc2cca48fb25c7284f3dc4c044b4",
        "trajectories.csv": "4bd2fdc47b606f047161fe99ef90a09d6f2ad6241056dcd69c6f721f6596243a",
        "trajectories.parquet": "3acb900ae72bbe7e5d9b9db520d5084e8f921a9fc0a760cab7305e2a7ddb5646",
        "trajectories.txt": "a22d01ffc830984e9d9ad11e9024b8f7dbc4c7890186df47c2fb65fb5c81fee1",
    },
    "trajectories-safepath": {
        "DATACARD.md": "16030c3da0cdc21dad7b0d055319c9284840735f4dfd5f8a7d0156bf77df1d6f",
        "manifest.json": "9cbaa09b8e3dcade693f63e353d759557468562091dfaf3a2b7feb381fe72d28",
        "trajectories.csv": "5face800fa27cc4972bb76cb08e4622866f2b5cc4bf2c394eef1624c7163755e",
        "trajectories.parquet": "3827c95fffecaa3f9fd0ca8aa0edf4bca40f4a44df0a7b4c1e3f86037fb69f6a",
        "trajectories.txt": "9c748452742bea1502194056882736406326607d5994cb0b411f03a849b9f1a8",
    },
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A small synthetic metro (sequences, sets, a week of trajectories, the universe files) and a tiny Opal week."""
    from transit_release.cli import main
    from transit_release.synth.opal_week import write_synthetic_week

    metro = tmp_path_factory.mktemp("bytes-metro")
    assert main(["synth-metro", "--out", str(metro), "--passengers", "4000", "--seed", "5"]) == 0
    week = write_synthetic_week(tmp_path_factory.mktemp("bytes-week"), scale=0.001, seed=13, show_progress=False)
    return metro, {k: str(v) for k, v in week.items()}


def _releases(metro: Path, week: dict, root: Path, trip_policy: str) -> dict[str, Path]:
    """Make one release of each kind in a home of its own; the release folders by name."""
    from flows.opal_release import opal_release
    from flows.sequence_release import sequence_release
    from flows.sets_release import set_release
    from flows.trajectory_release import trajectory_release

    made = {}

    def home(name: str) -> str:
        return str(root / name)

    def folder(name: str, summary: dict) -> None:
        assert summary["status"] == "published", summary
        made[name] = Path(summary["release_dir"])

    folder("opal-card", opal_release(trips=week["trips"], stops=week["stops"], home=home("opal-card"), workers=0,
                                     **OPAL_WEEK))
    folder("opal-trip", opal_release(trips=week["trips"], stops=week["stops"], home=home("opal-trip"), workers=0,
                                     unit="trip", policy=trip_policy, **OPAL_WEEK))
    folder("sequences-prefix-tree", sequence_release(
        epsilon=1.0, height=4, input=str(metro / "sequences.txt"), taxonomy=str(metro / "taxonomy.csv"),
        home=home("sequences-prefix-tree"), queries=200, **SEQUENCE_PERIOD))
    folder("sequences-ngram", sequence_release(
        epsilon=1.0, mechanism="ngram", lmax=8, nmax=3, input=str(metro / "sequences.txt"),
        locations=str(metro / "locations.txt"), home=home("sequences-ngram"), queries=200, **SEQUENCE_PERIOD))
    folder("sequences-from-taps", sequence_release(
        epsilon=1.0, height=3, fanout=4, trips=week["trips"], stops=week["stops"], home=home("sequences-from-taps"),
        queries=200, **OPAL_WEEK))
    folder("trajectories-safepath", trajectory_release(
        epsilon=1.0, height=3, input=str(metro / "trajectories.txt"), location_taxonomy=str(metro / "taxonomy.csv"),
        home=home("trajectories-safepath"), queries=200, **TRAJECTORY_WEEK))
    folder("trajectories-markov", trajectory_release(
        epsilon=1.0, height=3, mechanism="markov", input=str(metro / "trajectories.txt"),
        locations=str(metro / "locations.txt"), home=home("trajectories-markov"), queries=200, **TRAJECTORY_WEEK))
    folder("sets", set_release(epsilon=1.0, input=str(metro / "sets.txt"), locations=str(metro / "locations.txt"),
                               home=home("sets"), queries=200, **SEQUENCE_PERIOD))
    folder("sets-from-taps", set_release(epsilon=1.0, trips=week["trips"], stops=week["stops"], mode="train",
                                         home=home("sets-from-taps"), queries=200, **OPAL_WEEK))
    return made


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _parquet_content(path: Path) -> bytes:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    buf = io.StringIO()
    table.to_pandas().to_csv(buf, index=False, lineterminator="\n")
    return (table.schema.remove_metadata().to_string() + "\n" + buf.getvalue()).encode("utf-8")


def _manifest_content(path: Path) -> bytes:
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for volatile in ("created_at", "ledger_head", "code_version"):
        manifest.pop(volatile, None)
    manifest["files"] = {name: entry for name, entry in manifest["files"].items()
                         if name != "DATACARD.md" and not name.endswith(".parquet")}
    return json.dumps(manifest, sort_keys=True, ensure_ascii=False).encode("utf-8")


_VOLATILE_CARD = (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\+00:00|Z)?"), re.compile(r"\b[0-9a-f]{64}\b"),
                  re.compile(r"\d+\.\d+\.\d+(\+g[0-9a-f]{12}(\.dirty)?)?"))


def _card_content(path: Path) -> bytes:
    text = path.read_text(encoding="utf-8")
    for pattern in _VOLATILE_CARD:
        text = pattern.sub("<masked>", text)
    return text.encode("utf-8")


def digests(folder: Path) -> dict[str, str]:
    """The SHA-256 of every public file of a release folder, as this module compares them."""
    out = {}
    for path in sorted(folder.iterdir()):
        if path.name == "manifest.json":
            content = _manifest_content(path)
        elif path.name == "DATACARD.md":
            content = _card_content(path)
        elif path.suffix == ".parquet":
            content = _parquet_content(path)
        else:
            content = path.read_bytes()
        out[path.name] = _sha256(content)
    return out


def test_every_kind_publishes_the_recorded_bytes(prefect_harness, inputs, tmp_path, trip_policy, test_seed):
    metro, week = inputs
    found = {name: digests(folder) for name, folder in _releases(metro, week, tmp_path, trip_policy).items()}
    record = os.environ.get("TRANSIT_RELEASE_RECORD_DIGESTS")
    if record:
        Path(record).write_text(json.dumps(found, indent=4, sort_keys=True) + "\n", encoding="utf-8")
        pytest.skip(f"digests recorded in {record}")
    assert found == RECORDED
