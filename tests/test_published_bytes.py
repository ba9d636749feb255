"""The published bytes of every kind of release, under the test seed, are the ones recorded here.

One small release per kind and mechanism (Opal at card and trip level, sequences by prefix tree and by n-grams,
trajectories by SafePath and by the Markov model, station sets by DiffPart from a set file and from tap data and by
the set histogram) is made with the
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
#: release kinds shared one tail), re-recorded for changes meant to alter published bytes: the Data Package's
#: description of the threshold column (every kind; twice: the second time for the set histogram's threshold);
#: the Markov trajectory release's margins of error (its uncertainty.csv and data card section); the set
#: releases' statement of how their mechanism was chosen (manifest ``privacy.mechanism_rule``), with the set
#: histogram's release added; the data card's statement of the CSV guard (#39: one-to-one, a cell starting with '
#: gets one more); the human title of every release (#42: the landing page's title and heading, the data card's
#: heading, the Data Package's title) with the Opal data card's plain-words privacy and margins sections and the
#: landing page's "How" line; #40: every data card (and landing page) says a passenger is one card, the station
#: sets' margin of error is per count with the expected sets nobody had (uncertainty.csv, card), a Markov
#: release's trajectories.txt header says its lines are drawn from models: {release: {file: sha256}}. Every other file, the Markov release's drawn trajectories
#: included (its generation was vectorised since), kept its recorded digest. Re-recorded only by a change meant to
#: alter published bytes.
RECORDED: dict[str, dict[str, str]] = {
    "opal-card": {
        "DATACARD.md": "921e0405c432fa4d63d562079af861f272a2fa64f0fa715f375081e48f01a015",
        "datapackage.json": "8fbcfa67b51a608ef7fe6cb75621a29d588389bc1696557f8476408cf0c8952a",
        "index.html": "1a9757e73a435c1321aa9d4d07cd340d698def9fa895f70d4929e612b69b1be0",
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
        "DATACARD.md": "d46e73d41df395b7aeb65f29219abffc96852b8843e332e982ed2e0bc0a9d52f",
        "datapackage.json": "b583dc67273bcafa7a5e0652caaa4d184a0183b0d5ac8c992716c37a14923f82",
        "index.html": "ff36a81468ff48e06de13a81cfcd69e60e4025d52c8870120594ed7c1e55a9b5",
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
        "DATACARD.md": "4015b6b36aff5b037441e938ca99134d2b8bf513634fcf0179cfd6043c1cdc74",
        "datapackage.json": "ca172d244149bd4d2b485a6619a9923afe037c9cd88e2fd3416cb14b182775a5",
        "index.html": "b964bacd9c722b0b3c6efe40a833350e25452a8b9cc7b57e95098371e7ceedb2",
        "manifest.json": "5c4e2f41875f93396999fc6b6d28b3df65db40157f74f9101a0598386125b704",
        "sequences.csv": "20c2fa3379155b5ae93c9bafc7f22f466c867e324594767c42d37d8ffb96bf11",
        "sequences.parquet": "e2fd20fb875600c4003ba89496e0d72a64009fba892e2abd269c6147b44034f2",
        "sequences.txt": "0cdcb77c39f45f6653f3bdda282782b6c1797514d3e236d4ff9ce53a3b8ff982",
        "uncertainty.csv": "efd331852981dc952306072966c909c3dc082d786d3da25e6db25538300c3e4d",
    },
    "sequences-ngram": {
        "DATACARD.md": "df4eba834323f92cdade41da69c1d596b206c795b7b023c0857e0202a515c92b",
        "datapackage.json": "44e5a9390f1ad4014f99d66aab2a4a239acbe016ad02597a7e932d600b60f434",
        "index.html": "c86c3041d0271ffc65dcbbc7bef6b3f313c691fcd46ca00f136c37507b2a2d01",
        "manifest.json": "024fba5be7c641ab1445f23e724b1d0603f70a1166dd89d171cc55a0eb8cacae",
        "ngrams.csv": "d3b88996bee5da4000cb523113e00756a3f4fcdd263d26ff02afcec62353b026",
        "ngrams.parquet": "f01d07f900d7f3a243bdab66b43a2f8d88d777cd4f8908509bbf2255ca3f069b",
        "sequences.csv": "47284b6fe94dafacd39f5b1c9d92dec26086c57f0f39fa656dc414751dc801c7",
        "sequences.parquet": "27dae3171c0a1c55e273d2e32539300420f90aab4cb35fd5a375ce7bdeea70d2",
        "sequences.txt": "e2afb91e461417d22b30cbbdb8235da3eed54b8a604626bd7790fb588f04ae10",
        "uncertainty.csv": "285ae02dc628f92ca03bde5ffb1b1092852cfce8ae80a21f3426fe48893b9226",
    },
    "sequences-prefix-tree": {
        "DATACARD.md": "061ab54a60a85afadc474c6e163e34d84725ba84f8d4de85aa633722ebb20de4",
        "datapackage.json": "8f381c0966973f59464a1b7bbaecbf4db58ea619a3164221fcb867fad75b8fa2",
        "index.html": "a0415fd5212edab79dccae2eb025fa5ca66f4accf9469fb268ef0e790107e240",
        "manifest.json": "bbaf35d48bc49a4e44440a7fab7c3dbac80edcbccc45846ed840104d87f09956",
        "sequences.csv": "717ff6473255bb08f1120ddb96e566647f74a492823ea6f244aa18cb5db4cc68",
        "sequences.parquet": "9c2d55558231c89cff1a9b0dea2dee36e07117e07d4977dbb2172d60df2021eb",
        "sequences.txt": "a6be2dd39cdbd66d70f45fa88680ed12516e76a61d92c8196101bce1f153fa9f",
        "uncertainty.csv": "e6c6fc23bb894cc274de08d0d20c09a06d30172ab4b0e231d4a3db46d77b0387",
    },
    "sets": {
        "DATACARD.md": "7d1c353945476414ef5f9cea167c9d4477479f634a6d4bea4454d973e7dc28fb",
        "datapackage.json": "28067006eaaa7007c32d4799da9f63be6c71786e5dcea70a3dfea719a37c2e26",
        "index.html": "b55f51276759b408cd147ddc7e50f59dd2bf6633d816d0d32b0221a95e61a704",
        "manifest.json": "5d33c82baab9881fd5b678327a9877791839cdc57cc7fa142cbde82987a59e31",
        "sets.csv": "2e8f56973b2adc3b33caca5854fa985e6dbaa4a1cd02c970dab2edd94597e00a",
        "sets.parquet": "67f243c509e521502206de7b3db79eea3d6707e77a2e6b2a4a6aca3ae4a5ee19",
        "sets.txt": "d2229a3cf8beb5cc3b6f534136e07c44224f359d5bdb24048a7fe09abdc507b6",
        "uncertainty.csv": "bf02ce9435e4e38c64e4ea74d226492c2be4a7b7d2a2d8ea5f7d88f99c744ec4",
    },
    "sets-from-taps": {
        "DATACARD.md": "1808196fbb884dfa12ea37bdb780df50896a135eb3bb9891edbb737b0e10417f",
        "datapackage.json": "6595bb8e8bf834a2690e7ad675460111c003217a9e42d82d452e343dad8c4116",
        "index.html": "eec5999ba4dd09bb5f23adc9a73d9522228364fc7a52f281a061628500fd7567",
        "manifest.json": "d382008c01e7a718028964ddddd485220223d63ff4d45e63e8d4a7459c83d208",
        "sets.csv": "abf1c589d6ddbb30b025c1c1806aa81d1c8957cd0701a6c5f5af2cde7f3729f2",
        "sets.parquet": "ab56f7965f1b08dfaaceb8e251d7dd2da09c33a876c51927e4ef0fb8e167a044",
        "sets.txt": "cbb533c274d1355f56b8d6bff944e2f178be77c4226c4440365d148809e384c7",
        "uncertainty.csv": "bf02ce9435e4e38c64e4ea74d226492c2be4a7b7d2a2d8ea5f7d88f99c744ec4",
    },
    "sets-histogram": {
        "DATACARD.md": "8a2edd6e6714c8cccfcc3c608c1be8268fdece01c5a0d8478597fd5e85203f32",
        "datapackage.json": "32dc4a2a9e765dfb171ce241d412ffde36c40329c750aa312a3423ec0e98b720",
        "index.html": "1d0b7cd287a5280898b946905cd2815dc8faf001177858e0995c103f1a1b2c21",
        "manifest.json": "dcdae8f78d7a0dc64c2d298ab36b45b3148ab8ddbcc54ac201ef696e70758969",
        "sets.csv": "d5bb5d9dc276e75cbac0626aeb67ccbcd89ad13839b40ea55f89fbc33fefcced",
        "sets.parquet": "a9cca55200d0e92d230e7535b33716e46a589e8e5b5b41aa02309b1dd6e7892b",
        "sets.txt": "1f829c2a7d80dc182640561524217d3615677868c7e603fcb76a4acb4c48de68",
        "uncertainty.csv": "bd1c3c8a4dcb75eb21df98e3ba9d24e75147f9123630cbe8de058c0e0f7c34b3",
    },
    "trajectories-markov": {
        "DATACARD.md": "0b877ce2de4adb8a67cc695b40bcee6f549bc11057051f0a34ba84e4c5c3c192",
        "datapackage.json": "c0420f28175f61eb44a18c0351ba64bbec1c96e81ce50a28d7c41761b3db919b",
        "index.html": "67b54da4658126f7ea3b0669abf6ec16c57e6f2cc98923f0a3f22b1b697a957d",
        "manifest.json": "2e6750de9a421f02ffaa3300280b43247e08387beb02f0f6665c35de3d1e3db8",
        "trajectories.csv": "4bd2fdc47b606f047161fe99ef90a09d6f2ad6241056dcd69c6f721f6596243a",
        "trajectories.parquet": "3acb900ae72bbe7e5d9b9db520d5084e8f921a9fc0a760cab7305e2a7ddb5646",
        "trajectories.txt": "62d008da8513279b493b412a442473a4dfb8a6ebd3cd02569a074d3cc2df09d1",
        "uncertainty.csv": "94dc391aba0b8e4533fecc69fbc59b4165860671f3ef15c85f04b1a000bc6446",
    },
    "trajectories-safepath": {
        "DATACARD.md": "8072f358876786e3cce4413385fb12f63befcee5a2720fb21ea25f8653a925a9",
        "datapackage.json": "20639e1ccd3e57b1a107686230ac2e93d5a8c99129add4164e7ed53d7c63b4f9",
        "index.html": "0e00aae24be26ec31e57503cbdc8043b35adbbcf02f5dfac7124bfd16d00552c",
        "manifest.json": "5283e3ae71434d308bda5b85e959491daf336dfed5539c23ed3e45caf57463ce",
        "trajectories.csv": "5face800fa27cc4972bb76cb08e4622866f2b5cc4bf2c394eef1624c7163755e",
        "trajectories.parquet": "3827c95fffecaa3f9fd0ca8aa0edf4bca40f4a44df0a7b4c1e3f86037fb69f6a",
        "trajectories.txt": "9c748452742bea1502194056882736406326607d5994cb0b411f03a849b9f1a8",
        "uncertainty.csv": "63653fbe335f68576930bfb03e7c6739dd8b1a3213bd31222267054722281851",
    },
}



@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A small synthetic metro (sequences, sets, a week of trajectories, the universe files), heavy-tailed sets over
    a 12-station universe, and a tiny Opal week."""
    from transit_release.cli import main
    from transit_release.synth.opal_week import write_synthetic_week

    from transit_release.synth.sets import heavy_tailed_sets

    metro = tmp_path_factory.mktemp("bytes-metro")
    assert main(["synth-metro", "--out", str(metro), "--passengers", "4000", "--seed", "5"]) == 0
    ids = [f"c{i:02d}" for i in range(12)]  # a universe small enough for the set histogram
    (metro / "small-universe.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    (metro / "small-universe-sets.txt").write_text(
        "".join(" ".join(ids[i] for i in s) + "\n" for s in heavy_tailed_sets(4000, 12, seed=5).to_lists()),
        encoding="utf-8")
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
        epsilon=1.0, height=3, mechanism="safepath", input=str(metro / "trajectories.txt"),
        location_taxonomy=str(metro / "taxonomy.csv"),
        home=home("trajectories-safepath"), queries=200, **TRAJECTORY_WEEK))
    folder("trajectories-markov", trajectory_release(
        epsilon=1.0, height=3, mechanism="markov", input=str(metro / "trajectories.txt"),
        locations=str(metro / "locations.txt"), home=home("trajectories-markov"), queries=200, **TRAJECTORY_WEEK))
    folder("sets", set_release(epsilon=1.0, input=str(metro / "sets.txt"), locations=str(metro / "locations.txt"),
                               home=home("sets"), queries=200, **SEQUENCE_PERIOD))
    folder("sets-from-taps", set_release(epsilon=1.0, trips=week["trips"], stops=week["stops"], mode="train",
                                         home=home("sets-from-taps"), queries=200, **OPAL_WEEK))
    folder("sets-histogram", set_release(epsilon=1.0, input=str(metro / "small-universe-sets.txt"),
                                         locations=str(metro / "small-universe.txt"), home=home("sets-histogram"),
                                         queries=200, **SEQUENCE_PERIOD))
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
