"""Trial configuration: hashing for resume/baselines, seeds, threads."""
import pytest

from mltb_core.config import TrialConfig, trial_seed


def test_config_hash_ignores_identity_and_execution_knobs_but_not_budgets():
    base = TrialConfig(planner="lats", model="sim")
    # the planner is not hashed (mcts_shaped has lats' knobs: the tree-search ones)
    assert base.config_hash() == base.with_(planner="mcts_shaped", model="local", trial=3, llm_cache=False,
                                            threads=4).config_hash()
    assert base.config_hash() != base.with_(max_iterations=5).config_hash()
    assert base.config_hash() != base.with_(tool_masking=False).config_hash()
    assert base.toolset == "paper" and base.config_hash() != base.with_(toolset="extended").config_hash()


def test_trial_seeds_are_stable_and_distinct():
    assert trial_seed(0, 1) == trial_seed(0, 1)
    assert len({trial_seed(0, t) for t in range(100)}) == 100
    assert TrialConfig("react", "sim", trial=2).trial_seed == trial_seed(0, 2)


def test_round_trip_and_unknown_fields():
    cfg = TrialConfig("mcts_shaped", "sim:0.5", max_llm_calls=7)
    assert TrialConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown trial config field"):
        TrialConfig.from_dict({**cfg.to_dict(), "warp": 9})


def test_one_thread_per_trial_unless_configured():
    # MLTB_THREADS is read at the edge, with every other setting (tests/test_settings.py)
    from mltb_core.config import SETTINGS_BY_NAME, read_environment, resolve_settings, trial_fields

    assert TrialConfig("react", "sim").threads == 1
    threads = SETTINGS_BY_NAME["threads"]
    values, sources = resolve_settings([threads], {}, read_environment([threads], {"MLTB_THREADS": "2"}))
    assert TrialConfig("react", "sim", **trial_fields(values)).threads == 2 and sources["threads"] == "env"
    with pytest.raises(ValueError, match="MLTB_THREADS"):
        resolve_settings([threads], {}, read_environment([threads], {"MLTB_THREADS": "many"}))


def test_one_post_init_checks_both_ranges_and_choices():
    # TrialConfig once had two __post_init__ methods; the first (the board check) was silently dead
    assert sum(line.strip().startswith("def __post_init__") for line in
               __import__("inspect").getsource(TrialConfig).splitlines()) == 1
    with pytest.raises(ValueError, match="board"):
        TrialConfig("react", "sim", board="final")
    with pytest.raises(ValueError, match="toolset"):
        TrialConfig("react", "sim", toolset="everything")
    with pytest.raises(ValueError, match="max_iterations"):
        TrialConfig("react", "sim", max_iterations=0)
