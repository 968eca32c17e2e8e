"""The benchmark: one item per (task, planner, model, trial).

    pytest suites/ --planner=mcts_shaped --model=sim --task spaceship-titanic --trials 3 -n 2

The mltb plugin parametrises ``mltb_case`` from its options and runs the trial in the
``mltb_record`` fixture (so infrastructure errors are ERRORs, retried per --infra-retries);
a planner failure fails here with what the trial reached and why it stopped.
"""


def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    assert mltb_record.task == mltb_case.task and mltb_record.planner == mltb_case.planner
    assert mltb_split.test_path.is_file()
    mltb_check(mltb_record)
