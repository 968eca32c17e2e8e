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
    n.feedback.forEach(f => d.appendChild(el('pre', '', 'stage ' + fmt(f.stage, 0) + (f.passed && f.passed.length ? ' · passed ' + f.passed.join(', ') : '') + (f.predicted ? ' · test rows predicted' : '') + (f.feedback ? '\n' + f.feedback : '')))); }
  if (n.proposals.length) { d.appendChild(el('h4', '', 'Model replies asked from this node'));
    n.proposals.forEach(p => p.texts.forEach(t => d.appendChild(el('pre', '', (p.purpose ? '[' + p.purpose + '] ' : '') + t)))); }
}
document.getElementById('f-err').onchange = render; document.getElementById('f-best').onchange = render;
document.getElementById('tv-expand').onclick = () => { collapsed.clear(); render(); };
document.getElementById('tv-collapse').onclick = () => { DATA.nodes.forEach(n => { if (kids.get(n.id).length && n.id !== 0) collapsed.add(n.id); }); render(); };
render(); detail(DATA.best_path.length ? DATA.best_path[DATA.best_path.length - 1] : 0);
selected = DATA.best_path.length ? DATA.best_path[DATA.best_path.length - 1] : 0; render();
})();
