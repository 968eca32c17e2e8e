"""The sections of ``mltb report``, in a registry a plug-in or a conftest extends.

A :class:`Section` has a name, a title and ``build(context)``, which returns its blocks: :class:`Table`
objects (rendered as Markdown and HTML tables) and strings of mltb's own Markdown prose (any untrusted text
inside escaped with :func:`mltb_core.analysis.safety.markdown` when the string is made). An empty list
leaves the section out. The built-ins are registered here in the order a report shows them; a plug-in adds
or replaces one through the entry-point group ``mltb.report_sections`` (an object with ``overrides = True``
replaces the built-in of its name); a pytest ``conftest.py`` through the hook ``pytest_mltb_report_sections``
(``pytest_mltb/hookspec.py``), called with the list a pytest run's report uses. ``mltb report --sections``
picks and orders them by name.
"""
from __future__ import annotations

import dataclasses
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from mltb_core.analysis.provenance import (LOAD_SAMPLE_SECONDS, NOT_RECORDED, machine_counts, machine_label,
                                           trial_code)
from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.results import QUALITY_FLOOR_NOTE, counted_records
from mltb_core.analysis.labels import SYNTHETIC_LABEL
from mltb_core.analysis.safety import markdown
from mltb_core.analysis.tables import Table, build_tables, entry_label, entry_order, markdown_label, variant_labels
from mltb_core.stages.events import TrajectoryRead, read_events
from mltb_core.plugins import NameClashError, Registry, RegistryError, origin_of

__all__ = ["Section", "SectionContext", "Block", "SECTIONS", "ENTRY_POINT_GROUP", "register_section",
           "section_names", "pick_sections", "DEFAULT_SECTIONS", "read_steps"]

ENTRY_POINT_GROUP = "mltb.report_sections"
Block = Union[Table, str]


@dataclass
class SectionContext:
    """What a section builds from: the report's records (deduplicated; trajectories as absolute paths),
    the bootstrap seed, the report's run directories and where the Markdown goes (figures go beside it)."""
    records: list[TrialRecord]
    seed: int = 0
    run_dirs: Sequence[Path] = ()
    markdown_path: Path | None = None
    figures: dict[str, str] = field(default_factory=dict)   # file name -> SVG text a section wants written
    sensitivity: list[TrialRecord] = field(default_factory=list)   # a sensitivity run's records (`--sensitivity`):
    # several models on the same items, read by the sensitivity section alone
    partial: bool = False   # fewer trials than planned so far: tests that would read a p-value are withheld (INTERIM)

    @property
    def interim(self) -> str | None:
        """Why a section prints no p-value now (None: it may)."""
        return INTERIM if self.partial else None


# A partial report is rewritten as trials arrive: each version is one more look at the same question, and a
# p-value read at every look no longer holds its level; its blocks are also unbalanced across tasks until a
# round completes. So a PARTIAL report gives mean ranks only.
INTERIM = ("the run is PARTIAL (each partial report is another look at the same question, so a p-value read now "
           "would not hold its level; the test runs once every planned trial is recorded)")


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    build: Callable[[SectionContext], list[Block]]
    overrides: bool = False


def _check(name: str, obj: Any) -> bool:
    if not isinstance(obj, Section) or obj.name != name:
        raise RegistryError(f"report section entry point {name!r} (group {ENTRY_POINT_GROUP}) loads {obj!r}, not a "
                            f"mltb_core.analysis.sections.Section named {name!r}")
    held = SECTIONS.registered(name)
    if held is not None and not obj.overrides:
        raise NameClashError(f"report section name {name!r} is claimed by both {origin_of(held.build)} and the "
                             f"entry point's {origin_of(obj.build)}; set overrides=True on the Section to replace it")
    return True    # checked here: every Section is of one class, so the registry cannot tell origins apart


SECTIONS: Registry[Section] = Registry("report section", ENTRY_POINT_GROUP, check=_check)


def register_section(section: Section) -> Section:
    """Add ``section``; a name already taken is refused naming both builders unless ``section.overrides``
    (every Section is of one class, so the builder function says where a section comes from)."""
    held = SECTIONS.registered(section.name)
    if held is not None and held.build is not section.build and not section.overrides:
        raise NameClashError(f"report section name {section.name!r} is claimed by both {origin_of(held.build)} and "
                             f"{origin_of(section.build)}; set overrides=True on the Section to replace it")
    return SECTIONS.register(section.name, section, overrides=True)


def section_names() -> list[str]:
    return list(SECTIONS)


