// sessions.js lists the caller's sessions a page at a time: one request
// per page (GET /api/sessions?limit=&cursor=&q=), whatever the page holds.
import { h, fill, route, when, ago, usd, num } from './dom.js';
import { get } from './api.js';

const pageSize = 50;

export async function sessionsPage({ main, params, signal }) {
  const q = params.get('q') || '';
  const cursor = params.get('cursor') || '';
  const input = h('input', { id: 'q', type: 'search', value: q, placeholder: 'part of a key or an agent', autocomplete: 'off' });
  const form = h('form', { class: 'search', role: 'search', onsubmit: (e) => {
    e.preventDefault();
    location.hash = '#/sessions' + query({ q: input.value.trim() });
  } }, h('label', { for: 'q' }, 'Search sessions'), input, h('button', { type: 'submit' }, 'Search'));
  const qs = new URLSearchParams({ limit: String(pageSize) });
  if (q) qs.set('q', q);
  if (cursor) qs.set('cursor', cursor);
  const page = await get('/api/sessions?' + qs, { signal });
  const rows = page.sessions || [];
  const total = typeof page.total === 'number' ? page.total : null;
  const table = h('table', { class: 'list sessions', id: 'sessions' },
    h('caption', { class: 'visually-hidden' }, 'Sessions'),
    h('thead', null, h('tr', null, ['Session', 'Agent', 'Last activity', 'State', 'Cost', 'Turns', 'Last run'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', null, rows.map(row)));
  const next = page.next !== undefined && page.next !== null && page.next !== '' ? String(page.next) : '';
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages of sessions' },
    cursor ? h('a', { href: '#/sessions' + query({ q }) }, '« First page') : null,
    next ? h('a', { href: '#/sessions' + query({ q, cursor: next }), rel: 'next', id: 'next-page' }, 'Next page »') : null);
  fill(main,
    h('div', { class: 'head' }, h('h1', null, 'Sessions'),
      h('p', { class: 'muted', id: 'sessions-count' }, count(total, rows.length, q, next))),
    form,
    rows.length ? h('div', { class: 'scroll' }, table) : h('p', { class: 'empty' }, empty(q, next)),
    pager);
}

// count says how many sessions there are: the total when the fleet counted
// it (every session, or single keys), else what this page shows (a
// tenant's sessions or a search are not counted: that would read each).
function count(total, shown, q, next) {
  if (total !== null) return num(total) + (q ? ' matching' : '') + (total === 1 ? ' session' : ' sessions');
  return num(shown) + (q ? ' matching' : '') + ' on this page' + (next ? ', more on the next' : '');
}

// empty says why a page lists none: a search that stopped after the
// sessions it may read on one page (next goes on) has not found none.
function empty(q, next) {
  if (next) return q ? 'No match among the sessions searched so far: see the next page.' : 'None on this page: see the next page.';
  return q ? 'No session matches.' : 'No sessions yet.';
}

function row(s) {
  const last = s.lastActivity ?? s.lastActivity;
  const state = s.state || (s.running ? 'running' : '');
  return h('tr', null,
    h('th', { scope: 'row' }, h('a', { href: route('s', s.key), class: 'key' }, s.key)),
    h('td', null, s.agent || ''),
    h('td', null, last ? h('time', { title: when(last) }, ago(last)) : ''),
    h('td', null, state ? h('span', { class: 'chip state-' + state.replace(/[^a-z-]/g, '') }, state) : ''),
    h('td', { class: 'num' }, usd(s.costUsd)),
    h('td', { class: 'num' }, num(s.turns)),
    h('td', null, s.lastRun ? h('a', { href: route('s', s.key, 'runs', s.lastRun) }, 'run ' + s.lastRun) : ''));
}

function query(o) {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) if (v) qs.set(k, v);
  const s = qs.toString();
  return s ? '?' + s : '';
}
