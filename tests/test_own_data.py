"""A user's own data (issue 59): the spec template says which ``source`` it takes, and works as written; a
repeated id is a usage error naming how many rows repeat one, before any trial (it once became a planner
failure later); a ``data`` file under ``source = "kaggle"`` (never read) is refused."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mltb_core import cli
from mltb_core.bench.tasks import TaskSpecError, check_task_inputs, get_task

ROOT = Path(__file__).resolve().parents[1]


def template() -> str:
    """The own-data spec template of docs/tasks-and-data.md, as a user copies it (the one block with a ``data``
    file; the field reference further down is a bundled task's)."""
    text = (ROOT / "docs" / "tasks-and-data.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if re.search(r"^data = ", b, re.M)]
    return block


def own_task(tmp_path: Path, repeated: int = 0, source: str | None = None) -> Path:
    """The template in ``tmp_path`` with the CSV it names: 600 rows of its columns, ``repeated`` of them
    repeating an earlier row's id."""
    spec = template()
    if source is not None:
        spec = spec.replace('source = "bundled"', f'source = "{source}"')
    (tmp_path / "my-task.toml").write_text(spec, encoding="utf-8")
    rng = np.random.default_rng(0)
    ids = np.arange(600)
    ids[600 - repeated:] = rng.choice(600 - repeated, repeated, replace=False)
    x = rng.normal(size=600)
    pd.DataFrame({"id": ids, "x": x, "label": (x + rng.normal(size=600) > 0).astype(int)}).to_csv(
        tmp_path / "my-task.csv", index=False)
    return tmp_path


def test_the_template_says_which_source_own_data_takes_and_works_as_written(tmp_path):
    spec = template()
    assert re.search(r'^source = "bundled" +# own data', spec, re.M)
    assert re.search(r"^id_column = .*# unique", spec, re.M)
    task = get_task("my-task", [own_task(tmp_path)])
    check_task_inputs(task)
    assert task.source == "bundled" and task.data_path == tmp_path / "my-task.csv"


def test_a_repeated_id_is_a_usage_error_naming_the_count_before_any_trial(tmp_path, capsys):
    (tmp_path / "specs").mkdir()
    specs = own_task(tmp_path / "specs", repeated=97)
    with pytest.raises(TaskSpecError, match=r"id column 'id' must be unique .* 97 rows repeat an earlier row's id"):
        check_task_inputs(get_task("my-task", [specs]))
    run_dir = tmp_path / "run"
    code = cli.main(["run", "--tasks-dir", str(specs), "--task", "my-task", "--model", "sim", "--planner", "react",
                     "--out", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "97 rows repeat an earlier row's id (duplicates)" in err and "field 'data'" in err
    assert not run_dir.exists()          # no trial ran, no record was written
    assert cli.main(["tasks", "--tasks-dir", str(specs)]) == 2


def test_own_data_under_the_kaggle_source_is_refused(tmp_path):
    with pytest.raises(TaskSpecError, match="'data' .* would never be read: your own data takes source = \"bundled\""):
        get_task("my-task", [own_task(tmp_path, source="kaggle")])