def pick_sections(names: Sequence[str] | None) -> list[Section]:
    """The sections named (in that order), or every registered one; an unknown name is a ValueError listing them."""
    if names is None:
        return [SECTIONS[n] for n in DEFAULT_SECTIONS if n in SECTIONS] + \
               [s for n, s in SECTIONS.items() if n not in DEFAULT_SECTIONS]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown report section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    return [SECTIONS[n] for n in names]


def read_steps(record: TrialRecord) -> tuple[list[dict], str]:
    """The well-formed events of a trial's trajectory (:func:`mltb_core.stages.events.read_events`: each
    checked against its kind's declared fields) and a note on what could not be read ('' when all was)."""
    read = read_trajectory_of(record)
    if read is None:
        return [], "no trajectory file recorded for this trial"
    if isinstance(read, str):
        return [], read
    return read.events, read.note()


def read_trajectory_of(record: TrialRecord) -> TrajectoryRead | str | None:
    """A trial's trajectory as read: its events and skipped lines; None when it has no file, a sentence
    when the file cannot be read at all."""
    try:
        if not record.trajectory or not Path(record.trajectory).is_file():
            return None
        return read_events(record.trajectory)   # bounded: depth, size, the integer digit limit
    except (OSError, ValueError) as exc:      # a path too long for the system is an OSError too
        return f"the trajectory file cannot be read: {exc}"


def _cells(records: list[TrialRecord]) -> list[tuple[tuple, list[TrialRecord]]]:
    """Counted records by (entry, task): entries as the tables label and order them (:func:`entry_label`, so
    two configurations of a planner in one report stay apart), tasks by name."""
    counted = counted_records(records)
    label = entry_label(records)    # from every record, as the tables label them
    cells: dict[tuple, list[TrialRecord]] = {}
    for r in counted:
        cells.setdefault((label(r), r.task), []).append(r)
    order = {name: i for i, name in enumerate(entry_order(counted, label))}
    return sorted(cells.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))


# ---- built-in sections ---------------------------------------------------------------------------------
def _summary(ctx: SectionContext) -> list[Block]:
    """The figures a reader wants first, one row per entry: how many trials ended in a valid submission and
    how far they got (the stage funnel in two numbers), the normalized score, the compute spent."""
    from mltb_core.analysis.results import quality_value
    from mltb_core.stages.specs import REWARD_STAGES, stage_index

    counted = counted_records(ctx.records)
    if not counted:
        return []
    label = entry_label(ctx.records)
    modeling, last = stage_index("modeling"), len(REWARD_STAGES)
    rows = []
    for entry in entry_order(counted, label):
        mine = [r for r in counted if label(r) == entry]
        stages = [r.stage_reached for r in mine]
        quality = [q for q in map(quality_value, mine) if q is not None]
        rows.append([entry, str(len({r.task for r in mine})), str(len(mine)),
                     f"{sum(r.valid for r in mine)}/{len(mine)}",
                     f"{statistics.median(stages):g} ({min(stages)}–{max(stages)})",
                     f"{sum(s >= modeling for s in stages)}/{len(mine)}",
                     f"{statistics.median(quality):.2f}" if quality else "–",
                     f"{statistics.fmean(r.llm_calls for r in mine):.1f}"])
    infra = len(ctx.records) - len(counted)
    tasks, models = sorted({r.task for r in counted}), sorted({r.model for r in counted})
    lead = (f"{len(counted)} counted trial(s)" + (f" ({infra} infrastructure error(s) apart, never counted)" if infra
                                                 else "")
            + f" on {len(tasks)} task(s)" + (f" ({', '.join(markdown(t) for t in tasks)})" if len(tasks) <= 6 else "")
            + f" with model(s) {', '.join(markdown(m) for m in models)}.")
    return [lead, Table("summary", "Summary", ["planner", "tasks", "trials", "valid submissions",
                                               "stage reached (median, min–max)",
                                               f"fitted a model (stage ≥ {modeling})", "median normalized score",
                                               "LLM calls per trial (mean)"], rows, untrusted=(0,),
                        notes=[f"every counted trial of a planner pooled over its tasks, so a task with more trials "
                               f"weighs more; stages 1–{last} as in the stage funnel; point figures only: the "
                               "tables below give each task's figures and their intervals",
                               QUALITY_FLOOR_NOTE])]


def _tables(ctx: SectionContext) -> list[Block]:
    return list(build_tables(ctx.records))


