// run.js is a run's timeline, from its event stream: attempts and the
// workers that ran them, each model attempt with its model, auth profile,
// fallback hop and the reason the one before it failed over, retries
// with their reasons, each tool call
// with its arguments, result and duration, compactions, resumed
// attempts, the model and auth profile, tokens and cost. The same stream
// replays a finished run and follows a running one. Consecutive text
// deltas fold into one item, and items are shown a page at a time, so a
// run of thousands of events renders at once and stays responsive.
import { h, fill, route, pretty, clip, ms, usd, num, when, button } from './dom.js';
import { stream, sessionPath } from './api.js';

const perPage = 100;

// Timeline folds a run's events into items and a summary.
class Timeline {
  constructor() {
    this.items = [];
    this.calls = new Map();
    this.last = null; // the item text deltas append to
    this.changed = new Set(); // indexes of items changed since the last draw
    this.sum = { events: 0, attempts: new Set(), workers: new Set(), retries: 0, compactions: 0, tools: 0, toolErrors: 0, resumed: 0, tried: [], status: 'running', start: 0, end: 0, final: null };
  }

  push(item) {
    item.i = this.items.length;
    this.items.push(item);
    this.changed.add(item.i);
    return item;
  }

  add(ev) {
    const e = ev.data && typeof ev.data === 'object' ? ev.data : {};
    const d = e.data && typeof e.data === 'object' ? e.data : {};
    const s = this.sum;
    s.events++;
    if (!s.start && e.ts) s.start = e.ts;
    if (e.attempt) s.attempts.add(e.attempt);
    const base = { stream: ev.event, seq: e.seq, ts: e.ts, attempt: e.attempt };
    switch (ev.event) {
      case 'assistant':
      case 'thinking': {
        const l = this.last;
        if (l && l.stream === ev.event && l.attempt === e.attempt && l.i === this.items.length - 1) {
          l.text = typeof d.text === 'string' ? d.text : l.text + (d.delta || '');
          l.deltas++;
          l.endTs = e.ts;
          this.changed.add(l.i);
        } else {
          this.last = this.push({ ...base, kind: 'text', text: typeof d.text === 'string' ? d.text : d.delta || '', deltas: 1, endTs: e.ts });
        }
        return;
      }
      case 'block':
        return; // the finished blocks repeat the reply's text
      case 'tool': {
        let c = this.calls.get(d.toolCallId);
        if (!c || d.phase === 'start' && c.done) {
          c = this.push({ ...base, kind: 'tool', name: d.name, id: d.toolCallId, args: d.args, updates: 0, done: false });
          this.calls.set(d.toolCallId, c);
          s.tools++;
        }
        if (d.phase === 'start' && d.args !== undefined) c.args = d.args;
        if (d.phase === 'update') { c.updates++; c.partial = d.payload; }
        if (d.phase === 'result') {
          c.done = true;
          c.isError = Boolean(d.isError);
          c.result = d.payload;
          c.endTs = e.ts;
          if (c.isError) s.toolErrors++;
        }
        this.changed.add(c.i);
        break;
      }
      case 'lifecycle':
        if (d.worker) s.workers.add(d.worker);
        if (d.phase === 'retrying') s.retries++;
        if (d.phase === 'resumed') s.resumed += d.steps || 0;
        this.push({ ...base, kind: 'lifecycle', phase: d.phase || '', d });
        break;
      case 'attempt': {
        const ref = [d.provider, d.model].filter(Boolean).join('/') + (d.authProfile ? ' (' + d.authProfile + ')' : '');
        if (ref && !s.tried.includes(ref)) s.tried.push(ref);
        this.push({ ...base, kind: 'attempt', d });
        break;
      }
      case 'compaction':
        if (d.phase === 'start') s.compactions++;
        this.push({ ...base, kind: 'compaction', phase: d.phase || '', d });
        break;
      case 'final':
        s.final = d.result || {};
        s.end = e.ts;
        s.status = s.final.meta?.error ? 'failed' : s.final.meta?.pendingToolCalls?.length ? 'waiting' : 'done';
        this.push({ ...base, kind: 'final', result: s.final });
        break;
      default:
        this.push({ ...base, kind: 'other', raw: e });
    }
    this.last = null;
  }
}

