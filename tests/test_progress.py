"""progress.py: the live progress line of a benchmark run (plain lines off a terminal, per-trial lines with -v)."""
import re
from types import SimpleNamespace


from mltb_core.analysis.records import TrialRecord, record_json
from pytest_mltb.progress import ProgressReporter, format_duration
from pytest_mltb.session import RECORD_PROPERTY

from test_plugin import COMMON, FAKE_CONFTEST, SUITE  # noqa: F401 - the fake trial runner

pytest_plugins = ["pytester"]


class Terminal:
    isatty = False

    def __init__(self):
        self.lines = []

    def write_line(self, text, **markup):
        self.lines.append(text)

    def ensure_newline(self):
        pass


def reporter(verbose=0, interval=0.0):
    terminal = Terminal()
    now = [0.0]
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: terminal if name == "terminalreporter" else None),
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


def test_a_trial_reports_its_calls_and_stage_before_the_first_table(pytester):
    """Issue 35: off a terminal the main job said nothing for minutes. A real trial (sim, the real episode)
    run in this process prints "call k/N, stage s/10, elapsed" as it goes, before the summary."""
    pytester.makepyfile(test_challenges=SUITE)
    result = pytester.runpytest_subprocess(*COMMON, "--planner=react", "--max-llm-calls=3", "-p", "no:xdist")
    lines = result.outlines
    calls = [i for i, line in enumerate(lines)
             if re.fullmatch(r"mltb: spaceship-titanic-react-sim-t00: call \d/3, stage \d+/10, elapsed \d+s", line)]
    summary = next(i for i, line in enumerate(lines) if "mltb summary" in line)
    assert calls and calls[0] < summary, "\n".join(lines)
    assert lines[calls[0]].startswith("mltb: spaceship-titanic-react-sim-t00: call 1/3, stage 0/10")


def test_per_call_lines_are_rate_limited_off_a_terminal():
    from mltb_core.planners.progress import TrialProgress, report

    progress, terminal, now = reporter()
    with progress.trial("case-t00"):
        for call in range(1, 5):
            now[0] = call * 5.0           # a call every 5 s: a line on the first, then every CALL_INTERVAL (15 s)
            report(TrialProgress(call, 4, call, now[0]))
    report(TrialProgress(9, 9, 9, 99.0))   # after the trial: nobody listens
    assert terminal.lines == ["mltb: case-t00: call 1/4, stage 1/10, elapsed 5s",
                              "mltb: case-t00: call 4/4, stage 4/10, elapsed 20s"]
    assert progress.current is None


def test_ctrl_c_says_how_many_trials_were_recorded_and_how_to_continue(pytester, monkeypatch):
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(FAKE_CONFTEST)
    monkeypatch.setenv("MLTB_FAKE_INTERRUPT", "spaceship-titanic-react-1")
    result = pytester.runpytest_subprocess(*COMMON, "--planner=react", "--trials=3", "-p", "no:xdist")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["mltb: interrupted: 1 of 3 trials recorded; continue with `--resume`*"])


def test_starting_the_local_model_server_says_so(tmp_path, monkeypatch):
    """The model file and each server's start are announced as they happen: a cold start takes a while."""
    import mltb_core.llm.local.backend as local
    from pytest_mltb.servers import SessionHolds

    model = tmp_path / "model.gguf"
    model.write_bytes(b"x" * 2_000_000)

    class Server:
        port = 4321

        def acquire(self):
            return "http://127.0.0.1:4321"

        def release(self):
            pass

    class Broken(Server):
        def acquire(self):
            raise RuntimeError("llama.cpp exited with code 1")

    monkeypatch.setattr(local, "resolve_model_path", lambda value: model)
    monkeypatch.setattr(local, "worker_servers", lambda path, workers: [Server(), Broken()])
    lines = []
    servers = SessionHolds()
    servers.start([f"local:{model}"], workers=2, say=lines.append)
    assert lines[0] == f"mltb: local model {model} ready ({model}, 0.0 GB, hash-checked); starting 2 llama.cpp server(s)"
    assert re.fullmatch(r"mltb: llama.cpp server on port 4321 answering after \d+\.\d s", lines[1])
    assert "failed to start: llama.cpp exited with code 1" in lines[2] and servers.errors and len(servers.held[0][1]) == 1