def _ranking(ctx: SectionContext) -> list[Block]:
    from mltb_core.analysis.ranking import ranking_markdown

    counted = counted_records(ctx.records)
    label = entry_label(ctx.records)
    if len(set(map(label, counted))) < 2:
        return []
    link = f"{ctx.markdown_path.stem}-cd.svg" if ctx.markdown_path is not None else None
    text, figure = ranking_markdown(counted, key=label, seed=ctx.seed, cd_link=link, interim=ctx.interim)
    if figure is not None and link is not None:
        ctx.figures[link] = figure
    return [text.split("\n", 2)[2].strip()]     # its own "## Ranking across tasks" heading is the section's


def _run(ctx: SectionContext) -> list[Block]:
    records = ctx.records
    counted = counted_records(records)
    tokens_in = sum(r.tokens_in for r in records)
    cached = sum(r.tokens_in_cached for r in records)
    share = f" ({cached / tokens_in:.0%})" if tokens_in else ""
    return [f"- records: {len(records)} ({len(counted)} counted, {len(records) - len(counted)} infrastructure "
            f"error(s) apart); prompt tokens {tokens_in:,}, of which {cached:,} served from the server's prompt "
            f"cache{share}\n- trials run by: {trial_code(records, markdown_label) or 'none yet'} (each record's `code`)"]


def _models(ctx: SectionContext) -> list[Block]:
    lines = [f"- {_model_facts(model)}" for model in sorted({r.model for r in ctx.records})]
    return ["\n".join(lines)] if lines else []


def _model_facts(model: str) -> str:
    """The model string, and for a local model the file it names with its size and SHA-256 (pinned for a
    named model; a file given by path is described by its record alone)."""
    from mltb_core.llm.backends import parse_model

    try:
        ref = parse_model(model)
    except ValueError:
        return f"`{markdown(model)}` (no installed backend reads it)"
    facts = ref.describe()
    if facts is None:
        return f"`{markdown(model)}`" + (f" {SYNTHETIC_LABEL}" if ref.synthetic else "")
    return f"`{markdown(model)}` = {facts}"


def _loads(records: list[TrialRecord]) -> list[float]:
    return [r.load_per_core for r in records if r.load_per_core is not None]   # finite: records refuse others


def _load(records: list[TrialRecord]) -> str:
    """The trials' mean machine load per core (provenance.LoadMeter): median and maximum over the trials
    that recorded it."""
    loads = _loads(records)
    if not loads:
        return NOT_RECORDED
    return f"{statistics.median(loads):.2f}, {max(loads):.2f}" + ("" if len(loads) == len(records)
                                                                  else f" ({len(loads)} of {len(records)})")


def _load_table(name: str, title: str, columns: list[str], rows: list[list[str]], notes: list[str],
                records: list[TrialRecord], untrusted: tuple[int, ...]) -> Table:
    """A table whose last column is :func:`_load`, with :data:`LOAD_NOTE`; without that column and note when
    no counted trial recorded its machine's load (records written before mltb measured it)."""
    if _loads(counted_records(records)):
        return Table(name, title, columns, rows, notes=[*notes, LOAD_NOTE], untrusted=untrusted)
    return Table(name, title, columns[:-1], [row[:-1] for row in rows], notes=notes, untrusted=untrusted)


# How to read a record's load_per_core (provenance.LoadMeter); the docs point here.
LOAD_NOTE = ("load per core: each trial's mean of the machine's 1-minute load average per core, sampled at its "
             f"start, every {LOAD_SAMPLE_SECONDS:g} s and its end (median and maximum over the trials). The load "
             "counts the threads running or waiting for a core or for I/O, the trial's own model server and tool "
             "worker included, and a 1-minute average lags by about a minute. Well above what the run's own "
             "workers make (about 1 per core with one llama.cpp thread per core), the trials shared the cores "
             "with other work: their seconds stretched, and a stop by the time limit (--max-seconds) may be the "
             "machine's, not the planner's. A mean hides a shorter overload within a long trial")


def _seconds(ctx: SectionContext) -> list[Block]:
    rows = []
    for (planner, task), cell in _cells(ctx.records):
        wall = [r.wall_seconds for r in cell]
        rows.append([planner, task, str(len(cell)),
                     f"{statistics.median(wall):.0f} ({min(wall):.0f}–{max(wall):.0f})",
                     f"{statistics.median(r.llm_seconds for r in cell):.0f}",
                     f"{statistics.median(r.llm_calls for r in cell):g}",
                     f"{statistics.median(r.stage_reached for r in cell):g}, {max(r.stage_reached for r in cell)}",
                     _load(cell)])
    if not rows:
        return []
    return [_load_table("seconds", "Seconds per trial",
                        ["planner", "task", "n", "wall s per trial (median, min–max)", "LLM s per trial", "LLM calls",
                         "stage reached (median, max)", "mean load per core (median, max)"], rows,
                        ["counted trials only; wall seconds depend on the machine (see Machine) and its load"],
                        ctx.records, untrusted=(0,))]


