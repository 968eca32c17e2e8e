"""The ten shaped-reward stages: order, once per trajectory, and the feedback the model reads."""

import pytest

import mltb_core.toolkit.tools  # noqa: F401
from mltb_core.config import TrialConfig
from mltb_core.planners.episode import Episode
from mltb_core.planners.tree import path_to
from mltb_core.toolkit.registry import ToolContext
from mltb_core.planners.rewards import REWARD_STAGES, StageContext, stage_index
from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import get_task
from mltb_core.runner.solve import prepare_agent_data
from scripted import ScriptedBackend, call, spaceship_pipeline


@pytest.fixture(scope="module")
def spaceship(tmp_path_factory):
    task = get_task("spaceship-titanic")
    split = prepare_split(task, seed=0)
    out = tmp_path_factory.mktemp("run")
    return task, split, prepare_agent_data(split, out), out


def run_script(spaceship, script, max_features=1000, feedback=True, raw_width=None):
    """Step the calls one by one below the root; return the nodes (root excluded)."""
    task, split, data_dir, out = spaceship
    stage_ctx = StageContext.from_split(task, split, max_features)
    if raw_width is not None:
        stage_ctx.original_features = raw_width
    sandbox = out / f"sandbox-{len(script)}-{max_features}"
    sandbox.mkdir(exist_ok=True)
    backend = ScriptedBackend(script)
    ep = Episode.in_process(task, TrialConfig(planner="react", model="scripted"), backend,
                 stage_ctx,
                 ToolContext(sandbox=sandbox, data_dir=data_dir, task=task), feedback=feedback)
    node = ep.root
    for _ in script:
        node = ep.step(node, ep.propose(node, "system", 1)[0])
    return path_to(node)[1:]


def test_stages_pass_in_order_once_each_with_actionable_feedback(spaceship):
    nodes = run_script(spaceship, spaceship_pipeline())
    stages = [n.progress.stage for n in nodes]
    assert stages == [1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 9, 9, 9, 9, 9, 10]  # four calls write the submission
    assert all(n.ok for n in nodes), [n.observation[:200] for n in nodes if not n.ok]
    after_median = nodes[3]
    assert "Data cleaning incomplete" in after_median.progress.feedback
    assert "HomePlanet" in after_median.progress.feedback  # names a column that still has NaNs
    assert "Stage check: Data cleaning incomplete" in after_median.observation
    after_mode = nodes[4]
    assert "Categorical columns still unencoded" in after_mode.progress.feedback and "Cabin" in after_mode.progress.feedback
    fitted = nodes[10]
    assert fitted.progress.newly_passed == (9,) and 0.0 < fitted.progress.cv_quality <= 1.0
    # each stage pays once: 9 stages of 1.0 plus the model's 0.5..1.0
    final = nodes[-1]
    assert final.terminal and final.progress.done
    assert final.progress.reward == pytest.approx(9 + 0.5 + 0.5 * fitted.progress.cv_quality)
    assert sum(len(n.progress.newly_passed) for n in nodes) == 10


def test_a_valid_submission_that_skipped_stages_is_terminal_but_not_paid(spaceship):
    script = spaceship_pipeline()
    del script[3:7]  # no cleaning and no encoding: drop every text column instead (LightGBM takes NaN)
    script.insert(3, call("drop_feature", {"df": "combined"}, "combined",
                          column=["PassengerId", "Name", "HomePlanet", "CryoSleep", "Cabin", "Destination", "VIP"]))
    nodes = run_script(spaceship, script)
    final = nodes[-1]
    assert final.terminal, final.observation[:300]
    assert final.progress.stage == 3  # cleaning never passed, so later stages never paid
    assert "Data cleaning incomplete" in final.progress.feedback


def test_wrong_target_is_flagged_at_stage_seven(spaceship):
    script = spaceship_pipeline(target="VIP", submit=False)[:9]
    nodes = run_script(spaceship, script)
    assert nodes[-1].progress.stage == 6
    assert "the challenge's target column is 'Transported'" in nodes[-1].progress.feedback


def test_feature_blow_up_is_reported(spaceship):
    script = spaceship_pipeline()[:5] + [call("encode_all_categorical_columns", {"df": "combined"}, "combined",
                                              method="label")]
    nodes = run_script(spaceship, script, max_features=5, raw_width=2)
    assert nodes[-1].progress.stage == 4
    assert "Feature count blew up" in nodes[-1].progress.feedback and "bound 5" in nodes[-1].progress.feedback
    # the bound never falls below twice the raw width: wide raw data is not a blow-up
    assert run_script(spaceship, script, max_features=5)[-1].progress.stage == 5


def test_invalid_submission_gets_a_reason(spaceship):
    task, split, data_dir, out = spaceship
    script = spaceship_pipeline(submit=False) + [
        call("save_dataframe_to_csv", {"df": "preds"}, filepath="submission.csv")]
    nodes = run_script(spaceship, script)
    final = nodes[-1]
    assert not final.terminal and final.progress.stage == 9
    assert "The submission is invalid" in final.progress.feedback and "PassengerId" in final.progress.feedback


def test_feedback_can_be_switched_off(spaceship):
    nodes = run_script(spaceship, spaceship_pipeline()[:4], feedback=False)
    assert "Stage check" not in nodes[-1].observation
    assert "Data cleaning incomplete" in nodes[-1].progress.feedback  # still computed for the record


def test_stage_names_match_the_paper_subtasks():
    assert [s.number for s in REWARD_STAGES] == list(range(1, 11))
    assert stage_index("modeling") == 9
    with pytest.raises(KeyError):
        stage_index("cooking")


def test_forest_cover_stage_nine_quality_uses_its_class_weights():
    # issue 18: the weighted-accuracy metric was called without its class weights, the baseline came back
    # None and stage 9's quality sat at 0.5 whatever the model scored
    import pandas as pd

    from mltb_core.planners.rewards import _constant_baseline, _quality

    task = get_task("forest-cover-type-kernels-only")
    y = pd.Series([c for c in range(1, 8) for _ in range(30)])          # a balanced train sample, as Kaggle's
    baseline = _constant_baseline(task, y)
    weights = task.scoring["class_weights"]
    # the grader's baseline: the heaviest class ("2") everywhere, whose weighted accuracy is its weight share
    assert baseline == pytest.approx(weights["2"] / sum(weights.values()))
    ctx = StageContext(task, len(y), 10, pd.Series(range(10)), y, 1000, original_features=3)
    ctx.cv_baseline = baseline
    assert _quality(ctx, 0.9) > _quality(ctx, 0.7) > 0.0 and _quality(ctx, 0.9) != 0.5
