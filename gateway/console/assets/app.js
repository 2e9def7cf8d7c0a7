// app.js is the console's frame: who the caller is, the navigation, and
// the hash routes (#/sessions, #/s/<key>, #/s/<key>/runs/<run>, …) that
// pick a page. A page is an async function of a context: main (its
// element), me (the caller, from GET /api/me), params (the route's
// values and query) and signal (aborted when the page is left, which
// ends its streams).
import { h, fill } from './dom.js';
import { get, token, onUnauthorized, APIError } from './api.js';
import { loginPage } from './login.js';
import { fleetPage } from './fleet.js';
import { sessionsPage } from './sessions.js';
import { sessionPage } from './session.js';
import { runPage } from './run.js';
import { approvalsPage } from './approvals.js';
import { opsPage } from './ops.js';

const routes = [
  { re: /^\/login$/, page: loginPage, open: true },
  { re: /^\/fleet$/, page: fleetPage, admin: true },
  { re: /^\/sessions$/, page: sessionsPage },
  { re: /^\/s\/([^/]+)$/, page: sessionPage, names: ['key'] },
  { re: /^\/s\/([^/]+)\/runs\/([^/]+)$/, page: runPage, names: ['key', 'run'] },
  { re: /^\/approvals$/, page: approvalsPage },
  { re: /^\/ops$/, page: opsPage, admin: true },
];

const state = { me: null, ctl: null };

// who asks the gateway who the token is; null when it refuses.
async function who() {
  try {
    return await get('/api/me');
  } catch (e) {
    if (e instanceof APIError && (e.status === 401 || e.status === 403)) return null;
    throw e;
  }
}

// can says what the caller may do.
function can(me) {
  const role = me?.role;
  return { send: role === 'sender' || role === 'admin', admin: role === 'admin', read: Boolean(role) };
}

function home(me) { return can(me).admin ? '#/fleet' : '#/sessions'; }

function frame(me) {
  const nav = document.getElementById('nav');
  const links = [];
  if (me) {
    if (can(me).admin) links.push(['#/fleet', 'Fleet']);
    links.push(['#/sessions', 'Sessions'], ['#/approvals', 'Approvals']);
    if (can(me).admin) links.push(['#/ops', 'Operations']);
  }
  const cur = location.hash.split('?')[0];
  fill(nav, h('ul', null, links.map(([href, label]) =>
    h('li', null, h('a', { href, 'aria-current': cur === href || (href === '#/sessions' && cur.startsWith('#/s/')) ? 'page' : null }, label)))));
  const whoEl = document.getElementById('who');
  if (!me) { fill(whoEl); return; }
  fill(whoEl,
    h('span', { class: 'me', id: 'me', 'data-role': me.role }, me.local ? 'local (no token file)' : me.name, ' ', h('span', { class: 'role' }, me.role)),
    me.local ? null : h('button', { type: 'button', class: 'link', onclick: logout }, 'Log out'));
}

function logout() {
  token.clear();
  state.me = null;
  location.hash = '#/login';
}

async function render() {
  let path = location.hash.slice(1) || '/';
  if (!path.startsWith('/')) return; // an in-page anchor
  const [p, query] = path.split('?');
  path = p;
  state.ctl?.abort();
  const ctl = new AbortController();
  state.ctl = ctl;
  const main = document.getElementById('main');
  if (!state.me) state.me = await who();
  if (ctl.signal.aborted) return;
  let r = routes.find((x) => x.re.test(path));
  if (!state.me && !r?.open) {
    location.replace('#/login');
    return;
  }
  if (!r || path === '/' || (r.admin && !can(state.me).admin)) {
    location.replace(state.me ? home(state.me) : '#/login');
    return;
  }
  frame(state.me);
  const m = path.match(r.re);
  const params = new URLSearchParams(query || '');
  (r.names || []).forEach((n, i) => params.set(n, decodeURIComponent(m[i + 1])));
  fill(main, h('p', { class: 'muted', role: 'status' }, 'Loading…'));
  main.removeAttribute('data-ready');
  try {
    await r.page({ main, me: state.me, params, signal: ctl.signal, can: can(state.me), signedIn: signedIn });
  } catch (e) {
    if (ctl.signal.aborted) return;
    fill(main, h('h1', null, 'Something went wrong'), h('p', { class: 'error', role: 'alert' }, e.message || String(e)));
  }
  if (!ctl.signal.aborted) main.setAttribute('data-ready', '');
}

// signedIn is what the login page calls with a token the gateway accepted.
function signedIn(me) {
  state.me = me;
  location.hash = home(me);
}

onUnauthorized(() => {
  if (state.me && !state.me.local) {
    token.clear();
    state.me = null;
    location.hash = '#/login';
  }
});

window.addEventListener('hashchange', render);
document.addEventListener('DOMContentLoaded', () => {
  document.querySelector('.skip')?.addEventListener('click', (e) => {
    e.preventDefault();
    document.getElementById('main').focus();
  });
  render();
});