def _stop_kinds(ctx: SectionContext) -> list[Block]:
    from mltb_core.stages.specs import REWARD_STAGES
    from mltb_core.bench.stops import STOP_KIND_MEANINGS

    names = {s.number: s.name for s in REWARD_STAGES}    # mltb's names, never the record's stage_name
    rows = []
    for (planner, task), cell in _cells(ctx.records):
        stops: dict[tuple[bool, int, str], list[TrialRecord]] = defaultdict(list)
        for r in cell:
            stops[(r.valid, r.stage_reached, str(r.stop_kind))].append(r)
        for (valid, stage, kind), ended in sorted(stops.items(), key=lambda kv: (-kv[0][1], kv[0][2])):
            reached = f"{stage} {names[stage]}" if stage in names else str(stage)
            blocked = ("– (valid submission)" if valid else
                       f"{stage + 1} {names[stage + 1]}" if stage + 1 in names else "–")
            rows.append([planner, task, str(len(ended)), reached, blocked, kind, _load(ended)])
    if not rows:
        return []
    used = sorted({row[5] for row in rows})
    meanings = "; ".join(f"{k}: {STOP_KIND_MEANINGS[k]}" for k in used if k in STOP_KIND_MEANINGS)
    return [_load_table("stop_kinds", "Where trials ended",
                        ["planner", "task", "trials", "stage reached", "not passed",
                         "why the search ended (stop kind)", "mean load per core (median, max)"], rows,
                        [f"stop kinds (the planner's, mltb_core/bench/stops.py): {meanings}",
                         "records written before stop kinds (schema 1) got theirs from their stop reason when read"],
                        ctx.records, untrusted=(0, 5))]


def _stage_comparison(ctx: SectionContext) -> list[Block]:
    from mltb_core.analysis.ranking import block_task, friedman_text, stage_blocks
    from mltb_core.analysis.stats import clustered_rate_interval, friedman_test
    from mltb_core.stages.specs import stage_index

    counted = counted_records(ctx.records)
    label = entry_label(ctx.records)
    planners = entry_order(counted, label)
    if len(planners) < 2:
        return []
    modeling = stage_index("modeling")
    rows = []
    for planner in planners:
        mine = [r for r in counted if label(r) == planner]
        stages = [r.stage_reached for r in mine]
        fitted = sum(stage >= modeling for stage in stages)
        # trials of one task are a cluster: the tasks, not the trials, are the units (Korn-Graubard)
        per_task = [(sum(r.stage_reached >= modeling for r in mine if r.task == task),
                     sum(r.task == task for r in mine)) for task in sorted({r.task for r in mine})]
        ci = clustered_rate_interval(per_task)
        rows.append([planner, str(len(stages)), f"{statistics.median(stages):g} ({min(stages)}–{max(stages)})",
                     f"{fitted}/{len(stages)} {ci.bounds(2)}"])
    table = Table("stage_comparison", "Stage reached per planner",
                  ["planner", "trials", "stage reached (median, min–max)",
                   f"fitted a model (stage ≥ {modeling}) [≥ 95 % CI, conservative]"], rows, untrusted=(0,),
                  notes=["stage and rate: over the planner's trials pooled, so a task with more trials weighs more "
                         "(the tasks weigh alike once every cell has its planned trials)",
                         "interval: cluster-aware exact interval (Korn-Graubard) with the tasks as units, since trials of "
                         "one task share its data; at a rate of 0 or 1, exact Clopper-Pearson over the tasks (all "
                         "failed, or all succeeded), and over the trials when there is one task; with 3 tasks of 3 "
                         "trials it covered 0.976–1.000 in every population of task rates measured, and never less "
                         "than 0.975 (docs/statistics.md): conservative, since 3 tasks cannot show how much they "
                         "differ; each planner's interval holds on its own, not jointly with the others'"])
    blocks = stage_blocks(counted, label)
    result = friedman_test(blocks, ordinal=True)
    blocks_per_task = Counter(block_task(block) for block in result.tasks)
    prose = "\n".join([
        *friedman_text(result, {p: markdown_label(p) for p in planners}, blocks="blocks (task, trial seed)",
                       measure="the stage each trial reached, ties sharing a rank", interim=ctx.interim), "",
        f"- Blocks: {len(result.tasks)} of the {len(blocks)} (task, trial) pairs recorded have a trial of every "
        "planner; only those enter the test ("
        + ", ".join(f"{task} {count}" for task, count in sorted(blocks_per_task.items()))
        + "; a task with more blocks weighs more). Every trial of a task uses the same data split, and a trial's "
        "seed depends on its index alone, so the planners of a block also share the sampler's seed stream.",
        "- What it covers: these tasks and this model; with so few tasks it says nothing about tasks in general. "
        "The stage is ordinal (stage 9 is not 'three times' stage 3), so only ranks within a block count."])
    return [table, prose]


