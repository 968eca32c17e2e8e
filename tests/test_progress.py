"""progress.py: the live progress line of a benchmark run (plain lines off a terminal, per-trial lines with -v)."""
import re
from types import SimpleNamespace


from mltb_core.analysis.results import TrialRecord, record_json
from pytest_mltb.progress import ProgressReporter, format_duration
from pytest_mltb.session import RECORD_PROPERTY

from test_plugin import COMMON, FAKE_CONFTEST, SUITE  # noqa: F401 - the fake trial runner

pytest_plugins = ["pytester"]


class Terminal:
    isatty = False

    def __init__(self):
        self.lines = []

    def write_line(self, text):
        self.lines.append(text)


def reporter(verbose=0, interval=0.0):
    terminal = Terminal()
    now = [0.0]
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: terminal),
                             getoption=lambda name, default=None: verbose)
    return ProgressReporter(config, interval=interval, clock=lambda: now[0]), terminal, now


def teardown(record=None):
    props = [(RECORD_PROPERTY, record_json(record))] if record else []
    return SimpleNamespace(when="teardown", user_properties=props)


def record(trial, valid, cost=0.01):
    return TrialRecord(task="spaceship-titanic", planner="react", model="sim", trial=trial, seed=trial, config_hash="h",
                       outcome="valid" if valid else "planner_failure", valid=valid, cost_usd=cost, tokens_in=1000,
                       tokens_out=200, stage_reached=10 if valid else 4, stage_name="create_submission" if valid else "")


def test_status_counts_cost_valid_and_eta():
    progress, terminal, now = reporter()
    progress.total = 4
    now[0] = 10.0
    progress.pytest_runtest_logreport(teardown(record(0, True)))
    now[0] = 20.0
    progress.pytest_runtest_logreport(teardown(record(1, False)))
    assert terminal.lines[-1] == ("mltb: 2/4 items · 1/2 trials valid · $0.0200 · 2,400 tokens · elapsed 20s · "
                                  "ETA 20s")


def test_plain_lines_are_rate_limited_but_the_last_item_is_shown():
    progress, terminal, now = reporter(interval=30.0)
    progress.total = 3
    for trial in range(3):
        now[0] = trial * 5.0
        progress.pytest_runtest_logreport(teardown(record(trial, True)))
    assert [line.split(" · ")[0] for line in terminal.lines] == ["mltb: 1/3 items", "mltb: 3/3 items"]


def test_verbose_shows_each_trial_and_nothing_before_a_record():
    progress, terminal, _ = reporter(verbose=1)
    progress.pytest_runtest_logreport(teardown())              # not a benchmark item: silent
    assert terminal.lines == []
    progress.pytest_runtest_logreport(teardown(record(0, True)))
    assert "t0: valid, stage 10/10 (create_submission), $0.0100, 1,200 tokens" in terminal.lines[0]


def test_format_duration():
    assert [format_duration(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m"]


def test_a_real_session_prints_progress_lines(pytester):
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(FAKE_CONFTEST)
    result = pytester.runpytest_subprocess(*COMMON, "--planner=react", "--trials=3", "-p", "no:xdist", "-v")
    lines = [line for line in result.outlines if line.startswith("mltb: ") and " items · " in line]
    assert lines and re.match(r"mltb: 3/3 items · \d/3 trials valid · \$0\.0000 · [\d,]+ tokens", lines[-1])
    assert any("    mltb: spaceship-titanic · react · t2:" in line for line in result.outlines)