const phaseText = {
  start: (d, it) => 'Attempt ' + (d.attempt || it.attempt || 1) + ' started' + (d.worker ? ' on worker ' + d.worker : ''),
  restart: (d, it) => 'Attempt ' + (it.attempt || '') + ' starts again' + (d.worker ? ' on worker ' + d.worker : '') + ' (the previous attempt was aborted)',
  aborted: (d) => 'Attempt ' + (d.attempt || '') + ' aborted' + (d.error ? ': ' + d.error : ''),
  retrying: (d) => (d.attempt ? 'Retry ' + d.attempt + (d.maxAttempts ? ' of ' + d.maxAttempts : '') : 'Waiting for a cooling auth profile') + ' in ' + ms(d.delayMs || 0) + (d.error ? ' — ' + d.error : ''),
  retry: (d) => (d.attempt ? 'Retry ' + d.attempt + (d.maxAttempts ? ' of ' + d.maxAttempts : '') + ': calling the model again' : 'Calling the model again'),
  resumed: (d) => 'Resumed: replayed ' + (d.steps || 0) + ' recorded steps of an earlier attempt',
  merged: (d) => 'Answered by another run' + (d.text ? ' (' + d.text + ')' : ''),
  steered: (d) => 'Shown to running turn ' + (d.text || ''),
  error: (d) => 'Error: ' + (d.error || ''),
  end: () => 'Turn ended',
};

// extras are the fields an event may carry besides the ones each kind
// shows: the model and auth profile of a fallback hop, say.
const extras = ['model', 'provider', 'authProfile', 'profile', 'from', 'to', 'reason'];

