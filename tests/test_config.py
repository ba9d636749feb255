import pytest

from transit_release.config import MARGINALS, ReleaseConfig, load_release_config
from transit_release.errors import ConfigError


def test_defaults_are_the_papers():
    cfg = load_release_config()
    assert [cfg.budgets[m.name].epsilon for m in MARGINALS] == [1, 1, 1, 1, 2, 2]
    assert {cfg.budgets[m.name].delta for m in MARGINALS} == {1 / 8_000_000}
    assert cfg.partition_epsilon == 8.0
    assert cfg.partition_delta == 7.5e-7
    assert cfg.bin_minutes == 15


def test_flags_override_the_file():
    cfg = load_release_config().with_overrides(epsilons=[0.5] * 6, delta=1e-8)
    assert cfg.partition_epsilon == 3.0
    assert cfg.budgets["tap_on_time"].delta == 1e-8


def test_wrong_number_of_epsilons():
    with pytest.raises(ConfigError, match=r"--epsilons needs 6 values \(j = 1..6\). Found 2."):
        load_release_config().with_overrides(epsilons=[1, 2])


def test_bad_config_files(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("release:\n  marginals:\n    tap_on_time: {epsilon: -1, delta: 1e-7}\n")
    with pytest.raises(ConfigError, match="missing"):
        load_release_config(p)
    with pytest.raises(ConfigError, match="file not found"):
        load_release_config(tmp_path / "nope.yaml")
    d = load_release_config().to_dict()
    d["marginals"]["tap_on_time"]["epsilon"] = 0
    with pytest.raises(ConfigError, match=r"marginals.tap_on_time.epsilon must be a positive number. Found 0.0."):
        ReleaseConfig.from_dict({"release": d})
