// approvals.js is the inbox of tool calls waiting for approval across
// the sessions the caller may see (GET /api/approvals): approve or deny
// with one click, then the run that goes on is followed to its end.
import { h, fill, route, pretty, clip, when, ago, button } from './dom.js';
import { get, stream, sessionPath, APIError } from './api.js';

export async function approvalsPage({ main, signal, can }) {
  let list;
  try {
    list = (await get('/api/approvals', { signal })).approvals || [];
  } catch (e) {
    if (e instanceof APIError && e.status === 404) {
      fill(main, h('h1', null, 'Approvals'), h('p', { class: 'muted' }, 'This gateway lists no approvals across sessions; each session’s page shows its own.'));
      return;
    }
    throw e;
  }
  const items = list.map((a) => {
    const out = h('p', { class: 'outcome', role: 'status', 'aria-live': 'polite' });
    const actions = can.send ? h('div', { class: 'actions' },
      button('Approve', () => decide(a, 'approve', actions, out, signal), { class: 'primary', 'data-call': a.call, 'data-decision': 'approve' }),
      button('Deny', () => decide(a, 'deny', actions, out, signal), { class: 'danger', 'data-call': a.call, 'data-decision': 'deny' })) : null;
    return h('li', { class: 'approval card', 'data-session': a.session, 'data-call': a.call },
      h('div', { class: 'meta' },
        h('a', { href: route('s', a.session), class: 'key' }, a.session),
        a.run ? [' · ', h('a', { href: route('s', a.session, 'runs', a.run) }, 'run ' + a.run)] : null,
        a.requestedAt ? [' · ', h('time', { title: when(a.requestedAt) }, ago(a.requestedAt))] : null),
      h('div', null, 'Tool ', h('code', null, String(a.tool ?? '?')), ' wants to run with:'),
      h('pre', { class: 'args' }, clip(pretty(a.arguments ?? {}), 20000)),
      actions, out);
  });
  fill(main, h('div', { class: 'head' }, h('h1', null, 'Approvals'), h('p', { class: 'muted', id: 'approvals-count' }, list.length + (list.length === 1 ? ' call waits' : ' calls wait'))),
    items.length ? h('ul', { class: 'plain approvals', id: 'approvals' }, items) : h('p', { class: 'empty' }, 'Nothing waits for approval.'));
}

async function decide(a, decision, actions, out, signal) {
  for (const b of actions.querySelectorAll('button')) b.disabled = true;
  out.textContent = (decision === 'approve' ? 'Approved' : 'Denied') + '; the run goes on…';
  let result = null;
  let runId = '';
  try {
    await stream(sessionPath(a.session, 'approvals', a.call), {
      signal,
      send: { body: { decision, stream: true }, follow: (run) => sessionPath(a.session, 'runs', run, 'events') },
      onRun: (run) => { runId = run; },
      onEvent: (ev) => { if (ev.event === 'final') result = ev.data?.data?.result || {}; },
      done: (ev) => ev.event === 'final',
    });
  } catch (e) {
    out.textContent = 'Refused: ' + e.message;
    for (const b of actions.querySelectorAll('button')) b.disabled = false;
    return;
  }
  if (!result) return;
  const err = result.meta?.error;
  fill(out, (decision === 'approve' ? 'Approved' : 'Denied') + '; ',
    runId ? h('a', { href: route('s', a.session, 'runs', runId) }, 'run ' + runId) : 'the run',
    err ? ' failed: ' + String(err.kind) + ': ' + String(err.message) : ' finished' + (result.payloads?.length ? ': ' + clip(result.payloads.map((p) => p.text || '').join(' '), 200) : '.'));
  out.dataset.finished = err ? 'failed' : 'done';
}