function itemEl(it, t0) {
  const at = h('span', { class: 'at', title: when(it.ts) }, it.ts && t0 ? '+' + ms(it.ts - t0) : '');
  const tag = (s) => h('span', { class: 'tag' }, s);
  const att = it.attempt ? h('span', { class: 'att', title: 'attempt' }, '#' + it.attempt) : null;
  switch (it.kind) {
    case 'text': {
      const label = it.stream === 'thinking' ? 'Thinking' : 'Assistant';
      const body = h('div', { class: 'text' }, clip(it.text, 100000));
      return h('li', { class: 'ev ' + it.stream }, at, att, it.stream === 'thinking'
        ? h('details', null, h('summary', null, label + ' (' + it.deltas + (it.deltas === 1 ? ' event' : ' events') + ')'), body)
        : [tag(label + ' · ' + it.deltas + (it.deltas === 1 ? ' event' : ' events')), body]);
    }
    case 'tool': {
      const dur = it.endTs ? ms(it.endTs - it.ts) : 'running';
      const state = !it.done ? 'running' : it.isError ? 'failed' : 'done';
      return h('li', { class: 'ev tool ' + state, 'data-tool': it.name ?? '' }, at, att,
        h('details', { class: 'tool ' + state },
          h('summary', null, 'Tool ', h('code', null, String(it.name ?? '?')), ' — ', h('span', { class: 'state' }, state), ' · ', h('span', { class: 'dur' }, dur), it.updates ? ' · ' + it.updates + ' updates' : ''),
          h('div', { class: 'label' }, 'Arguments'), h('pre', { class: 'args' }, clip(pretty(it.args ?? {}), 50000)),
          it.done ? [h('div', { class: 'label' }, it.isError ? 'Error' : 'Result'), h('pre', { class: 'result' + (it.isError ? ' error' : '') }, clip(resultText(it.result), 50000))]
            : it.partial !== undefined ? [h('div', { class: 'label' }, 'So far'), h('pre', { class: 'result' }, clip(resultText(it.partial), 50000))] : null));
    }
    case 'lifecycle': {
      const f = phaseText[it.phase];
      const more = extras.filter((k) => it.d[k] !== undefined && it.d[k] !== '').map((k) => h('span', { class: 'kv-inline' }, k + ' ', h('code', null, String(it.d[k]))));
      const bad = it.phase === 'error' || it.phase === 'aborted';
      return h('li', { class: 'ev lifecycle phase-' + cls(it.phase) + (bad ? ' bad' : it.phase === 'retrying' ? ' warn' : '') }, at, att,
        tag(it.phase || 'lifecycle'), h('span', { class: 'what' }, f ? f(it.d, it) : 'Phase ' + it.phase), more);
    }
    case 'attempt': {
      const d = it.d;
      const ref = [d.provider, d.model].filter(Boolean).map(String).join('/') || '?';
      return h('li', { class: 'ev attempt' + (d.reason ? ' warn' : ''), 'data-attempt': String(d.attempt ?? '') }, at, att, tag(d.reason ? 'failover' : 'model'),
        h('span', { class: 'what' }, 'Model attempt ' + String(d.attempt ?? '?') + ': ', h('code', { class: 'ref' }, ref),
          d.authProfile ? [' with auth profile ', h('code', { class: 'profile' }, String(d.authProfile))] : ' with the provider’s own key',
          d.hop ? ' · fallback hop ' + String(d.hop) : '',
          d.reason ? [' · after ', h('span', { class: 'reason' }, String(d.reason))] : ''));
    }
    case 'compaction':
      return h('li', { class: 'ev compaction' + (it.d.error ? ' bad' : '') }, at, att, tag('compaction'),
        h('span', { class: 'what' }, it.phase === 'start' ? 'Compacting the conversation' : 'Compaction ended' + (it.d.error ? ': ' + it.d.error : it.d.willRetry ? '; the call is tried again' : '')));
    case 'final': {
      const m = it.result?.meta || {};
      return h('li', { class: 'ev final' + (m.error ? ' bad' : '') }, at, tag('final'),
        h('span', { class: 'what' }, m.error ? 'Failed: ' + String(m.error.kind || '') + ': ' + String(m.error.message || '') : 'Finished' + (m.stopReason ? ' (' + m.stopReason + ')' : '')),
        h('details', null, h('summary', null, 'Result'), h('pre', null, clip(pretty(it.result), 50000))));
    }
    default:
      return h('li', { class: 'ev other' }, at, att, tag(String(it.stream)), h('details', null, h('summary', null, 'Event'), h('pre', null, clip(pretty(it.raw), 20000))));
  }
}

function cls(s) { return String(s).replace(/[^a-z-]/gi, ''); }

function resultText(p) {
  if (p && typeof p === 'object' && Array.isArray(p.content)) {
    return p.content.map((b) => (b?.type === 'text' ? String(b.text ?? '') : pretty(b))).join('\n');
  }
  return typeof p === 'string' ? p : pretty(p);
}