def test_the_interrupt_line_counts_the_calls_the_unfinished_trials_keep(tmp_path):
    """Issue 59: after Ctrl-C the line says how many answered calls the checkpoints keep for --resume."""
    from mltb_core.analysis.runstore import RunStore, TrialFiles
    from mltb_core.llm.base import Candidate, LLMResponse, Usage
    from mltb_core.runner.checkpoint import TrialCheckpoint
    from pytest_mltb.plugin import CONTEXT

    store = RunStore(tmp_path)
    progress, terminal, _ = reporter()
    progress.config.stash = {CONTEXT: SimpleNamespace(run_dir=tmp_path)}
    progress.interrupted, progress.total = True, 4
    progress.benchmark = lambda: True                             # a session of benchmark items (none recorded)

    def interrupt_line() -> str:
        terminal.lines.clear()
        summary = progress.pytest_terminal_summary(terminal)
        next(summary)
        return terminal.lines[-1]

    assert interrupt_line() == ("mltb: interrupted: 0 of 4 trials recorded; continue with `--resume` (and the same "
                                "options)")                        # nothing kept: nothing said
    for case, calls in (("a-t00", 3), ("b-t01", 2)):
        checkpoint = TrialCheckpoint(TrialFiles(store.work_dir(case), case).checkpoint)
        for call in range(calls):
            checkpoint.record(f"{call:064d}", LLMResponse([Candidate("a reply")], Usage(calls=1)))
        checkpoint.close()
    assert interrupt_line() == ("mltb: interrupted: 0 of 4 trials recorded, 5 LLM calls of 2 unfinished trials kept; "
                                "continue with `--resume` (and the same options)")
    (TrialFiles(store.work_dir("b-t01"), "b-t01").checkpoint).write_bytes(b"\xff torn")   # unreadable: keeps nothing
    assert ", 3 LLM calls of the unfinished trial kept;" in interrupt_line()


def test_the_interrupt_line_only_in_a_session_that_ran_benchmark_items(pytester):
    """Issue 59: every pytest session of the environment printed "interrupted: 0 of N trials recorded", also a
    test run that is not a benchmark."""
    pytester.makepyfile(test_plain="def test_one():\n    pass\n\n"
                                   "def test_two():\n    raise KeyboardInterrupt\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    assert result.ret == 2 and "KeyboardInterrupt" in result.stdout.str()
    assert "interrupted:" not in result.stdout.str() and "--resume" not in result.stdout.str()


def _run_in_a_terminal(cwd, argv, timeout=600.0, rows=30, cols=100) -> str:
    """Run ``argv`` on a pseudo-terminal (stdin, stdout and stderr), as a user's shell would: what it wrote."""
    import fcntl
    import os
    import select
    import struct
    import subprocess
    import sys
    import termios
    import time

    from pathlib import Path

    import mltb_core

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "COLUMNS", "LINES", "PYTEST_ADDOPTS")}
    root = str(Path(mltb_core.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["TERM"] = "xterm"
    proc = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:   # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return b"".join(chunks).decode("utf-8", "replace")


def test_under_a_terminal_a_trial_prints_call_and_stage_lines(pytester):
    """Issue 59: README and docs/reports.md promise "call k/N, stage s/10" lines; under a real terminal the main
    job showed only the status row, cut at the terminal's width before the trial's part. A real sim trial on a
    pseudo-terminal now prints them as lines that stay (the status row's rewrites, between save- and
    restore-cursor, are left out here) and shows the trial first on the status row."""
    pytester.makepyfile(test_challenges=SUITE)
    out = _run_in_a_terminal(pytester.path, ["-m", "pytest", *COMMON, "--planner=react", "--max-llm-calls=3",
                                             "-p", "no:xdist"])
    status_rows = re.findall(r"\x1b7\x1b\[\d+;1H\x1b\[2K(.*?)\x1b8", out)
    kept = re.sub(r"\x1b7.*?\x1b8", "", out)                # what scrolls and stays on the screen
    kept = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", kept)      # colours and cursor moves
    lines = [line.strip() for line in kept.replace("\r", "\n").splitlines()]
    calls = [line for line in lines
             if re.fullmatch(r"mltb: spaceship-titanic-react-sim-t00: call \d/3, stage \d+/10, elapsed \d+s", line)]
    assert calls and calls[0].startswith("mltb: spaceship-titanic-react-sim-t00: call 1/3, stage 0/10"), out[-3000:]
    assert any(row.startswith("mltb: spaceship-titanic-react-sim-t00: call ") for row in status_rows), status_rows
    assert "mltb summary" in kept
