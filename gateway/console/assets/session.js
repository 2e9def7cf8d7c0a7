// session.js is one session: its transcript, the calls waiting for
// approval, a composer that sends and streams the reply, stop and
// interrupt, the run in progress, its past runs (a page at a time, each
// linking to its timeline), and the queue and run settings.
import { h, fill, route, usd, num, button, field, select, pretty, clip, when, ago, ms } from './dom.js';
import { call, get, stream, sessionPath } from './api.js';
import { renderTranscript, LiveTurn } from './transcript.js';

const modes = [['', 'session default'], ['followup', 'followup'], ['collect', 'collect'], ['steer', 'steer'], ['steer-backlog', 'steer-backlog'], ['interrupt', 'interrupt'], ['reject', 'reject']];

// runsPage is how many past runs a page of the runs list shows.
const runsPage = 10;

// runRow is one past run: its link, state, start, duration, cost, model.
function runRow(key, r) {
  const st = String(r.state || '');
  const dur = r.durationMs ? ms(r.durationMs) : r.endedAt && r.startedAt ? ms(r.endedAt - r.startedAt) : st === 'running' ? 'running' : '';
  return h('tr', { 'data-run': String(r.runId) },
    h('th', { scope: 'row' }, h('a', { href: route('s', key, 'runs', String(r.runId)), 'aria-label': 'run ' + r.runId }, String(r.runId))),
    h('td', null, h('span', { class: 'chip state-' + st.replace(/[^a-z-]/g, '') }, st)),
    h('td', null, r.startedAt ? h('time', { title: when(r.startedAt) }, ago(r.startedAt)) : ''),
    h('td', { class: 'num' }, dur),
    h('td', { class: 'num' }, r.costUsd ? usd(r.costUsd) : ''),
    h('td', null, r.model ? [r.provider ? String(r.provider) + '/' : '', h('wbr'), String(r.model)] : r.mergedInto ? 'into run ' + r.mergedInto : r.error || ''));
}

