"""The published bytes of every kind of release, under the test seed, are the ones recorded here.

One small release per kind and mechanism (Opal at card and trip level, sequences by prefix tree and by n-grams,
trajectories by SafePath and by the Markov model, station sets from a set file and from tap data) is made with the
test-only noise seed, and every public file is compared with a recorded SHA-256:

- the data files (CSV and text) byte for byte; Parquet files by their content (schema and rows, read back), so
  that a new pyarrow writing other metadata is no failure;
- ``manifest.json`` without what differs from run to run or from checkout to checkout: ``created_at``, the
  ledger head, the code version and the files' entries for ``DATACARD.md``, ``datapackage.json``, ``index.html``
  and the Parquet files (the first three hold the ledger head or the creation time; Parquet as above);
- ``DATACARD.md`` with the creation time, the ledger head and the code version masked;
- ``datapackage.json`` without ``created`` and the ``bytes`` and ``hash`` of ``DATACARD.md`` and the Parquet files
  (as the manifest);
- the landing page ``index.html`` with the card's masks, every SHA-256 and every file size masked (the files
  themselves are compared above).

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

#: What each kind published, as recorded from the code at b5c6ffa (main with the open-data files, before the
#: release kinds shared one tail), re-recorded once for two changes meant to alter published bytes: the Data
#: Package's description of the threshold column (every kind) and the Markov trajectory release's margins of error
#: (its uncertainty.csv and data card section), then for #40: every data card (and landing page) says a passenger is one
#: card; the station sets' margin of error is per count, with the expected sets nobody had (uncertainty.csv, card);
#: a Markov release's trajectories.txt header says its lines are drawn from models: {release: {file: sha256}}.
#: Re-recorded only by a change meant to alter published bytes.
RECORDED: dict[str, dict[str, str]] = {
    "opal-card": {
        "DATACARD.md": "5800d66950eab59f9b30ff3d0b400c26c79c76444965059b5f4408935d8102c6",
        "datapackage.json": "012f9a389fabd4d2e9a51578780cfaf8298eab99cf7cde42cf49043b6a559093",
        "index.html": "4a9a1e4b4910fb4ad372eebcb69757aeb880478d7c59c9bf6e002b034d54fea4",
        "location.csv": "3c9c83914a2674480a7aac6493b6edec358f9d21f9d143343ca872d997ae1c46",
        "location.parquet": "cb17fff7b55bc521450c6befae509bc10f66082d138586093976729b78cf7a20",
        "manifest.json": "8976b98f70ff0d97b3a3237f3d32bfeb04e09f6df1bedb87425eab7cf9379002",
        "time-loc.csv": "6ad175cc13215a2d434c1fbdac05ad482d4d2260672c95eb0099cd00a63f90c1",
        "time-loc.parquet": "86948706581e252e32688cdf54a98a0e8a9fff064f7ff714cd0950fbee3ad935",
        "time.csv": "73557c45eb42fe817208022636704047817d4359a08657ed12e05018ac31a8ec",
        "time.parquet": "19e13ac2ebd858abb435fced4f486d3d3e92f4b064792393bf2e7c7effdb7798",
        "uncertainty.csv": "eeb7c651af824788abc3e8618f0a3a73eb8d3df21030674ede0ea5865efe4c49",
    },
    "opal-trip": {
        "DATACARD.md": "25ee8f418fa7bdb712b56c3ca7000ee546efb0c423fcca44f71c658c06b190e3",
        "datapackage.json": "a84cb6218feeb971bfd042fc44570f5e3881f267fc5e3ed0a99a9ab69fc0f023",
        "index.html": "c7ecc2a8671e8d5d4de740736406a78b1114ea9628cf2becba61463e99a82b7d",
        "location.csv": "955fc8cb1160029d0a8b79e9f151f88301bc3afb37fcab03f5f8f67b27fc1610",
        "location.parquet": "f27a941f7a8c11379cb0f9012c509953434f823f17ccf9657745b4d88c40d11f",
        "manifest.json": "418a4552241e3ced875fcfb009aff6470051964679a7ccbcab522238ade1e9ee",
        "time-loc.csv": "9191631f4acfcbbf5dba5b8f7568a22e25f1b27cef2718fb6fe0a235907dc32b",
        "time-loc.parquet": "99a1b29c4a4ec39b227fe40fdfe8c51133a7fb32ac0a9a849ea9254c3d2a2ef4",
        "time.csv": "6283252afdbd521c09e749a22c9de5fe008e3598939fc9335249b889f669b5f4",
        "time.parquet": "a95e90139eba5b71a5c2c4ba9c4f165077f1049be8264ba9a3be97cbf7347147",
        "uncertainty.csv": "214ae71eac5a9bca571af7980c7885850629b76ef241921ae0bdb97547930ffa",
    },
    "sequences-from-taps": {
        "DATACARD.md": "27813c9b3bb3443692ee9965fec522360eb7b394f4ed33610e625d3f34958b78",
        "datapackage.json": "13e63375b6e0aeb242e4ef696e49de688bba69af537c0e2a80e2fe4c04b3e347",
        "index.html": "315d728f1f42572f83468c91c36f44919fc8c14b224badbf7871be41146a0395",
        "manifest.json": "5c4e2f41875f93396999fc6b6d28b3df65db40157f74f9101a0598386125b704",
        "sequences.csv": "20c2fa3379155b5ae93c9bafc7f22f466c867e324594767c42d37d8ffb96bf11",
        "sequences.parquet": "e2fd20fb875600c4003ba89496e0d72a64009fba892e2abd269c6147b44034f2",
        "sequences.txt": "0cdcb77c39f45f6653f3bdda282782b6c1797514d3e236d4ff9ce53a3b8ff982",
        "uncertainty.csv": "efd331852981dc952306072966c909c3dc082d786d3da25e6db25538300c3e4d",
    },
    "sequences-ngram": {
        "DATACARD.md": "530232ad1df6097a554e33667aeb4f78b68c5237a847c7bddb227d25cb462fb5",
        "datapackage.json": "998cef72b45952c422e51caab228b9ef8bfb426bf22d422926aaf7308eb4747a",
        "index.html": "9e663d622d3088727e58e9c8e574170176141ade0b748bbfa2ca6e20fc29a733",
        "manifest.json": "024fba5be7c641ab1445f23e724b1d0603f70a1166dd89d171cc55a0eb8cacae",
        "ngrams.csv": "d3b88996bee5da4000cb523113e00756a3f4fcdd263d26ff02afcec62353b026",
        "ngrams.parquet": "f01d07f900d7f3a243bdab66b43a2f8d88d777cd4f8908509bbf2255ca3f069b",
        "sequences.csv": "47284b6fe94dafacd39f5b1c9d92dec26086c57f0f39fa656dc414751dc801c7",
        "sequences.parquet": "27dae3171c0a1c55e273d2e32539300420f90aab4cb35fd5a375ce7bdeea70d2",
        "sequences.txt": "e2afb91e461417d22b30cbbdb8235da3eed54b8a604626bd7790fb588f04ae10",
        "uncertainty.csv": "285ae02dc628f92ca03bde5ffb1b1092852cfce8ae80a21f3426fe48893b9226",
    },
    "sequences-prefix-tree": {
        "DATACARD.md": "15ae1837b42b1ee0e0288a383a63c12741a0033ab49c382ec50411d47c7a5542",
        "datapackage.json": "492074b3bcfbc0d855f7b57412639540bae972de0859564e261789f0a84c21f7",
        "index.html": "0fce8ddac9f003b3417b2ffa36cd5a2875992a6da459525f3fb231816a0879de",
        "manifest.json": "bbaf35d48bc49a4e44440a7fab7c3dbac80edcbccc45846ed840104d87f09956",
        "sequences.csv": "717ff6473255bb08f1120ddb96e566647f74a492823ea6f244aa18cb5db4cc68",
        "sequences.parquet": "9c2d55558231c89cff1a9b0dea2dee36e07117e07d4977dbb2172d60df2021eb",
        "sequences.txt": "a6be2dd39cdbd66d70f45fa88680ed12516e76a61d92c8196101bce1f153fa9f",
        "uncertainty.csv": "e6c6fc23bb894cc274de08d0d20c09a06d30172ab4b0e231d4a3db46d77b0387",
    },
    "sets": {
        "DATACARD.md": "1329fca6329955a3d0f0a8b2229b3c65e8dc83b7c23b97f166b2046870133e2d",
        "datapackage.json": "bb7df8defe7318154ea6ee81643619a1dac5bb3805b23a6ae1f02972a45bcf08",
        "index.html": "2ab364a365020b01de3cd8957aee53b0c4ce0f31a40250e8f02a4b246b6f6a2b",
        "manifest.json": "665fba776b4dc1478c0b83eecb4f511c73d5b4fea190697d557c97f2e24abe68",
        "sets.csv": "2e8f56973b2adc3b33caca5854fa985e6dbaa4a1cd02c970dab2edd94597e00a",
        "sets.parquet": "67f243c509e521502206de7b3db79eea3d6707e77a2e6b2a4a6aca3ae4a5ee19",
        "sets.txt": "d2229a3cf8beb5cc3b6f534136e07c44224f359d5bdb24048a7fe09abdc507b6",
        "uncertainty.csv": "bf02ce9435e4e38c64e4ea74d226492c2be4a7b7d2a2d8ea5f7d88f99c744ec4",
    },
    "sets-from-taps": {
        "DATACARD.md": "fa121aa4484cd7527903217cc75b55e01cb6f291d790f124c903d83277fcc4d1",
        "datapackage.json": "9ac566d67a753721ff48a11fd2e81017b2dceaf6f7284bdfd3b57330bc3b3684",
        "index.html": "c8ecea69a9dced123de24ff4a4ec6d9f2f847adc1c05d434d36fe62a62657f19",
        "manifest.json": "ec19ca305a816656b3eb8e335da65aca9727891359af29fda2068941195f2ce3",
        "sets.csv": "abf1c589d6ddbb30b025c1c1806aa81d1c8957cd0701a6c5f5af2cde7f3729f2",
        "sets.parquet": "ab56f7965f1b08dfaaceb8e251d7dd2da09c33a876c51927e4ef0fb8e167a044",
        "sets.txt": "cbb533c274d1355f56b8d6bff944e2f178be77c4226c4440365d148809e384c7",
        "uncertainty.csv": "bf02ce9435e4e38c64e4ea74d226492c2be4a7b7d2a2d8ea5f7d88f99c744ec4",
    },
    "trajectories-markov": {
        "DATACARD.md": "7417553614a5f416806ac5958b1e1334efe257c30eef3e71d9926c8a16030571",
        "datapackage.json": "6905af721e2b4d49d5c59081390ef18b374175cd0aff288535f472b14058d1cc",
        "index.html": "cf41c0f6d4ecc1837bc7609b57ae48cb56b0c5329ee84acc45467464311ae727",
        "manifest.json": "2e6750de9a421f02ffaa3300280b43247e08387beb02f0f6665c35de3d1e3db8",
        "trajectories.csv": "4bd2fdc47b606f047161fe99ef90a09d6f2ad6241056dcd69c6f721f6596243a",
        "trajectories.parquet": "3acb900ae72bbe7e5d9b9db520d5084e8f921a9fc0a760cab7305e2a7ddb5646",
        "trajectories.txt": "62d008da8513279b493b412a442473a4dfb8a6ebd3cd02569a074d3cc2df09d1",
        "uncertainty.csv": "94dc391aba0b8e4533fecc69fbc59b4165860671f3ef15c85f04b1a000bc6446",
    },
    "trajectories-safepath": {
        "DATACARD.md": "4b429d8a25436be659c1b4330fc9a94ebdfced60c4ff199cda31fb49ebca37c6",
        "datapackage.json": "c01fc1b0286f9ddeee166c380231eb73e8316d0cbbd08494e2868193896c65f3",
        "index.html": "c73ee01c8ba7b7c04228d0affc920812636999458e7a421b65ad4c1754c4fffc",
        "manifest.json": "5283e3ae71434d308bda5b85e959491daf336dfed5539c23ed3e45caf57463ce",
        "trajectories.csv": "5face800fa27cc4972bb76cb08e4622866f2b5cc4bf2c394eef1624c7163755e",
        "trajectories.parquet": "3827c95fffecaa3f9fd0ca8aa0edf4bca40f4a44df0a7b4c1e3f86037fb69f6a",
        "trajectories.txt": "9c748452742bea1502194056882736406326607d5994cb0b411f03a849b9f1a8",
        "uncertainty.csv": "63653fbe335f68576930bfb03e7c6739dd8b1a3213bd31222267054722281851",
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


#: files whose manifest entries (hash and size) follow the creation time or the ledger head; compared apart, masked
_DESCRIBED_APART = ("DATACARD.md", "datapackage.json", "index.html")


def _manifest_content(path: Path) -> bytes:
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for volatile in ("created_at", "ledger_head", "code_version"):
        manifest.pop(volatile, None)
    manifest["files"] = {name: entry for name, entry in manifest["files"].items()
                         if name not in _DESCRIBED_APART and not name.endswith(".parquet")}
    return json.dumps(manifest, sort_keys=True, ensure_ascii=False).encode("utf-8")


_VOLATILE_CARD = (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\+00:00|Z)?"), re.compile(r"\b[0-9a-f]{64}\b"),
                  re.compile(r"\d+\.\d+\.\d+(\+g[0-9a-f]{12}(\.dirty)?)?"))


def _card_content(path: Path) -> bytes:
    text = path.read_text(encoding="utf-8")
    for pattern in _VOLATILE_CARD:
        text = pattern.sub("<masked>", text)
    return text.encode("utf-8")


def _datapackage_content(path: Path) -> bytes:
    package = json.loads(path.read_text(encoding="utf-8"))
    package.pop("created", None)
    for resource in package.get("resources", []):
        if resource.get("path") == "DATACARD.md" or str(resource.get("path", "")).endswith(".parquet"):
            resource.pop("bytes", None)
            resource.pop("hash", None)
    return json.dumps(package, sort_keys=True, ensure_ascii=False).encode("utf-8")


_FILE_SIZE = re.compile(r"\b\d+(\.\d+)?\s(B|KiB|MiB|GiB)\b")


def _page_content(path: Path) -> bytes:
    text = _FILE_SIZE.sub("<size>", _card_content(path).decode("utf-8"))
    return text.encode("utf-8")


def digests(folder: Path) -> dict[str, str]:
    """The SHA-256 of every public file of a release folder, as this module compares them."""
    out = {}
    for path in sorted(folder.iterdir()):
        if path.name == "manifest.json":
            content = _manifest_content(path)
        elif path.name == "DATACARD.md":
            content = _card_content(path)
        elif path.name == "datapackage.json":
            content = _datapackage_content(path)
        elif path.name == "index.html":
            content = _page_content(path)
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
