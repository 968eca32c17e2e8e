"""The run store (mltb_core/analysis/runstore.py): one layout for both front ends, older layouts still read."""
from __future__ import annotations

import contextlib
import io
import json

from mltb_core import cli
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.resultsfile import append_records, read_records
from mltb_core.analysis.runstore import RunStore, TrialFiles


def _record(**fields) -> TrialRecord:
    return TrialRecord(**{"task": "spaceship-titanic", "planner": "react", "model": "sim", "trial": 0, "seed": 0,
                          "config_hash": "abc123", "outcome": "planner_failure", **fields})


def test_mltb_run_writes_the_layout_pytest_writes(tmp_path):
    """``mltb run`` keeps the trajectory where the pytest controller does (relative, under its config hash)
    and works in work/<case>/, as a pytest item does (tests/test_plugin.py checks the pytest side)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["run", "--task", "spaceship-titanic", "--planner", "react", "--model", "sim",
                         "--max-iterations", "3", "--out", str(tmp_path), "--keep-work"])
    assert code == 0
    store = RunStore(tmp_path)
    (record,) = read_records(store.results_path)
    assert record.trajectory == RunStore.trajectory_name(record).as_posix()
    steps = (tmp_path / record.trajectory).read_text().splitlines()
    assert json.loads(steps[0])["step_type"] == "trial_start"
    files = TrialFiles(store.work_dir(record.case_id), record.case_id)
    assert files.sandbox.is_dir() and files.trajectory.is_file()
    assert store.prompts_path.is_file()
    assert record.stop_kind != "unspecified" and record.machine["cores"] >= 1   # what the planner said it stopped on


def test_older_layouts_are_still_read(tmp_path):
    """An absolute path (``mltb run`` before the store), a flat trajectories/<case>.jsonl (a copied run) and the
    current relative path are all found; a record whose file is gone loads without one."""
    store = RunStore(tmp_path)
    absolute = tmp_path / "elsewhere" / "t.jsonl"
    absolute.parent.mkdir()
    absolute.write_text("{}\n")
    flat = tmp_path / "trajectories" / "spaceship-titanic-react-sim-t01.jsonl"
    flat.parent.mkdir()
    flat.write_text("{}\n")
    now = _record(trial=2, trajectory="trajectories/abc123/spaceship-titanic-react-sim-t02.jsonl")
    (tmp_path / now.trajectory).parent.mkdir(parents=True)
    (tmp_path / now.trajectory).write_text("{}\n")
    append_records(store.results_path, [_record(trial=0, trajectory=str(absolute)),
                                        _record(trial=1, trajectory="/gone/spaceship-titanic-react-sim-t01.jsonl"),
                                        now, _record(trial=3, trajectory="trajectories/abc123/missing.jsonl")])
    found = {r.trial: r.trajectory for r in store.load()}
    assert found == {0: str(absolute.resolve()), 1: str(flat.resolve()),
                     2: str((tmp_path / now.trajectory).resolve()), 3: None}


def test_write_keeps_the_trajectory_beside_the_records(tmp_path):
    store = RunStore(tmp_path)
    record = _record(trajectory="/work/somewhere/t.jsonl")
    store.write(record, '{"step_type": "trial_start"}\n')
    assert record.trajectory == "trajectories/abc123/spaceship-titanic-react-sim-t00.jsonl"
    assert (tmp_path / record.trajectory).read_text() == '{"step_type": "trial_start"}\n'
    (kept,) = store.read()
    assert kept.trajectory == record.trajectory


def test_a_recorded_trials_work_directory_is_cleared_unless_kept_or_an_infrastructure_error(tmp_path):
    """Every attempt's sandbox and data copy go once the record is written; an infra error's stay (their files
    may hold its cause), and so does every one with keep_work (``--keep-work``)."""
    store = RunStore(tmp_path)

    def worked(record: TrialRecord) -> TrialFiles:
        files = TrialFiles(store.work_dir(record.case_id, attempt=2), record.case_id)
        files.sandbox.mkdir(parents=True)
        (files.sandbox / "train_clean.csv").write_text("a\n1\n")
        return files

    cleared, crashed, kept = (_record(trial=0), _record(trial=1, outcome="infra_error"), _record(trial=2))
    for record, keep in ((cleared, False), (crashed, False), (kept, True)):
        files = worked(record)
        store.write(record, "{}\n", keep_work=keep)
        assert files.sandbox.is_dir() == (record is not cleared), record.trial
    assert not store.work_dir(cleared.case_id).exists()
    assert [r.trial for r in read_records(store.results_path)] == [0, 1, 2]   # every record written first


def test_clearing_work_never_leaves_the_runs_work_directory(tmp_path):
    """A record's case id is built from its task and model; a record a conftest made may name anything. A
    task climbing out with '..' must not make the store remove a directory outside the run's work/."""
    store = RunStore(tmp_path / "run")
    record = _record(task="../../victim/x")
    outside = (store.work_dir(record.case_id)).resolve()
    assert outside.parent == tmp_path / "victim"
    outside.mkdir(parents=True)
    (store.run_dir / "work" / "a-case").mkdir(parents=True)   # as in a run: the path climbs out through it
    store.write(record, None)
    assert outside.is_dir() and store.results_path.is_file()
