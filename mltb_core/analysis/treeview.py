"""The search-tree viewer of one trial: a self-contained HTML page (no network) built from its trajectory.

:func:`tree_from_steps` turns trajectory lines (see mltb_core.planners.trajectory) into a tree: one node
per tool call (or reply without one) with its call, arguments, observation, stage feedback and the
search statistics the run ended with (visits, mean value, reward, stage: the ``tree`` list of the
``search_summary`` line), the best path, and for Hierarchical MCTS the subtask each node was created
in (``subtask_start`` lines). :func:`tree_page` renders it: an indented, collapsible tree (an only
child stays at its parent's indentation, so a ReAct chain reads as a list and only real branching
indents), the best path highlighted, filters (errors only, best path only) and a detail panel that
shows a clicked node's call, arguments, observation and feedback as text. Numbers are rounded on
screen; the embedded JSON keeps them exact.
"""
from __future__ import annotations

import html
import json
from typing import Any, Iterable

__all__ = ["tree_from_steps", "tree_page", "TREE_JS", "TREE_CSS"]

ROOT_ID = 0


def _node(nodes: dict[int, dict], node_id: int) -> dict:
    return nodes.setdefault(node_id, {"id": node_id, "parent": None, "tool": None, "args": None, "ok": None,
                                      "observation": "", "observation_length": None, "seconds": None,
                                      "feedback": [], "proposals": [], "visits": None, "value": None,
                                      "reward": None, "stage": None, "subtask": None, "dead": None,
                                      "kind": "root" if node_id == ROOT_ID else "call"})


