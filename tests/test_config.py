import pytest

from transit_release.config import MARGINALS, ReleaseConfig, default_config_path, load_release_config
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


@pytest.mark.parametrize("patch,message", [
    ("  bin_minutes: .nan\n", "'bin_minutes' must be finite. Found nan"),
    ("  bin_minutes: fifteen\n", "'bin_minutes' must be a number. Found str."),
    ("  bin_minutes: \"15\"\n", "'bin_minutes' must be a number. Found str."),
    ("  bin_minutes: 15.9\n", "'bin_minutes' must be a whole number of minutes. Found float."),
    ("  bin_minutes: 15.0\n", "'bin_minutes' must be a whole number of minutes. Found float."),
    ("  modes: [bus, bus]\n", r"'modes:' lists a mode twice. Found \['bus', 'bus'\]"),
    ("  modes: bus\n", "'modes:' must be a list of modes"),
])
def test_config_values_that_would_be_misread_are_refused(tmp_path, patch, message):
    base = default_config_path().read_text()
    text = base.replace("  bin_minutes: 15\n", patch) if "bin_minutes" in patch else \
        base.replace("  modes: [bus, ferry, lightrail, train]\n", patch)
    assert text != base
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_release_config(p)


def test_epsilon_true_and_non_utf8_config_are_refused(tmp_path):
    p = tmp_path / "c.yaml"
    base = load_release_config().to_dict()
    base["marginals"]["tap_on_time"]["epsilon"] = True
    with pytest.raises(ConfigError, match="'marginals.tap_on_time.epsilon' must be a number. Found bool."):
        ReleaseConfig.from_dict({"release": base}, source="release config c.yaml")
    p.write_bytes("release:\n  bin_minutes: 15 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="the text is not valid UTF-8"):
        load_release_config(p)


def test_a_key_given_twice_is_refused_and_1e_minus_6_is_a_number(tmp_path):
    """The findings: a budget policy with `epsilon: 8.0` then `epsilon: 800.0` was read as 800 (the last one won);
    `delta: 1e-6`, the usual spelling, was refused as text (PyYAML reads YAML 1.1)."""
    from transit_release.accounting.policy import load_budget_policy
    from transit_release.config import default_file

    text = default_file("budget_policy.yaml").read_text()
    twice = tmp_path / "twice.yaml"
    twice.write_text(text.replace("      epsilon: 8.0\n", "      epsilon: 8.0\n      epsilon: 800.0\n", 1))
    with pytest.raises(ConfigError, match=r"twice.yaml: 'epsilon' is given twice \(lines \d+ and \d+\)"):
        load_budget_policy(twice)
    short = tmp_path / "short.yaml"
    short.write_text(text.replace("      delta: 1.0e-6\n", "      delta: 1e-6\n", 1))
    assert "      delta: 1e-6\n" in short.read_text()
    trip = next(c for c in load_budget_policy(short).caps if c.unit_of_privacy == "trip")
    assert trip.delta == 1e-6


def test_a_quoted_number_is_refused_as_the_budget_policy_refuses_it(tmp_path):
    """The finding: `epsilon: "1.0"` (a string) was accepted by the release config, where the budget policy refuses
    the same mistake. One type per value, and the same message."""
    from transit_release.accounting.policy import load_budget_policy
    from transit_release.config import default_file

    config = tmp_path / "c.yaml"
    config.write_text(default_config_path().read_text().replace("tap_on_time:           {epsilon: 1.0,",
                                                                'tap_on_time:           {epsilon: "1.0",'))
    with pytest.raises(ConfigError) as refused_config:
        load_release_config(config)
    policy = tmp_path / "p.yaml"
    policy.write_text(default_file("budget_policy.yaml").read_text().replace("epsilon: 8.0", 'epsilon: "8.0"', 1))
    with pytest.raises(ConfigError) as refused_policy:
        load_budget_policy(policy)
    assert str(refused_config.value).endswith("'marginals.tap_on_time.epsilon' must be a number. Found str.")
    assert str(refused_policy.value).endswith("'epsilon' must be a number. Found str.")
    for field in ("max_trip_minutes: 300", "max_rows: 200000000"):
        key, value = field.split(": ")
        config.write_text(default_config_path().read_text().replace(field, f"{key}: {value}.0"))
        with pytest.raises(ConfigError, match=f"'quality.{key}' must be a whole number. Found float."):
            load_release_config(config)