def _sensitivity(ctx: SectionContext) -> list[Block]:
    """A sensitivity run (``--sensitivity``: one run directory holding several models on the same items, e.g.
    ``sim:0.5`` and ``sim:0.5:neutral`` at one commit): each planner's figures under each model side by side,
    over the (task, trial) items every model holds, with each model's ordering (mean rank of the stage reached)."""
    counted = counted_records(ctx.sensitivity)
    models = sorted({r.model for r in counted}, key=lambda m: (len(m), m))    # sim:0.5 before sim:0.5:neutral
    if len(models) < 2:
        return [f"The sensitivity run holds {len(models)} model(s); it needs two to compare."] if counted else []
    items = set.intersection(*({(r.task, r.trial) for r in counted if r.model == m} for m in models))
    label = _model_free_label(ctx.sensitivity)
    planners = entry_order(counted, label)
    runs = [_ranked_under(model, [r for r in counted if r.model == model and (r.task, r.trial) in items],
                          planners, label) for model in models]
    rows = [_sensitivity_row(planner, runs, label) for planner in runs[0].order]
    headers = ["planner"] + [f"{model}: {what}" for model in models
                             for what in ("valid/trials", "mean normalized", "mean stage rank (place)")]
    return [Table("sensitivity", "Each planner under each model of the sensitivity run", headers, rows,
                  notes=_sensitivity_notes(ctx, models, len(items)),
                  untrusted_text=(*models, *{r.code for r in ctx.sensitivity if r.code})),
            _sensitivity_prose(runs)]


@dataclass
class _RankedRun:
    """One model's trials of a sensitivity run on the shared items, their Friedman test over the stage reached,
    and the planners in that model's order (mean rank, ties in entry order)."""
    model: str
    records: list[TrialRecord]
    result: Any
    order: list[str]


def _model_free_label(records: list[TrialRecord]) -> Callable[[TrialRecord], str]:
    """A planner configuration's label, alike under every model (the hash has no model): decided over all models."""
    labels = variant_labels(dataclasses.replace(r, model="") for r in records)

    def label(r: TrialRecord) -> str:
        return labels[("", r.planner, r.config_hash)]
    return label


def _ranked_under(model: str, records: list[TrialRecord], planners: list[str],
                  label: Callable[[TrialRecord], str]) -> _RankedRun:
    from mltb_core.analysis.ranking import stage_blocks
    from mltb_core.analysis.stats import friedman_test

    result = friedman_test(stage_blocks(records, label), ordinal=True)
    order = sorted(planners, key=lambda p: (result.mean_ranks.get(p, float("inf")), planners.index(p)))
    return _RankedRun(model, records, result, order)


def _sensitivity_row(planner: str, runs: list[_RankedRun], label: Callable[[TrialRecord], str]) -> list[str]:
    """The planner's valid/trials, mean normalized score and mean stage rank (place) under each model."""
    from mltb_core.analysis.results import quality_value

    row = [planner]
    for run in runs:
        mine = [r for r in run.records if label(r) == planner]
        quality = [q for q in map(quality_value, mine) if q is not None]
        rank = run.result.mean_ranks.get(planner)
        row += [f"{sum(r.valid for r in mine)}/{len(mine)}",
                f"{sum(quality) / len(quality):.2f}" if quality else "–",
                f"{rank:.2f} ({run.order.index(planner) + 1})" if rank is not None else "–"]
    return row


