"""The benchmark: one item per (task, planner, model, trial).

    pytest suites/ --planner=mcts_shaped --model=sim --task spaceship-titanic --trials 3 -n 2

The mltb plugin parametrises ``mltb_case`` from its options and runs the trial in the
``mltb_record`` fixture (so infrastructure errors are ERRORs, retried per --infra-retries).
The contract: an item passes exactly when its trial ended with a valid submission, graded on the
held-out rows of its split; a planner failure fails here with what the trial reached and why it stopped.
"""
import math


def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)  # fails, with where the trial stopped, unless the submission is valid
    # valid means graded: a finite score for this case's trial, placed on the board when there is one
    assert mltb_record.outcome == "valid" and mltb_record.trial == mltb_case.trial
    assert mltb_record.score is not None and math.isfinite(mltb_record.score), mltb_record.score
    assert mltb_record.percentile is None or 0.0 <= mltb_record.percentile <= 100.0, mltb_record.percentile