export async function runPage({ main, params, signal }) {
  const key = params.get('key');
  const run = params.get('run');
  const tl = new Timeline();
  const summary = h('dl', { class: 'kv summary', id: 'run-summary' });
  const list = h('ol', { class: 'timeline', id: 'timeline', 'aria-label': 'Timeline' });
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages of the timeline' });
  const note = h('p', { class: 'muted', role: 'status', id: 'run-note' }, 'Reading the run’s events…');
  let page = 0;
  let follow = true; // stay on the last page while the run goes on
  let queued = false;
  let drawnPages = -1;

  const pages = () => Math.max(1, Math.ceil(tl.items.length / perPage));
  const drawSummary = () => {
    const s = tl.sum;
    const m = s.final?.meta || {};
    const am = m.agentMeta || {};
    const u = am.usage || {};
    const rows = [
      ['status', 'Status', h('span', { class: 'chip state-' + s.status }, s.status)],
      ['attempts', 'Attempts', num(s.attempts.size || 0)],
      ['workers', 'Workers', [...s.workers].join(', ') || '—'],
      ['model', 'Model', am.model ? [am.provider, am.model].filter(Boolean).join('/') : '—'],
      ['profile', 'Auth profile', m.session?.authProfile || '—'],
      ['tried', 'Models tried', s.tried.join(' → ') || '—'],
      ['duration', 'Duration', m.durationMs !== undefined ? ms(m.durationMs) : s.end ? ms(s.end - s.start) : 'running'],
      ['tokens', 'Tokens', u.total !== undefined ? num(u.input || 0) + ' in · ' + num(u.output || 0) + ' out' + (u.cacheRead ? ' · ' + num(u.cacheRead) + ' cached' : '') : '—'],
      ['cost', 'Cost', u.cost ? usd(u.cost.total || 0) : '—'],
      ['tools', 'Tool calls', num(s.tools) + (s.toolErrors ? ' (' + s.toolErrors + ' failed)' : '')],
      ['retries', 'Retries', num(s.retries)],
      ['compactions', 'Compactions', num(s.compactions + (am.compactionCount && !s.compactions ? am.compactionCount : 0))],
      ['resumed', 'Resumed steps', num(s.resumed)],
      ['events', 'Events', num(s.events)],
    ];
    if (m.error) rows.push(['error', 'Error', String(m.error.kind || '') + ': ' + String(m.error.message || '')]);
    fill(summary, rows.map(([k, label, v]) => h('div', { 'data-k': k }, h('dt', null, label), h('dd', null, v))));
  };
  const drawPage = () => {
    const from = page * perPage;
    const t0 = tl.sum.start;
    fill(list, tl.items.slice(from, from + perPage).map((it) => itemEl(it, t0)));
    list.start = from + 1;
  };
  const drawPager = () => {
    const n = pages();
    const go = (p) => { page = Math.max(0, Math.min(n - 1, p)); follow = page === n - 1; drawPage(); drawPager(); list.focus(); };
    fill(pager,
      button('« First', () => go(0), { disabled: page === 0 }),
      button('‹ Previous', () => go(page - 1), { disabled: page === 0 }),
      h('span', { class: 'where', id: 'timeline-where' }, 'Items ' + num(tl.items.length ? page * perPage + 1 : 0) + '–' + num(Math.min(tl.items.length, (page + 1) * perPage)) + ' of ' + num(tl.items.length)),
      button('Next ›', () => go(page + 1), { disabled: page >= n - 1 }),
      button('Last »', () => go(n - 1), { disabled: page >= n - 1 }));
    drawnPages = n;
  };
  const draw = () => {
    queued = false;
    const n = pages();
    if (follow) page = n - 1;
    const from = page * perPage;
    let touch = false;
    for (const i of tl.changed) if (i >= from && i < from + perPage) { touch = true; break; }
    tl.changed.clear();
    drawSummary();
    if (touch) drawPage();
    if (touch || n !== drawnPages) drawPager();
  };
  const schedule = () => {
    if (!queued) { queued = true; requestAnimationFrame(draw); }
  };

  fill(main,
    h('div', { class: 'head' }, h('p', { class: 'crumbs' }, h('a', { href: '#/sessions' }, 'Sessions'), ' / ', h('a', { href: route('s', key) }, key), ' /'),
      h('h1', null, 'Run ', h('span', { id: 'run-id' }, run))),
    h('section', { class: 'card', 'aria-label': 'Summary' }, summary),
    note, pager, list);
  list.tabIndex = -1;
  drawSummary();
  drawPager();
  follow = true;
  try {
    await stream(sessionPath(key, 'runs', run, 'events'), {
      signal,
      onEvent: (ev) => { tl.add(ev); schedule(); },
      done: (ev) => ev.event === 'final',
    });
    if (signal.aborted) return;
    note.textContent = tl.sum.final ? 'The run is over; this is its whole record.' : 'The stream ended.';
  } catch (e) {
    if (signal.aborted) return;
    fill(note, h('span', { class: 'error', role: 'alert' }, e.message));
    note.className = '';
  }
  draw();
}
