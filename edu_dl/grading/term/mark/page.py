"""The page of ``edu-dl mark``: HTML, a stylesheet and a script, as text served by ``app``.

The script builds every element with ``textContent`` (never ``innerHTML``): a student's answer,
name or comment is shown as text, whatever it holds. An answer rendered (Markdown, highlighted
code, plots) comes from the server's sanitizer into a sandboxed frame of its own. The
Content-Security-Policy the handlers send lets the page run only this script, from this server.
"""

from __future__ import annotations

HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>edu-dl mark</title>
<link rel="stylesheet" href="{base}/mark.css">
<script src="{base}/mark.js" defer></script>
</head><body data-base="{base}" data-xsrf="{xsrf}">
<header><b>edu-dl mark</b> <span id="progress"></span>
<span class="keys">keys: j / k (or n / p) next / previous, u next ungraded, g points,
s save, Esc leaves a field</span></header>
<main>
<nav><table id="rows"><thead><tr><th>#</th><th>student</th><th>exercise</th><th>cell</th>
<th>max</th><th>status</th><th>points</th></tr></thead><tbody></tbody></table></nav>
<section id="detail"><p>Choose a row.</p></section>
</main>
</body></html>
"""

CSS = """body{font-family:system-ui,sans-serif;margin:0}header{padding:.5em 1em;
background:#234;color:#fff}header .keys{float:right;opacity:.8}main{display:flex;
height:calc(100vh - 2.5em)}nav{width:38%;overflow:auto;border-right:1px solid #ccc}
table{border-collapse:collapse;width:100%}td,th{padding:.2em .4em;border-bottom:1px solid #eee;
text-align:left;font-size:90%}tr.current{background:#dde8ff}tr.graded td.status{color:#270}
section{flex:1;overflow:auto;padding:0 1em}pre{white-space:pre-wrap;background:#f6f6f6;
padding:.5em;border:1px solid #ddd}.error{color:#b00;font-weight:bold}.saved{color:#270}
.columns{display:flex;gap:1em}.columns>div{flex:1;min-width:0}
iframe.answer{width:100%;height:45vh;border:1px solid #ddd}
"""

JS = r"""'use strict';
const base = document.body.dataset.base;
const xsrf = document.body.dataset.xsrf;
let rows = [];
let current = -1;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

async function api(path, options) {
  const reply = await fetch(base + '/api/' + path, Object.assign(
    {credentials: 'same-origin', headers: {'X-XSRFToken': xsrf,
                                           'Content-Type': 'application/json'}}, options || {}));
  const body = await reply.json();
  if (!reply.ok) throw new Error(body.error || ('the server said ' + reply.status));
  return body;
}

function shown(points) { return points === null ? '' : String(points); }

function drawList() {
  const body = document.querySelector('#rows tbody');
  body.replaceChildren();
  for (const row of rows) {
    const tr = el('tr');
    tr.dataset.index = row.index;
    if (row.index === current) tr.classList.add('current');
    if (row.graded) tr.classList.add('graded');
    for (const [value, cls] of [[row.index + 1], [row.student], [row.exercise], [row.cell],
                                [row.max_points], [row.status, 'status'],
                                [shown(row.points)]]) tr.append(el('td', value, cls));
    tr.addEventListener('click', () => select(row.index));
    body.append(tr);
  }
  const done = rows.filter(r => r.graded && !r.autograded).length;
  const todo = rows.filter(r => !r.autograded).length;
  document.getElementById('progress').textContent = done + ' of ' + todo + ' graded by hand';
}

async function refresh() { rows = await api('rows'); drawList(); }

async function select(index) {
  if (index < 0 || index >= rows.length) return;
  current = index;
  drawList();
  const tr = document.querySelector('#rows tr[data-index="' + index + '"]');
  if (tr) tr.scrollIntoView({block: 'nearest'});
  const row = await api('rows/' + index);
  const detail = document.getElementById('detail');
  detail.replaceChildren();
  detail.dataset.index = index;
  detail.append(el('h2', row.student + ' \u2014 ' + row.exercise + ' / ' + row.cell));
  detail.append(el('p', 'status: ' + row.status + (row.autograded ? ' (the grader gave ' +
    row.grader_points + ' of ' + row.max_points + ', ' + row.grader_status + ')' : '')));
  if (row.note) detail.append(el('p', row.note, 'error'));
  if (row.message) detail.append(el('p', 'grader: ' + row.message));
  const columns = el('div', null, 'columns');
  const answer = el('div');
  answer.append(el('h3', 'answer'));
  const text = el('pre', row.answer || '(empty)', 'answer');
  if (row.rendered) {  // as its feedback page shows it, in a frame that runs nothing
    const frame = el('iframe', null, 'answer');
    frame.setAttribute('sandbox', '');
    frame.title = 'the answer as its feedback page shows it';
    frame.src = base + '/answer/' + index;
    const source = el('details');
    source.append(el('summary', 'the answer as text'), text);
    answer.append(frame, source);
  } else {
    answer.append(text);
  }
  if (row.has_page) {
    const link = el('a', 'the feedback page at this cell (plots and outputs)');
    link.href = base + '/page/' + index + '#' + row.anchor;
    link.target = '_blank';
    link.rel = 'noopener noreferrer';
    answer.append(link);
  } else {
    answer.append(el('p', 'no feedback page for this notebook'));
  }
  const solution = el('div');
  if (row.rubric.length) {  // the source cell's rubric: what the points are for
    const rubric = el('ul', null, 'rubric');
    for (const c of row.rubric) {
      rubric.append(el('li', c.points + (c.points === 1 ? ' point: ' : ' points: ') +
                        c.criterion));
    }
    solution.append(el('h3', 'rubric'), rubric);
  } else if (row.rubric_note) {
    solution.append(el('p', row.rubric_note, 'error'));
  }
  solution.append(el('h3', 'solution'),
                  row.solution === null ? el('p', row.solution_note)
                                        : el('pre', row.solution, 'solution'));
  columns.append(answer, solution);
  detail.append(columns);
  const form = el('form');
  form.id = 'mark';
  form.noValidate = true;  // the server checks the points, and says why it refuses them
  const points = el('input');
  Object.assign(points, {type: 'number', id: 'points', name: 'points', min: 0,
                         max: row.max_points, step: 'any', value: shown(row.points)});
  const comment = el('textarea');
  Object.assign(comment, {id: 'comment', name: 'comment', rows: 3, cols: 60});
  comment.value = row.comment;
  const save = el('button', 'Save');
  save.type = 'submit';
  save.id = 'save';
  const said = el('p', '', 'said');
  said.id = 'said';
  const label = el('label', 'points (0..' + row.max_points + ') ');
  label.append(points);
  const why = el('label', row.autograded ? ' reason (required for an override) '
                                         : ' comment ');
  why.append(comment);
  form.append(label, why, save, said);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      await api('rows/' + index, {method: 'POST', body: JSON.stringify(
        {points: points.value, comment: comment.value})});
      said.className = 'saved';
      said.textContent = 'saved';
      await refresh();
    } catch (error) {
      said.className = 'error';
      said.textContent = error.message;
    }
  });
  detail.append(form);
}

function nextUngraded() {
  for (let step = 1; step <= rows.length; step++) {
    const i = (current + step) % rows.length;
    if (!rows[i].graded) return select(i);
  }
}

document.addEventListener('keydown', (event) => {
  const typing = ['INPUT', 'TEXTAREA'].includes(document.activeElement.tagName);
  if (typing) {
    if (event.key === 'Escape') document.activeElement.blur();
    return;
  }
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const next = () => select(Math.min(current + 1, rows.length - 1));
  const previous = () => select(Math.max(current - 1, 0));
  const keys = {j: next, n: next, k: previous, p: previous, u: nextUngraded,
                g: () => document.getElementById('points')?.focus(),
                s: () => document.getElementById('mark')?.requestSubmit()};
  const action = keys[event.key];
  if (action) { event.preventDefault(); action(); }
});

refresh().then(() => { if (rows.length) select(0); }).catch((error) => {
  document.getElementById('detail').replaceChildren(el('p', error.message, 'error'));
});
"""