def tree_from_steps(steps: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The viewer's data: ``nodes`` (sorted by id), ``best_path``, ``summary``, ``config``, ``errors``,
    ``subtasks`` (number → name). Unknown step types are ignored; missing fields stay None."""
    nodes: dict[int, dict] = {}
    _node(nodes, ROOT_ID)
    subtask: int | None = None
    subtasks: dict[int, str] = {}
    summary: dict[str, Any] = {}
    config: dict[str, Any] = {}
    errors: list[str] = []
    for step in steps:
        kind = step.get("step_type")
        node_id = step.get("node_id")
        if kind == "trial_start":
            config = step.get("config") or {}
        elif kind == "subtask_start":
            subtask = step.get("stage")
            subtasks[subtask] = str(step.get("name", ""))
        elif kind in ("tool_execution_initiation", "invalid_reply") and isinstance(node_id, int):
            node = _node(nodes, node_id)
            node["parent"] = step.get("parent_id", ROOT_ID)
            node["subtask"] = subtask
            if kind == "invalid_reply":
                node.update(kind="no_call", ok=False, tool="(no tool call)",
                            observation=str(step.get("content_preview", "")))
            else:
                call = (step.get("tools_to_execute") or [{}])[0]
                node["tool"] = call.get("tool_name")
                node["args"] = call.get("tool_args")
        elif kind == "tool_execution_completion" and isinstance(node_id, int):
            node = _node(nodes, node_id)
            result = (step.get("tool_results") or [{}])[0]
            node["ok"] = result.get("ok")
            node["observation"] = str(result.get("content_preview", ""))
            node["observation_length"] = result.get("content_length")
            node["seconds"] = step.get("seconds")
        elif kind == "reward_feedback" and isinstance(node_id, int):
            _node(nodes, node_id)["feedback"].append({"stage": step.get("stage"), "passed": step.get("passed"),
                                                      "feedback": step.get("feedback")})
        elif kind == "llm_call" and isinstance(node_id, int):
            texts = [c.get("text", "") for c in step.get("candidates") or []] or [step.get("text", "")]
            _node(nodes, node_id)["proposals"].append({"purpose": step.get("purpose"),
                                                       "texts": [t for t in texts if t]})
        elif kind == "search_summary":
            summary = {k: v for k, v in step.items() if k not in ("tree", "step_number", "timestamp", "step_type")}
            for stats in step.get("tree") or []:
                if isinstance(stats, dict) and isinstance(stats.get("id"), int):
                    node = _node(nodes, stats["id"])
                    for key in ("visits", "value", "reward", "stage", "dead"):
                        node[key] = stats.get(key)
                    if stats.get("parent") is not None:
                        node["parent"] = stats["parent"]
        elif kind in ("infra_error", "solver_died"):
            errors.append(str(step.get("error") or step.get("reason") or kind))
    for node in nodes.values():
        if node["id"] != ROOT_ID and node["parent"] not in nodes:
            node["parent"] = ROOT_ID  # a node whose parent line is missing still shows, under the root
    best = [n for n in summary.get("best_path") or [] if n in nodes]
    return {"nodes": [nodes[k] for k in sorted(nodes)], "best_path": best, "summary": summary,
            "config": config, "errors": errors, "subtasks": {str(k): v for k, v in subtasks.items()}}


TREE_CSS = """
.tv{display:flex;gap:14px;align-items:flex-start}.tv-tree{flex:1 1 58%;min-width:0;font-size:13px}
.tv-detail{flex:1 1 42%;position:sticky;top:8px;max-height:calc(100vh - 16px);overflow:auto;
 border:1px solid #ccc;border-radius:4px;padding:8px 12px;background:#fcfcfc;font-size:13px}
.tv-row{display:flex;align-items:center;gap:6px;padding:1px 4px;white-space:nowrap;cursor:pointer;border-radius:3px}
.tv-row:hover{background:#eef4ff}.tv-row.sel{background:#dbe8ff}.tv-row.best{background:#e3f6e8;font-weight:600}
.tv-row.best.sel{background:#c9ecd3}.tv-tog{width:14px;color:#666;text-align:center;flex:none}
.tv-id{color:#888;width:38px;text-align:right;flex:none}.tv-tool{overflow:hidden;text-overflow:ellipsis;max-width:320px}
.tv-st{font-size:11px;padding:0 5px;border-radius:8px;flex:none}.ok{background:#d9f2df;color:#1d6b32}
.err{background:#fadbd8;color:#922b21}.none{background:#eee;color:#666}
.tv-num{color:#555;font-size:11px;flex:none;font-variant-numeric:tabular-nums}
.tv-group{margin:6px 0 2px;font-size:12px;color:#5b3c88;font-weight:600}
.tv-bar{margin:6px 0 10px;font-size:13px}.tv-bar label{margin-right:14px}
.tv-detail pre{white-space:pre-wrap;word-break:break-word;background:#f3f3f3;padding:6px;margin:4px 0}
.tv-detail h3{margin:4px 0 6px;font-size:15px}.tv-legend{font-size:12px;color:#555}
"""

# Rows are rebuilt from DATA on every filter or collapse change (a 200-node tree is instant).
TREE_JS = r"""
(function(){
const DATA = JSON.parse(document.getElementById('tree-data').textContent);
const byId = new Map(DATA.nodes.map(n => [n.id, n]));
const kids = new Map(DATA.nodes.map(n => [n.id, []]));
DATA.nodes.forEach(n => { if (n.id !== 0 && kids.has(n.parent)) kids.get(n.parent).push(n.id); });
const best = new Set(DATA.best_path); if (DATA.best_path.length) best.add(0);
const collapsed = new Set(); let selected = null;
// ReAct keeps no visit counts or values: show them only when the search kept some
const hasStats = DATA.nodes.some(n => n.visits);
const fmt = (v, d) => (v === null || v === undefined) ? '–' : (Number.isInteger(v) ? String(v) : Number(v).toFixed(d));
const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e; };
function status(n){ if (n.id === 0) return ['root', 'none']; if (n.ok === true) return ['ok', 'ok'];
  if (n.ok === false) return [n.kind === 'no_call' ? 'no call' : 'error', 'err']; return ['?', 'none']; }
function hasError(id){ const n = byId.get(id); return n.ok === false || kids.get(id).some(hasError); }
function visible(id){ const errOnly = document.getElementById('f-err').checked;
  const bestOnly = document.getElementById('f-best').checked;
  if (bestOnly && !best.has(id)) return false; if (errOnly && !hasError(id)) return false; return true; }
function render(){
  const box = document.getElementById('tv-rows'); box.textContent = '';
  let shown = 0;
  const walk = (id, indent, parentSubtask) => {
    if (!visible(id)) return;
    const n = byId.get(id); shown++;
    if (n.subtask !== null && n.subtask !== parentSubtask) {
      const g = el('div', 'tv-group', 'subtask ' + n.subtask + ' · ' + (DATA.subtasks[n.subtask] || ''));
      g.style.marginLeft = (indent * 16) + 'px'; box.appendChild(g); }
    const row = el('div', 'tv-row' + (best.has(id) ? ' best' : '') + (selected === id ? ' sel' : ''));
    row.dataset.node = id; row.style.marginLeft = (indent * 16) + 'px';
    const ch = kids.get(id);
    row.appendChild(el('span', 'tv-tog', ch.length ? (collapsed.has(id) ? '▸' : '▾') : ''));
    row.appendChild(el('span', 'tv-id', '#' + id));
    const [st, cls] = status(n);
    row.appendChild(el('span', 'tv-tool', n.id === 0 ? 'task (root)' : (n.tool || '?')));
    row.appendChild(el('span', 'tv-st ' + cls, st));
    row.appendChild(el('span', 'tv-num', 'stage ' + fmt(n.stage, 0) + (hasStats ? ' · N ' + fmt(n.visits, 0) +
      ' · V ' + fmt(n.value, 3) + ' · R ' + fmt(n.reward, 3) : '') + (ch.length > 1 ? ' · ' + ch.length + ' children' : '')));
    row.onclick = (ev) => { if (ev.target.classList.contains('tv-tog')) { collapsed.has(id) ? collapsed.delete(id) : collapsed.add(id); }
      else { selected = id; detail(id); } render(); };
    box.appendChild(row);
    if (collapsed.has(id)) return;
    const step = ch.length > 1 ? 1 : 0;
    ch.forEach(c => walk(c, indent + step, n.subtask));
  };
  walk(0, 0, null);
  document.getElementById('tv-count').textContent = shown + ' of ' + DATA.nodes.length + ' nodes shown';
}
function detail(id){
  const n = byId.get(id), d = document.getElementById('tv-detail'); d.textContent = '';
  d.appendChild(el('h3', '', 'Node #' + id + (n.id === 0 ? ' (root)' : ' · ' + (n.tool || '?'))));
  const [st] = status(n);
  d.appendChild(el('div', '', 'status ' + st + ' · stage reached ' + fmt(n.stage, 0) + ' · visits ' + fmt(n.visits, 0) +
    ' · value ' + fmt(n.value, 4) + ' · reward ' + fmt(n.reward, 4) + (n.seconds != null ? ' · ' + fmt(n.seconds, 2) + ' s' : '') +
    (best.has(id) ? ' · on the best path' : '') + (n.subtask !== null ? ' · subtask ' + n.subtask : '')));
  if (n.args !== null) { d.appendChild(el('h4', '', 'Call')); d.appendChild(el('pre', '', JSON.stringify({tool_name: n.tool, tool_args: n.args}, null, 2))); }
  d.appendChild(el('h4', '', 'Observation' + (n.observation_length ? ' (first ' + n.observation.length + ' of ' + n.observation_length + ' characters)' : '')));
  d.appendChild(el('pre', 'tv-obs', n.observation || '(none)'));
  if (n.feedback.length) { d.appendChild(el('h4', '', 'Stage feedback'));
    n.feedback.forEach(f => d.appendChild(el('pre', '', 'stage ' + fmt(f.stage, 0) + (f.passed && f.passed.length ? ' · passed ' + f.passed.join(', ') : '') + (f.feedback ? '\n' + f.feedback : '')))); }
  if (n.proposals.length) { d.appendChild(el('h4', '', 'Model replies asked from this node'));
    n.proposals.forEach(p => p.texts.forEach(t => d.appendChild(el('pre', '', (p.purpose ? '[' + p.purpose + '] ' : '') + t)))); }
}
document.getElementById('f-err').onchange = render; document.getElementById('f-best').onchange = render;
document.getElementById('tv-expand').onclick = () => { collapsed.clear(); render(); };
document.getElementById('tv-collapse').onclick = () => { DATA.nodes.forEach(n => { if (kids.get(n.id).length && n.id !== 0) collapsed.add(n.id); }); render(); };
render(); detail(DATA.best_path.length ? DATA.best_path[DATA.best_path.length - 1] : 0);
selected = DATA.best_path.length ? DATA.best_path[DATA.best_path.length - 1] : 0; render();
})();
"""


def _embed_json(data: Any) -> str:
    """JSON safe inside a <script> element (no '</script>' or '<!--' can close it early)."""
    text = json.dumps(data, default=str, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def tree_page(tree: dict[str, Any]) -> str:
    """The viewer's HTML fragment (controls, rows, detail panel, data and script)."""
    summary = tree["summary"]
    parts = []
    if summary:
        parts.append(f"<p class='tv-legend'>{len(tree['nodes']) - 1} node(s) · best path: "
                     f"{len(tree['best_path'])} step(s) ending at node #{html.escape(str(summary.get('best_node', '–')))}"
                     f" · stopped: {html.escape(str(summary.get('stop_reason', '')))}. "
                     "N = visits, V = mean value, R = reward at the end of the search (– when the planner keeps none); "
                     "green rows are the best path. Click a row for its call and observation, ▸/▾ to collapse.</p>")
    else:
        parts.append("<p class='note'>No search summary in the trajectory (the trial stopped early): node statistics "
                     "are unknown.</p>")
    for error in tree["errors"]:
        parts.append(f"<pre class='note'>{html.escape(error[:2000])}</pre>")
    parts.append("<div class='tv-bar'><label><input type='checkbox' id='f-err'> errors only</label>"
                 "<label><input type='checkbox' id='f-best'> best path only</label>"
                 "<button id='tv-expand'>expand all</button> <button id='tv-collapse'>collapse all</button> "
                 "<span id='tv-count' class='tv-legend'></span></div>"
                 "<div class='tv'><div class='tv-tree' id='tv-rows'></div><div class='tv-detail' id='tv-detail'></div></div>"
                 f"<script type='application/json' id='tree-data'>{_embed_json(tree)}</script>"
                 f"<script>{TREE_JS}</script>")
    return "".join(parts)
