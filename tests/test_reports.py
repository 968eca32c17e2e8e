"""reports.py: merged leaderboard files, per-task and per-trial pages, provenance and the config legend,
every shape a run can take (infra errors, empty, one trial, several configs, no percentile), and a real
render in headless Chromium (when it exists) that clicks a tree node."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mltb_core.analysis.reports import (ReportSection, build_report, config_legend, load_runs, report_main,
                                        task_page_name, trial_page_name)
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.resultsfile import append_records
from mltb_core.analysis.tables import Table

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def steps_for(planner: str, config: dict, valid: bool) -> list[dict]:
    """A small MCTS-shaped trajectory: root → 1 read_data → {2 ok, 3 error}, best path [1, 2]."""
    return [{"step_number": 1, "step_type": "trial_start", "config": {"planner": planner, **config},
             "prompt": "Predict \u2013 carefully.\nSecond line"},
            {"step_number": 2, "step_type": "tool_execution_initiation", "node_id": 1, "parent_id": 0,
             "tools_to_execute": [{"tool_name": "read_data", "tool_args": {"output": "train"}}]},
            {"step_number": 3, "step_type": "tool_execution_completion", "node_id": 1,
             "tool_results": [{"ok": True, "content_preview": "Stored train <b>", "content_length": 16}]},
            {"step_number": 4, "step_type": "tool_execution_initiation", "node_id": 2, "parent_id": 1,
             "tools_to_execute": [{"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "train"}}}]},
            {"step_number": 5, "step_type": "tool_execution_completion", "node_id": 2,
             "tool_results": [{"ok": True, "content_preview": "Filled 3 columns"}]},
            {"step_number": 6, "step_type": "tool_execution_initiation", "node_id": 3, "parent_id": 1,
             "tools_to_execute": [{"tool_name": "drop_feature", "tool_args": {}}]},
            {"step_number": 7, "step_type": "tool_execution_completion", "node_id": 3,
             "tool_results": [{"ok": False, "content_preview": "Error: no column 'Cabin'"}]},
            {"step_number": 8, "step_type": "reward_feedback", "node_id": 2, "stage": 4, "passed": [4],
             "feedback": "Next: engineer features"},
            {"step_number": 9, "step_type": "search_summary", "best_path": [1, 2], "best_node": 2,
             "stop_reason": "valid submission" if valid else "budget",
             "tree": [{"id": 0, "parent": None, "visits": 5, "value": 0.123456789, "reward": 0.0, "stage": 0},
                      {"id": 1, "parent": 0, "visits": 4, "value": 0.5, "reward": 0.1, "stage": 1},
                      {"id": 2, "parent": 1, "visits": 3, "value": 0.75, "reward": 0.3, "stage": 4},
                      {"id": 3, "parent": 1, "visits": 1, "value": -0.1, "reward": 0.0, "stage": 1}]}]


TOOLS = ("read_data", "fillna_with_median", "encode_all_categorical_columns", "fit_lightgbm_classifier",
         "drop_feature", "create_submission")


def big_tree_steps(nodes: int = 200) -> list[dict]:
    """A deterministic MCTS-like trajectory of ``nodes`` nodes: each node has up to 3 children, depth grows
    with the id, every seventh call fails; the best path follows the first child down."""
    steps: list[dict] = [{"step_type": "trial_start", "config": {"planner": "mcts_shaped"}}]
    tree = [{"id": 0, "parent": None, "visits": nodes, "value": 0.5, "reward": 0.0, "stage": 0}]
    for i in range(1, nodes + 1):
        parent = (i - 1) // 3
        ok = i % 7 != 0
        steps += [{"step_type": "tool_execution_initiation", "node_id": i, "parent_id": parent,
                   "tools_to_execute": [{"tool_name": TOOLS[i % len(TOOLS)], "tool_args": {"bindings": {"df": "train"},
                                                                                        "func_kwargs": {"column": f"c{i}"}}}]},
                  {"step_type": "tool_execution_completion", "node_id": i,
                   "tool_results": [{"ok": ok, "content_preview": f"Applied to c{i}" if ok else f"Error: no column c{i}"}]}]
        tree.append({"id": i, "parent": parent, "visits": max(1, nodes // (i + 1)), "value": 1 / (i + 1),
                     "reward": 0.1 * (i % 3), "stage": min(10, 1 + i.bit_length())})
    best, node = [], 1
    while node <= nodes:
        best.append(node)
        node = node * 3 + 1
    steps.append({"step_type": "search_summary", "best_path": best, "best_node": best[-1], "stop_reason": "budget",
                  "tree": tree})
    return steps


def make_big_trial(run_dir: Path) -> TrialRecord:
    trajectory = Path("trajectories") / "big.jsonl"
    (run_dir / trajectory).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / trajectory).write_text("".join(json.dumps(s) + "\n" for s in big_tree_steps()))
    record = TrialRecord(task="spaceship-titanic", planner="mcts_shaped", model="sim", trial=9, seed=9,
                         config_hash="abc", outcome="planner_failure", stage_reached=8, tree_nodes=200,
                         synthetic=True, trajectory=trajectory.as_posix())
    append_records(run_dir / "results.jsonl", [record])
    return record


def make_run(run_dir: Path, planner: str, trials: int = 3, *, config_hash: str = "abc", config=None, task="spaceship-titanic",
             percentile=True, outcome=None, model="sim") -> list[TrialRecord]:
    records = []
    for trial in range(trials):
        valid = trial != 0 and outcome is None
        trajectory = None
        if outcome != "infra_error":
            trajectory = Path("trajectories") / f"{task}-{planner}-{config_hash}-{trial}.jsonl"
            (run_dir / trajectory).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / trajectory).write_text("".join(json.dumps(s) + "\n" for s in
                                                      steps_for(planner, config or {"max_iterations": 40}, valid)))
        records.append(TrialRecord(
            task=task, planner=planner, model=model, trial=trial, seed=trial, config_hash=config_hash,
            outcome=outcome or ("valid" if valid else "planner_failure"), valid=valid,
            percentile=(40.0 + trial if valid and percentile else None), stage_reached=10 if valid else 4,
            percentile_note=None if percentile else "original dataset: no leaderboard", tokens_in=100,
            synthetic=model == "sim", trajectory=trajectory.as_posix() if trajectory else None,
            error="OpenAIError: The api_key client option must be set" if outcome == "infra_error" else None))
    append_records(run_dir / "results.jsonl", records)
    return records


def svg_texts(index: str) -> str:
    return " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", index))


def test_a_figure_renders_to_the_same_svg_every_time():
    """A report re-rendered from the same records must not differ in its plots (matplotlib would stamp the
    time and draw random clip-path ids), or every regenerated report's diff is noise."""
    from mltb_core.analysis.plots import figure_svg, inline_svg, pyplot

    def draw() -> str:
        fig, ax = pyplot().subplots(figsize=(3, 2))
        ax.plot([0, 1, 2], [1, 0, 2])
        ax.set_title("planner <b>")
        return figure_svg(fig)

    first, second = draw(), draw()
    assert first == second and "dc:date" not in first and "clip-path=" in first
    assert first.startswith("<?xml") and inline_svg(first).startswith("<svg")
    assert "planner &lt;b&gt;" in first                 # labels stay (escaped) text