export async function sessionPage({ main, params, signal, can }) {
  const key = params.get('key');
  const [history, settings, runs, firstRuns] = await Promise.all([
    get(sessionPath(key, 'history'), { signal }),
    get(sessionPath(key, 'settings'), { signal }).catch((e) => ({ error: e })),
    get('/api/runs', { signal }).catch(() => ({ runs: [] })),
    get(sessionPath(key, 'runs') + '?limit=' + runsPage, { signal }).catch((e) => ({ error: e })),
  ]);
  const transcript = h('ol', { class: 'transcript', id: 'transcript', 'aria-label': 'Transcript' });
  let entries = history.entries || [];
  renderTranscript(transcript, entries);
  const approvals = h('section', { id: 'approvals', 'aria-label': 'Calls waiting for approval' });
  const runsBox = h('section', { class: 'runs card', 'aria-labelledby': 'runs-h' });
  const settingsBox = h('section', { class: 'card', 'aria-labelledby': 'settings-h' });
  const status = h('p', { id: 'run-status', class: 'muted', role: 'status', 'aria-live': 'polite' });
  const live = { turn: null, ctl: null };
  signal.addEventListener('abort', () => live.ctl?.abort());

  const refresh = async () => {
    const [hist, st] = await Promise.all([get(sessionPath(key, 'history'), { signal }), get(sessionPath(key, 'settings'), { signal }).catch((e) => ({ error: e }))]);
    entries = hist.entries || [];
    renderTranscript(transcript, entries);
    drawApprovals(st);
    drawSettings(st);
  };

  // follow streams a run into the transcript: a send's (send set) or a
  // run already going.
  const follow = async (turn, opts) => {
    live.ctl?.abort();
    const ctl = new AbortController();
    live.ctl = ctl;
    live.turn = turn;
    signal.addEventListener('abort', () => ctl.abort(), { once: true });
    let final = false;
    try {
      await stream(opts.path, {
        signal: ctl.signal, send: opts.send,
        onRun: (run) => { if (run) { turn.run(run, route('s', key, 'runs', run)); loadRuns(); } },
        onEvent: (ev) => { turn.add(ev); if (ev.event === 'final') final = true; },
        done: (ev) => ev.event === 'final',
      });
    } catch (e) {
      if (!ctl.signal.aborted) turn.fail(e);
      return;
    }
    if (final && !ctl.signal.aborted) { await refresh(); loadRuns(); }
  };

  const send = async (text, mode) => {
    const body = { text, stream: true };
    if (mode) body.mode = mode;
    const turn = new LiveTurn(transcript, { text });
    turn.li.scrollIntoView({ block: 'nearest' });
    await follow(turn, { path: sessionPath(key, 'messages'), send: { body, follow: (run) => sessionPath(key, 'runs', run, 'events') } });
  };

  const drawApprovals = (st) => {
    const calls = st?.state?.approvals || [];
    if (!calls.length) { fill(approvals); return; }
    const args = new Map();
    for (const e of entries) for (const b of Array.isArray(e.message?.content) ? e.message.content : []) if (b?.type === 'toolCall') args.set(b.id, b.arguments);
    fill(approvals, h('div', { class: 'card attention' }, h('h2', null, 'Waiting for approval'),
      h('ul', { class: 'plain' }, calls.map((c) => h('li', { class: 'approval' },
        h('div', null, 'Tool ', h('code', null, String(c.name)), ' call ', h('code', null, String(c.id))),
        h('pre', { class: 'args' }, clip(pretty(args.get(c.id) ?? {}), 20000)),
        can.send ? h('div', { class: 'actions' },
          button('Approve', () => decide(c.id, 'approve'), { class: 'primary', 'data-call': c.id, 'data-decision': 'approve' }),
          button('Deny', () => decide(c.id, 'deny'), { class: 'danger', 'data-call': c.id, 'data-decision': 'deny' })) : null)))));
  };

  const decide = async (id, decision) => {
    for (const b of approvals.querySelectorAll('button')) b.disabled = true;
    const turn = new LiveTurn(transcript, {});
    await follow(turn, { path: sessionPath(key, 'approvals', id), send: { body: { decision, stream: true }, follow: (run) => sessionPath(key, 'runs', run, 'events') } });
  };

  const drawSettings = (st) => {
    const q = st?.queue || {};
    const r = st?.run || {};
    const s = st?.state || {};
    const rows = [
      ['Queue mode', q.mode || 'default'], ['Debounce', q.debounceMs !== undefined ? q.debounceMs + ' ms' : 'default'], ['Cap', q.cap || 'default'], ['Drop', q.drop || 'default'],
      ['Model', r.model || 'default'], ['Thinking', r.thinking || 'default'], ['Auth profile', r.authProfile || 'default'],
      ['Turns', num(s.turns || 0)], ['Cost so far', usd(s.usage?.cost?.total ?? 0)], ['Tokens so far', num(s.usage?.total ?? 0)], ['Last auth profile', s.authProfile || '—'],
    ];
    const dl = h('dl', { class: 'kv' }, rows.map(([k, v]) => [h('dt', null, k), h('dd', null, String(v))]));
    const out = h('p', { class: 'muted', role: 'status' });
    let form = null;
    if (can.send) {
      const mode = select('set-mode', modes.filter(([v]) => v !== '').map(([v, l]) => [v, l]).concat([['', '(unchanged)']]), q.mode || '');
      const debounce = h('input', { id: 'set-debounce', type: 'number', min: 0, max: 60000, value: q.debounceMs ?? '' });
      const cap = h('input', { id: 'set-cap', type: 'number', min: 1, max: 1000, value: q.cap || '' });
      const drop = select('set-drop', [['', '(unchanged)'], ['old', 'old'], ['new', 'new'], ['summarize', 'summarize']], q.drop || '');
      const model = h('input', { id: 'set-model', type: 'text', value: r.model || '', placeholder: 'provider/model', autocomplete: 'off' });
      const thinking = select('set-thinking', [['', '(unchanged)'], ['off', 'off'], ['minimal', 'minimal'], ['low', 'low'], ['medium', 'medium'], ['high', 'high'], ['xhigh', 'xhigh']], r.thinking || '');
      const profile = h('input', { id: 'set-profile', type: 'text', value: r.authProfile || '', autocomplete: 'off' });
      form = h('form', { class: 'settings', onsubmit: async (e) => {
        e.preventDefault();
        const queue = {};
        if (mode.value) queue.mode = mode.value;
        if (debounce.value !== '') queue.debounceMs = Number(debounce.value);
        if (cap.value !== '') queue.cap = Number(cap.value);
        if (drop.value) queue.drop = drop.value;
        const run = {};
        if (model.value.trim()) run.model = model.value.trim();
        if (thinking.value) run.thinking = thinking.value;
        if (profile.value.trim()) run.authProfile = profile.value.trim();
        const change = {};
        if (Object.keys(queue).length) change.queue = queue;
        if (Object.keys(run).length) change.run = run;
        await apply(out, () => call('PATCH', sessionPath(key, 'settings'), change));
      } },
      h('fieldset', null, h('legend', null, 'Queue'), field('Mode', mode), field('Debounce (ms)', debounce), field('Cap', cap), field('Drop over the cap', drop)),
      h('fieldset', null, h('legend', null, 'Run'), field('Model', model), field('Thinking', thinking), field('Auth profile', profile)),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save settings'),
        button('Reset to defaults', () => apply(out, () => call('DELETE', sessionPath(key, 'settings'))))));
    }
    fill(settingsBox, h('details', { open: false }, h('summary', null, h('h2', { id: 'settings-h', class: 'inline' }, 'Settings and usage')),
      st?.error ? h('p', { class: 'error' }, st.error.message) : dl, form, out));
  };

  const apply = async (out, f) => {
    out.textContent = 'Applying…';
    try {
      const r = await f();
      out.textContent = r.applied ? 'Applied: ' + (r.text || 'done') : 'Sent; it applies after the messages queued before it.';
      const st = await get(sessionPath(key, 'settings'), { signal });
      drawSettings(st);
    } catch (e) {
      out.textContent = 'Refused: ' + e.message;
    }
  };

  const running = (runs.runs || []).filter((r) => r.session === key);
  // past is the runs list as loaded: its pages so far (GET
  // /api/sessions/{key}/runs, newest first) and the next page's cursor.
  const past = { runs: firstRuns.runs || [], total: firstRuns.total || 0, next: firstRuns.next || '', error: firstRuns.error || null, loading: false };
  const loadRuns = async (more) => {
    if (past.loading) return;
    past.loading = true;
    const qs = new URLSearchParams({ limit: String(runsPage) });
    if (more && past.next) qs.set('cursor', past.next);
    try {
      const p = await get(sessionPath(key, 'runs') + '?' + qs, { signal });
      past.runs = more ? past.runs.concat(p.runs || []) : p.runs || [];
      past.total = p.total || 0;
      past.next = p.next || '';
      past.error = null;
    } catch (e) {
      if (signal.aborted) return;
      past.error = e;
    } finally {
      past.loading = false;
    }
    drawRuns();
  };
  const drawRuns = () => {
    const runInput = h('input', { id: 'open-run', type: 'text', inputmode: 'numeric', pattern: '[0-9]+', size: 8, autocomplete: 'off' });
    const list = past.runs.length
      ? h('div', { class: 'scroll' }, h('table', { class: 'list runs', id: 'runs' },
        h('caption', { class: 'visually-hidden' }, 'Runs of the session, newest first'),
        h('thead', null, h('tr', null, ['Run', 'State', 'Started', 'Took', 'Cost', 'Model'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, past.runs.map((r) => runRow(key, r)))))
      : h('p', { class: 'muted', id: 'runs-empty' }, past.error ? '' : 'No run with stored events.');
    fill(runsBox, h('h2', { id: 'runs-h' }, 'Runs'),
      running.length ? h('p', null, 'Running now: ', running.map((r) => [h('a', { href: route('s', key, 'runs', r.runId) }, 'run ' + r.runId), ' ',
        button('Follow here', () => follow(new LiveTurn(transcript, {}), { path: sessionPath(key, 'runs', r.runId, 'events') }), { class: 'small' }), ' '])) : h('p', { class: 'muted' }, 'No run is running now.'),
      list,
      past.error ? h('p', { class: 'error', role: 'alert' }, 'The runs could not be listed: ' + past.error.message) : null,
      h('p', { class: 'muted', id: 'runs-count' }, num(past.runs.length) + ' of ' + num(past.total) + (past.total === 1 ? ' run' : ' runs') + ' with stored events',
        past.next ? [' ', button('Older runs', () => loadRuns(true), { class: 'small', id: 'older-runs' })] : null),
      h('form', { class: 'inline-form', onsubmit: (e) => { e.preventDefault(); if (/^\d+$/.test(runInput.value)) location.hash = route('s', key, 'runs', runInput.value); } },
        h('label', { for: 'open-run' }, 'Open run'), runInput, h('button', { type: 'submit' }, 'Open')));
  };

  let composer = null;
  if (can.send) {
    const text = h('textarea', { id: 'message', rows: 3, placeholder: 'Write a message (Ctrl+Enter sends)', required: true });
    const mode = select('mode', modes, '');
    const submit = async (m) => {
      const t = text.value;
      if (!t.trim()) { status.textContent = 'Write a message first.'; text.focus(); return; }
      text.value = '';
      status.textContent = '';
      await send(t, m);
    };
    text.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); submit(mode.value); } });
    composer = h('form', { class: 'composer card', id: 'composer', onsubmit: (e) => { e.preventDefault(); submit(mode.value); } },
      h('label', { for: 'message' }, 'Message'), text,
      h('div', { class: 'actions' },
        h('span', { class: 'field inline' }, h('label', { for: 'mode' }, 'Queue mode'), mode),
        h('button', { type: 'submit', class: 'primary', id: 'send' }, 'Send'),
        button('Interrupt and send', () => submit('interrupt'), { id: 'interrupt', title: 'Cut the running turn short and run this message now' }),
        button('Stop', async () => {
          status.textContent = 'Stopping…';
          try {
            const r = await call('POST', sessionPath(key, 'stop'));
            status.textContent = r.applied ? (r.text || 'Stopped.') : 'Stop sent.';
          } catch (e) { status.textContent = 'Stop refused: ' + e.message; }
        }, { id: 'stop', class: 'danger', title: 'Stop the running turn and drop what waits' })),
      status);
  }

  // Admins may forget an idle session: its transcript, settings and run
  // events go (DELETE /api/sessions/{key}); a second click confirms.
  let forget = null;
  if (can.admin) {
    const out = h('span', { class: 'muted', role: 'status', id: 'forget-outcome' });
    let armed = false;
    const btn = button('Forget this session', async () => {
      if (!armed) { armed = true; btn.textContent = 'Confirm: forget it'; btn.classList.add('armed'); return; }
      btn.disabled = true;
      try {
        await call('DELETE', sessionPath(key));
        location.hash = '#/sessions';
      } catch (e) {
        out.textContent = 'Refused: ' + e.message;
        btn.disabled = false;
      }
    }, { class: 'danger small', id: 'forget' });
    forget = h('div', { class: 'actions' }, btn, out);
  }

  fill(main,
    h('div', { class: 'head' }, h('p', { class: 'crumbs' }, h('a', { href: '#/sessions' }, 'Sessions'), ' /'),
      h('h1', { class: 'key', id: 'session-key' }, key), forget),
    h('div', { class: 'session-grid' },
      h('div', { class: 'col-main' }, approvals, transcript, composer),
      h('div', { class: 'col-side' }, runsBox, settingsBox)));
  drawApprovals(settings);
  drawSettings(settings);
  drawRuns();
  if (!can.send) main.querySelector('.col-main').append(h('p', { class: 'muted', id: 'read-only' }, 'Your token may read this session, not send to it.'));
}