def _sensitivity_notes(ctx: SectionContext, models: list[str], items: int) -> list[str]:
    from mltb_core.analysis.tables import policy_assumptions

    notes = [f"the sensitivity run: {', '.join(models)} on the same {items} (task, trial) items (a trial's seed "
             "depends on its index: the same split and seed stream under every model), trials run by "
             f"{trial_code(ctx.sensitivity)}; rows in the first model's order",
             "mean stage rank: the planner's mean rank (1 = best, ties sharing a rank) of the stage each trial "
             "reached, within blocks of one task and one trial; place: its position in that model's ordering"]
    return notes + [note for model in models if (note := policy_assumptions(model))]


def _sensitivity_prose(runs: list[_RankedRun]) -> str:
    """Each model's Friedman test over the stage reached (a model whose test could not run says nothing)."""
    from mltb_core.analysis.ranking import friedman_text

    prose = []
    for run in runs:
        if run.result.statistic is not None:
            prose += [f"**{markdown(run.model)}.** " + " ".join(friedman_text(run.result, {},
                                                                             blocks="blocks (task, trial seed)",
                                                                             measure="the stage each trial reached")),
                      ""]
    return "\n".join(prose).strip()


def _machine(ctx: SectionContext) -> list[Block]:
    counts = machine_counts(ctx.records)
    if not counts:
        return []
    details: dict[str, dict] = {}
    for record in ctx.records:
        details.setdefault(machine_label(record.machine), record.machine or {})
    rows = [[label, str(n), details[label].get("system") or "–", details[label].get("python") or "–",
             details[label].get("llama_cpp") or "–"] for label, n in counts.most_common()]
    notes = []
    if len(counts) > 1:
        notes.append(f"WARNING: these figures mix {len(counts)} machines"
                     + (" (some records do not say which)" if NOT_RECORDED in counts else "")
                     + ": seconds, and any time budget's effect, are not comparable across them")
    return [Table("machine", "Machine", ["machine (CPU, cores, memory)", "trials", "system", "Python",
                                         "llama.cpp (llama-cpp-python)"], rows, notes=notes, untrusted=(0, 2, 3, 4))]


# reStructuredText a docstring may hold, as the report's Markdown writes it: a role (:data:`X`) and a
# literal (``x``) become a code span
_REST_ROLE = re.compile(r":[a-z]{1,12}:`([^`\n]{1,200})`")
_REST_LITERAL = re.compile(r"``([^`\n]{1,200})``")


def rest_to_markdown(text: str) -> str:
    """mltb's own reST docstring text as the report's Markdown (roles and literals as code spans)."""
    return _REST_LITERAL.sub(r"`\1`", _REST_ROLE.sub(r"`\1`", text))


def _synthetic_policy(ctx: SectionContext) -> list[Block]:
    from mltb_core.llm import sim

    if not any(r.synthetic for r in ctx.records):
        return []
    match = re.search(r"Assumptions[^\n]*\n\n(.*)", sim.__doc__ or "", re.S)
    if not match:
        raise ValueError("mltb_core/llm/sim.py's docstring has no 'Assumptions' section")
    return ["**The `sim` models are a synthetic policy, not an LLM.** Their figures show how the planners use a "
            "fixed, planner-agnostic policy under the assumptions below; they say nothing about how they use a "
            "real model. The assumptions, as the docstring of `mltb_core/llm/sim.py` states them:",
            rest_to_markdown(match.group(1).strip())]


def _trajectories(ctx: SectionContext) -> list[Block]:
    from mltb_core.analysis.findings import trajectory_findings

    if not any(r.trajectory for r in ctx.records):
        return []
    return ["\n".join(trajectory_findings(ctx.records))]


DEFAULT_SECTIONS = ("summary", "synthetic_policy", "run", "models", "tables", "ranking", "seconds", "stop_kinds",
                    "stage_comparison", "sensitivity", "trajectories", "machine")
for _section in (Section("summary", "Summary", _summary),
                 Section("synthetic_policy", "What the synthetic policy assumes", _synthetic_policy),
                 Section("run", "Run", _run),
                 Section("models", "Models", _models),
                 Section("tables", "Tables", _tables),
                 Section("ranking", "Ranking across tasks", _ranking),
                 Section("seconds", "Seconds per trial", _seconds),
                 Section("stop_kinds", "Where trials ended", _stop_kinds),
                 Section("stage_comparison", "Do the planners differ in the stage they reach?", _stage_comparison),
                 Section("trajectories", "What the trajectories show", _trajectories),
                 Section("sensitivity", "Sensitivity: the ordering without the policy's planner-input effects",
                         _sensitivity),
                 Section("machine", "Machine", _machine)):
    register_section(_section)