def test_build_report_merges_runs(tmp_path):
    make_run(tmp_path / "run1", "react")
    records = make_run(tmp_path / "run2", "mcts_shaped")
    paths = build_report([tmp_path / "run1", tmp_path / "run2"], tmp_path / "out")
    summary = json.loads(paths["summary"].read_text())
    assert summary["records"] == 6 and summary["provenance"]["mltb_version"]
    assert set(summary["cells"]) == {"spaceship-titanic|react|sim", "spaceship-titanic|mcts_shaped|sim"}
    markdown = paths["leaderboard"].read_text()
    assert "| react" in markdown and "mcts_shaped" in markdown and "synthetic policy, not an LLM" in markdown
    index = paths["index"].read_text()
    assert index.count("<svg") >= 3 and "src=" not in index and "<link" not in index   # nothing fetched
    assert "mltb 0." in index and "generated" in index                       # provenance
    page = (tmp_path / "out" / "trials" / trial_page_name(records[1])).read_text()
    assert "mltb 0." in page and "tree-data" in page and "src=" not in page  # self-contained
    data = json.loads(re.search(r"id='tree-data'>(.*?)</script>", page).group(1))
    assert data["best_path"] == [1, 2] and data["nodes"][0]["value"] == 0.123456789   # exact in the JSON
    assert data["nodes"][1]["observation"] == "Stored train <b>" and "Stored train <b>" not in page  # escaped
    assert "Predict \u2013 carefully.\nSecond line" in page                # the prompt as text, not JSON escapes
    task_page = (tmp_path / "out" / "tasks" / task_page_name("spaceship-titanic")).read_text()
    assert task_page.count("../trials/") == 6 and "trial 2" in task_page


def test_default_out_is_under_the_run_directory(tmp_path, capsys):
    make_run(tmp_path / "run", "react", trials=1)
    report_main([tmp_path / "run"])
    assert (tmp_path / "run" / "report" / "index.html").is_file()
    assert "index: " + str(tmp_path / "run" / "report" / "index.html") in capsys.readouterr().out


def test_infra_error_run_alone_and_merged_with_a_sim_run(tmp_path):
    make_run(tmp_path / "broken", "react", trials=2, outcome="infra_error", model="openai:gpt-4o")
    paths = build_report([tmp_path / "broken"], tmp_path / "out1")        # used to crash in boxplot
    index = paths["index"].read_text()
    assert "Infrastructure errors" in index and "api_key" in index
    make_run(tmp_path / "good", "react", trials=3)
    paths = build_report([tmp_path / "broken", tmp_path / "good"], tmp_path / "out2")
    assert json.loads(paths["summary"].read_text())["records"] == 5
    texts = svg_texts(paths["index"].read_text())
    assert "openai:gpt-4o" not in texts.split("Cost versus")[0] and "sim" in texts   # no empty panels


def test_empty_results_file(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.jsonl").write_text("")
    paths = build_report([tmp_path / "run"], tmp_path / "out")
    assert "No trial records" in paths["index"].read_text()


def test_one_task_one_trial_draws_points_not_boxes(tmp_path):
    make_run(tmp_path / "run", "react", trials=2)   # one task: one point per column
    index = build_report([tmp_path / "run"], tmp_path / "out")["index"].read_text()
    assert "n=1" in svg_texts(index)
    make_run(tmp_path / "one", "react", trials=1)
    build_report([tmp_path / "one"], tmp_path / "out1")


def test_box_plots_need_three_tasks(tmp_path):
    for task in ("spaceship-titanic", "playground-series-s3e1", "playground-series-s4e1"):
        make_run(tmp_path / "run", "react", trials=2, task=task)
    index = build_report([tmp_path / "run"], tmp_path / "out")["index"].read_text()
    assert "n=3" in svg_texts(index)


def test_different_configs_label_plots_and_tables_alike(tmp_path):
    make_run(tmp_path / "a", "react", config_hash="8236dc000000", config={"max_iterations": 8})
    make_run(tmp_path / "b", "react", config_hash="c59aa2000000", config={"max_iterations": 40})
    paths = build_report([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    index = paths["index"].read_text()
    texts = svg_texts(index)
    for label in ("react@8236dc", "react@c59aa2"):
        assert label in texts and f"<th>{label}" in index      # plots and tables use the same columns
    legend = config_legend(load_runs([tmp_path / "a", tmp_path / "b"]))
    assert legend["differing"] == ["max_iterations"]
    assert "max_iterations=8" in index and "max_iterations=40" in index and "Configurations" in paths["leaderboard"].read_text()


def test_runs_without_percentiles(tmp_path):
    make_run(tmp_path / "run", "react", percentile=False)
    paths = build_report([tmp_path / "run"], tmp_path / "out")
    assert "excluded" in paths["leaderboard"].read_text()


def test_rerun_without_resume_is_deduplicated_and_said(tmp_path):
    make_run(tmp_path / "run", "react")
    make_run(tmp_path / "run", "react")     # the same trials again, appended
    paths = build_report([tmp_path / "run"], tmp_path / "out")
    assert json.loads(paths["summary"].read_text())["records"] == 3
    assert "3 earlier record(s) of rerun trials superseded" in paths["index"].read_text()


def test_extra_sections_are_rendered(tmp_path):
    section = ReportSection("Pass@k", lambda records, seed: [Table("passk", "pass@k table", ["k"], [["1"]])])
    make_run(tmp_path / "run", "react")
    paths = build_report([tmp_path / "run"], tmp_path / "out", sections=[section])
    assert "<h2>Pass@k</h2>" in paths["index"].read_text() and "pass@k table" in paths["leaderboard"].read_text()


def _shot(page: Path, png: Path, height: int = 1400) -> None:
    subprocess.run([str(ROOT / "benchmarks" / "report_screenshot.sh"), str(page), str(png), str(height)],
                   check=True, timeout=150, capture_output=True, env={"MLTB_SHOT_WIDTH": "1400", "PATH": "/usr/bin:/bin"})
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


@pytest.mark.skipif(not CHROMIUM, reason="no chromium")
def test_report_renders_in_headless_chromium(tmp_path):
    """Index, task page and a 200-node MCTS trial page at 1400 px (MLTB_SHOTS=DIR keeps the pngs to look at)."""
    make_run(tmp_path / "run", "mcts_shaped")
    big = make_big_trial(tmp_path / "run")
    paths = build_report([tmp_path / "run"], tmp_path / "out")
    shots = Path(os.environ.get("MLTB_SHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    _shot(paths["index"], shots / "index.png")
    _shot(tmp_path / "out" / "tasks" / task_page_name("spaceship-titanic"), shots / "task.png")
    _shot(tmp_path / "out" / "trials" / trial_page_name(big), shots / "trial-200-nodes.png", 2400)


@pytest.mark.skipif(not CHROMIUM, reason="no chromium")
def test_clicking_a_tree_node_shows_its_observation(tmp_path):
    """The viewer's script runs in a real browser: a click on node #3 puts its observation in the panel."""
    records = make_run(tmp_path / "run", "mcts_shaped")
    build_report([tmp_path / "run"], tmp_path / "out")
    page = tmp_path / "out" / "trials" / trial_page_name(records[1])
    probe = tmp_path / "probe.html"
    click = ("<script>window.addEventListener('load',()=>{document.querySelector(\"[data-node='3']\").click();"
             "document.title='DETAIL:'+document.getElementById('tv-detail').textContent;"
             "document.getElementById('f-best').click();"
             "document.title+='|ROWS:'+document.querySelectorAll('.tv-row').length;});</script>")
    probe.write_text(page.read_text().replace("</body>", click + "</body>"))
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120).stdout
    title = re.search(r"<title>(.*?)</title>", out, re.S).group(1)
    assert "DETAIL:Node #3" in title and "Error: no column 'Cabin'" in title.replace("&#39;", "'")
    assert "|ROWS:3" in title     # best path only: root, #1, #2


def test_solver_written_text_cannot_inject_markdown(tmp_path):
    # issue 20: a compromised solver wrote a raw stage_name into leaderboard.md; stop_reason and error too
    hostile = "x](http://evil.example) | ![img](http://evil.example/p.png)\n# Owned <script>alert(1)</script>"
    run = tmp_path / "run"
    records = [TrialRecord(task="spaceship-titanic", planner="react", model="sim", trial=t, seed=t, config_hash="h",
                           outcome="infra_error" if t == 2 else "valid", valid=t != 2, percentile=40.0,
                           stage_reached=10, stage_name=hostile, stop_reason=hostile, feedback=hostile,
                           error=hostile if t == 2 else None, synthetic=True) for t in range(3)]
    append_records(run / "results.jsonl", records)
    paths = build_report([run], tmp_path / "out")
    markdown = paths["leaderboard"].read_text()
    assert "](http://evil" not in markdown and "![img]" not in markdown and "<script>" not in markdown
    assert "\n# Owned" not in markdown
    lines = markdown.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| task") and "first error" in line)
    row = lines[header + 2]                     # the infra table's row: no column gained from a '|' in the text
    assert row.count("|") - row.count("\\|") == lines[header].count("|")
    assert "\\!\\[img\\]" in row        # the text is still there, inert
    assert "<script>" not in paths["index"].read_text()


def _unescaped(pattern: str, text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"(?<!\\)" + pattern, line)]


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")     # the control characters, drawn
def test_a_records_file_text_is_text_in_every_report(tmp_path, capsys):
    # a records file is user input: its model name, code, settings and machine reach titles, headers, cells,
    # prose and plot labels; a '$' pair made matplotlib parse a formula, and a malformed one raised
    hostile = "m<script>x</script>|y\n# Owned [l](http://e.x) $\\frac{a$ **b** \x1b[2J\x9b2J"
    run = tmp_path / "run"
    records = [TrialRecord(task=task, planner=planner, model=model, trial=t, seed=t, config_hash="h",
                           outcome="valid" if valid else "planner_failure", valid=valid, stage_reached=10 if valid else 3,
                           normalized=0.3 + 0.2 * p if valid else None, percentile=40.0 if valid else None,
                           code=hostile, toolset=hostile, board=hostile, synthetic=False,
                           machine={"cpu": hostile, "cores": 2, "system": hostile, "python": hostile})
               for model in (hostile, "local") for task in ("spaceship-titanic", "titanic", "house-prices")
               for p, planner in enumerate(("react", "lats", "mcts_shaped")) for t in range(3)
               for valid in [(t + p) % 3 != 0]]
    append_records(run / "results.jsonl", records)
    paths = build_report([run], tmp_path / "out")                     # plots with the name: no mathtext
    import xml.etree.ElementTree as ElementTree

    index = paths["index"].read_text()
    ElementTree.fromstring("<svg" + index.split("<svg", 1)[1].split("</svg>", 1)[0] + "</svg>")   # still XML
    assert "<script>" not in paths["index"].read_text()
    md = tmp_path / "r.md"
    from mltb_core.analysis.reports import write_markdown_report

    assert md in write_markdown_report([run], md, command="mltb report run")
    for text in (md.read_text(), paths["leaderboard"].read_text()):
        assert not _unescaped("<script", text) and not _unescaped(r"\]\(http", text) and not _unescaped(r"\$\\", text)
        assert "\n# Owned" not in text
        lines = text.splitlines()
        for i, line in enumerate(lines):       # every table row keeps its header's columns
            if line.startswith("|") and i and not lines[i - 1].startswith("|"):
                width = line.count("|")
                block = lines[i:next((j for j in range(i, len(lines)) if not lines[j].startswith("|")), len(lines))]
                assert all(row.count("|") - row.count("\\|") == width for row in block), block
    svg = (tmp_path / "r-cd.svg").read_text()
    assert svg.count("frac") == 3 and "\x1b" not in svg     # drawn as its characters; XML has no ESC
    from mltb_core.analysis.tables import build_tables, render_tables

    terminal = render_tables(build_tables(records))      # what `mltb report` and pytest print
    assert "\n# Owned" not in terminal and "x</script>|y # Owned" in terminal and "\x1b" not in terminal
    assert "\x9b" not in terminal
    from mltb_core.analysis.reports import compare_main

    capsys.readouterr()
    page = compare_main(run, run, out=tmp_path / "cmp")                # its plot labels name the model too
    assert "<script>" not in page.read_text()
    printed = capsys.readouterr().out                                   # the terminal: no control characters
    assert "x</script>|y # Owned" in printed and "\x1b" not in printed and "\x9b" not in printed


def test_export_csv_neutralises_formulas(tmp_path):
    from mltb_core.analysis.export import write_export

    record = TrialRecord(task="spaceship-titanic", planner="react", model="sim", trial=0, seed=0, config_hash="h",
                         outcome="valid", valid=True, normalized=-0.3, stage_name="=HYPERLINK(\"http://e\")",
                         stop_reason="+1", feedback="bad \ud800 text")
    path = write_export([record], tmp_path / "t.csv", "csv")
    import csv

    (row,) = list(csv.DictReader(path.open(encoding="utf-8")))
    assert row["stage_name"].startswith("'=") and row["stop_reason"] == "'+1"
    assert row["normalized"] == "0.0" and row["normalized_raw"] == "-0.3"    # below the baseline counts 0
    assert "\\ud800" in row["feedback"]


def test_the_legend_names_the_planner_when_configurations_differ_by_planner(tmp_path):
    """Issue 35: two planners' configurations (each hashes its own knobs) read 'settings not recorded'."""
    make_run(tmp_path / "a", "react", config_hash="aaaaaa000000", config={"max_llm_calls": 12})
    make_run(tmp_path / "b", "mcts_shaped", config_hash="bbbbbb000000", config={"max_llm_calls": 12})
    legend = config_legend(load_runs([tmp_path / "a", tmp_path / "b"]))
    assert legend["differing"] == ["planner"]
    index = build_report([tmp_path / "a", tmp_path / "b"], tmp_path / "out")["index"].read_text()
    assert "they differ in: planner." in index and "settings not recorded" not in index


def test_compare_names_the_one_option_two_runs_differ_in(tmp_path, capsys):
    from mltb_core.analysis.reports import compare_main, run_differences

    make_run(tmp_path / "a", "react", config_hash="aaaaaa000000", config={"max_llm_calls": 12, "knobs": {"k": 1}})
    make_run(tmp_path / "b", "react", config_hash="bbbbbb000000", config={"max_llm_calls": 40, "knobs": {"k": 1}})
    make_run(tmp_path / "c", "mcts_shaped", config_hash="cccccc000000", config={"max_llm_calls": 12, "knobs": {"k": 2}})
    a, b, c = (load_runs([tmp_path / name]) for name in "abc")
    assert run_differences(a, b) == "max_llm_calls: 12 → 40"
    assert run_differences(a, c) == 'k: 1 → 2; planner: "react" → "mcts_shaped"'   # a planner's knob by its name
    assert run_differences(a, a) == "nothing: both ran the same recorded configuration (their code is not recorded)"
    out = compare_main(tmp_path / "a", tmp_path / "b", tmp_path / "cmp.html")
    assert "a → b: they differ in max_llm_calls: 12 → 40" in capsys.readouterr().out
    assert "The runs differ in max_llm_calls: 12 → 40." in out.read_text()


def test_a_configuration_several_planners_share_names_them_all(tmp_path):
    """The published table printed `config ac195f2b40a9 (mcts_outcome, mcts_shaped): planner="mcts_outcome"`:
    the planner of the first trajectory read, for a hash two planners share."""
    make_run(tmp_path / "a", "mcts_outcome", config_hash="cccccc000000", config={"max_llm_calls": 60})
    make_run(tmp_path / "a", "mcts_shaped", config_hash="cccccc000000", config={"max_llm_calls": 60})
    make_run(tmp_path / "a", "hierarchical_mcts", config_hash="dddddd000000", config={"max_llm_calls": 60})
    legend = config_legend(load_runs([tmp_path / "a"]))
    assert legend["differing"] == ["planner"]
    assert legend["hashes"]["cccccc000000"]["config"]["planner"] == ["mcts_outcome", "mcts_shaped"]
    assert legend["hashes"]["dddddd000000"]["config"]["planner"] == "hierarchical_mcts"


def test_report_planner_keeps_only_the_named_planners_arms_of_merged_runs(tmp_path, capsys):
    """An ablation run beside its main run: --planner keeps the ablated planners' records (both configurations),
    so the stage test compares those arms alone; the header names the option, and a planner the runs do not
    hold is a usage error naming the ones they do."""
    from mltb_core import cli

    main, ablation = tmp_path / "main", tmp_path / "ablation"
    for planner in ("react", "lats", "mcts_shaped"):
        make_run(main, planner, config_hash="aaaaaa000000", config={"feedback": None})
    make_run(ablation, "mcts_shaped", config_hash="bbbbbb000000", config={"feedback": False})
    out = tmp_path / "ablation.md"
    argv = ["report", str(main), str(ablation), "--markdown", str(out), "--sections", "stage_comparison",
            "--planner", "react,mcts_shaped"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    text = out.read_text()
    assert "--sections stage_comparison --planner react,mcts_shaped`" in text
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "@" in line]
    assert rows == ["mcts_shaped@aaaaaa", "mcts_shaped@bbbbbb"] and "| lats " not in text
    assert "× 3 planners" in text
    # the HTML report and summary.json say the filter; the records left out are not "superseded"
    assert cli.main(["report", str(main), str(ablation), "--out", str(tmp_path / "html"), "--planner",
                     "react,mcts_shaped"]) == 0
    summary = json.loads((tmp_path / "html" / "summary.json").read_text())
    assert summary["provenance"]["planners"] == ["react", "mcts_shaped"]
    assert summary["provenance"]["superseded"] == 0 and summary["records"] == 9
    assert "planners react, mcts_shaped only" in (tmp_path / "html" / "index.html").read_text()
    assert cli.main(["report", str(main), "--markdown", str(out), "--planner", "react,agent_k"]) == 2
    assert "planner(s) agent_k not in these runs; they hold: react, lats, mcts_shaped" in capsys.readouterr().err


def test_a_partial_markdown_report_prints_mean_ranks_but_no_test(tmp_path):
    """A PARTIAL report is rewritten as trials arrive; each version would be another look at the same question.
    Its Friedman text gives mean ranks only; the same records reported as complete get the test and post-hoc.
    (The ranking section's diagram is withheld alike: tests/test_stats.py.)"""
    from mltb_core.analysis.reports import markdown_report
    from mltb_core.analysis.sections import pick_sections

    run = tmp_path / "run"
    for task in ("spaceship-titanic", "playground-series-s3e1", "forest-cover-type-kernels-only"):
        make_run(run, "react", task=task)
        make_run(run, "lats", task=task, outcome="planner_failure")
        make_run(run, "mcts_shaped", task=task)

    def report(expect: int) -> str:
        return markdown_report([run], command="mltb report ...", sections=pick_sections(["stage_comparison"]),
                               expect_trials=expect)[0]

    partial = report(45)
    assert "**PARTIAL**: 27 of 45 planned trials" in partial
    assert "ties sharing a rank: withheld, the run is PARTIAL" in partial and "Mean ranks (1 = best; descriptive" \
        in partial
    assert "χ²" not in partial and "Post-hoc" not in partial
    complete = report(27)
    assert "PARTIAL" not in complete and "withheld" not in complete
    assert "χ² = " in complete and "Post-hoc: exact sign test per pair" in complete


# ---- the first screen (issue 59: what a new user saw) ------------------------------------------------------
def first_screen_run(run_dir: Path, tasks=("spaceship-titanic",), trials: int = 1) -> dict[str, Path]:
    for task in tasks:
        for planner in ("react", "mcts_shaped"):
            make_run(run_dir, planner, trials=trials, task=task, config_hash=planner[:4])
    return build_report([run_dir], run_dir / "report")


def test_the_index_opens_with_the_summary_then_the_trial_list(tmp_path):
    index = first_screen_run(tmp_path / "run", trials=2)["index"].read_text()
    at = {name: index.index(f"<h2 id='{name}'>") for name in ("summary", "trials", "plots", "configs", "tables")}
    assert at["summary"] < at["trials"] < at["plots"] < at["configs"] < at["tables"], at
    summary = re.sub(r" +</t", "</t", index[at["summary"]:at["trials"]])     # tabulate pads the cells
    # a row per planner: valid/counted, the stage reached, the funnel's fitted-a-model count; its funnel plot
    assert "<td>react</td><td>1</td><td>2</td><td>1/2</td><td>7 (4–10)</td><td>1/2</td>" in summary
    assert "Stage funnel" in svg_texts(summary) and "Consistency per task" in svg_texts(summary)
    assert index.index("On this page:") < at["summary"]


def test_each_note_is_given_once_per_page_and_the_tables_keep_theirs(tmp_path):
    from mltb_core.analysis.tables import CALLS_MARK, COMPUTE_NOTE, NOTES_ABOVE

    paths = first_screen_run(tmp_path / "run")
    index, markdown = paths["index"].read_text().replace("&#39;", "'"), paths["leaderboard"].read_text()
    task_page = (tmp_path / "run" / "report" / "tasks" / task_page_name("spaceship-titanic")).read_text()
    for page in (index, markdown, task_page.replace("&#39;", "'")):
        assert page.count("sim's rates that can order planners") == 1       # was under each of four tables
        assert page.count("overall: median over the k tasks with a figure") == 1
        assert page.count(COMPUTE_NOTE) == 1 and page.count(f"{CALLS_MARK}:") == 1   # the mark defined once
        assert NOTES_ABOVE in page
    summary = json.loads(paths["summary"].read_text())
    assert all(COMPUTE_NOTE in t["notes"] for t in summary["tables"] if t["key"].startswith(("consistency", "normalized")))


def test_a_section_named_like_its_table_is_titled_once(tmp_path):
    index = first_screen_run(tmp_path / "run")["index"].read_text()
    for title in ("Seconds per trial", "Where trials ended", "Machine"):
        assert index.count(f"{title}</h") == 1, title
    assert "id='seconds'" in index and "id='stop_kinds'" in index        # the table's anchor stays


def test_the_synthetic_banner_is_a_sentence_on_every_page(tmp_path):
    from mltb_core.analysis.labels import SYNTHETIC_BANNER

    paths = first_screen_run(tmp_path / "run")
    pages = [paths["index"], *(tmp_path / "run" / "report" / "tasks").iterdir(),
             *(tmp_path / "run" / "report" / "trials").iterdir()]
    for page in pages:
        text = page.read_text()
        assert f"<div class='synthetic'>{SYNTHETIC_BANNER}</div>" in text.replace("&#39;", "'"), page
        assert "are (synthetic policy" not in text
    assert f"> {SYNTHETIC_BANNER}" in paths["leaderboard"].read_text()


def test_the_policy_assumptions_are_prose_without_docstring_markup(tmp_path):
    paths = first_screen_run(tmp_path / "run")
    index = paths["index"].read_text()
    section = index[index.index("<h2 id='synthetic_policy'>"):index.index("<h2 id='run'>")]
    assert ":data:" not in section and "`" not in section and "<ol start='1'>" in section
    assert section.count("<li>") == 8 and "<code>JUDGE_NOISE_SD</code> = 1 point" in section
    markdown = paths["leaderboard"].read_text()
    assert ":data:" not in markdown and "``" not in markdown and "`create_submission` offered" in markdown


def test_the_plots_are_one_figure_each_at_a_readable_width(tmp_path):
    index = first_screen_run(tmp_path / "run")["index"].read_text()
    figures = re.findall(r"<svg [^>]*width=\"([\d.]+)pt\"", index)
    assert len(figures) >= 5                          # funnel, three per-task distributions, cost
    assert all(300 < float(w) < 600 for w in figures), figures   # two fit side by side, none squeezed to 180 px
    assert all(index.count(title) == 1 for title in ("Consistency per task", "Median normalized score per task",
                                                     "Median leaderboard percentile per task"))


def _scored(task: str, planner: str, normalized: float) -> TrialRecord:
    return TrialRecord(task=task, planner=planner, model="sim", trial=0, seed=0, config_hash=planner[:4],
                       outcome="valid", valid=True, stage_reached=10, normalized=normalized, synthetic=True)


def test_no_rating_from_one_task_and_a_rating_from_several():
    from mltb_core.analysis.ranking import RATING_NOTE, ranking_markdown
    from mltb_core.analysis.stats import MIN_TASKS_FOR_RATING

    one, _ = ranking_markdown([_scored("spaceship-titanic", "react", 0.6), _scored("spaceship-titanic", "lats", 0.5)])
    rating = one.split("### Rating", 1)[1].split("###", 1)[0]
    assert "No rating: the planners played on 1 task(s)" in rating and f"at least {MIN_TASKS_FOR_RATING}" in rating
    assert RATING_NOTE not in one and "| planner" not in rating
    tasks = ("spaceship-titanic", "playground-series-s3e1", "playground-series-s4e1")
    three, _ = ranking_markdown([_scored(t, p, s) for t in tasks for p, s in (("react", 0.6), ("lats", 0.5))])
    rating = three.split("### Rating", 1)[1].split("###", 1)[0]
    assert RATING_NOTE in rating and "| react " in rating and "No rating" not in rating


def _spent(task: str, planner: str, llm_calls: int) -> TrialRecord:
    return TrialRecord(task=task, planner=planner, model="sim", trial=0, seed=0, config_hash=planner[:4],
                       outcome="valid", valid=True, stage_reached=10, llm_calls=llm_calls, tool_calls=llm_calls,
                       synthetic=True)


def test_the_compute_mark_singles_out_cells_or_is_said_once():
    """A one-trial run of two planners that spent differently put ‡ on every cell: a mark on every cell marks
    nothing, so the table says it once instead; a mark that singles a cell out stays."""
    from mltb_core.analysis.tables import CALLS_MARK, EVERY_CELL_NOTE, consistency_table

    (both,) = consistency_table([_spent("spaceship-titanic", "react", 20), _spent("spaceship-titanic", "lats", 26)])
    assert not any(CALLS_MARK in cell for cell in both.rows[0]) and EVERY_CELL_NOTE in both.notes
    assert CALLS_MARK in both.rows[2][1]              # the per-trial rows keep the means' marks
    (three,) = consistency_table([_spent("spaceship-titanic", p, n) for p, n in (("react", 20), ("lats", 21),
                                                                                  ("mcts_shaped", 40))])
    assert [CALLS_MARK in cell for cell in three.rows[0][1:]] == [False, False, True]
    assert EVERY_CELL_NOTE not in three.notes
