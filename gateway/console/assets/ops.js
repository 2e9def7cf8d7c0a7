// ops.js is the admin's operations page: dead letters (show, replay,
// purge) and auth profiles (state, cooldown, reset).
import { h, fill, when, ago, button, clip, num, route } from './dom.js';
import { call, get, APIError } from './api.js';

export async function opsPage({ main, signal }) {
  const dead = h('section', { class: 'card', 'aria-labelledby': 'dead-h', id: 'dead-letters' });
  const profiles = h('section', { class: 'card', 'aria-labelledby': 'profiles-h', id: 'auth-profiles' });
  fill(main, h('div', { class: 'head' }, h('h1', null, 'Operations')), dead, profiles);
  await Promise.all([deadLetters(dead, signal), authProfiles(profiles, signal)]);
}

async function deadLetters(box, signal) {
  const out = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite', id: 'dead-outcome' });
  const detail = h('div', { id: 'dead-detail' });
  const reload = () => deadLetters(box, signal);
  let rep;
  try {
    rep = await get('/api/dead-letters?limit=100', { signal });
  } catch (e) {
    fill(box, h('h2', { id: 'dead-h' }, 'Dead letters'), h('p', { class: 'error' }, e.message));
    return;
  }
  const letters = rep.letters || [];
  const act = async (label, f) => {
    out.textContent = label + '…';
    try {
      const r = await f();
      await reload();
      const o = box.querySelector('#dead-outcome');
      o.textContent = describe(r);
    } catch (e) {
      out.textContent = label + ' refused: ' + e.message;
    }
  };
  const rows = letters.map((l) => {
    let armed = false;
    const purge = button('Purge', () => {
      if (!armed) { armed = true; purge.textContent = 'Confirm purge'; purge.classList.add('armed'); return; }
      act('Purging', () => call('POST', '/api/dead-letters/purge', { seqs: [l.seq] }));
    }, { class: 'danger small', 'data-seq': l.seq, 'data-act': 'purge' });
    return h('tr', { 'data-seq': l.seq },
      h('td', { class: 'num' }, String(l.seq)),
      h('td', null, String(l.reason ?? '')),
      h('td', null, h('time', { title: when(l.time) }, ago(l.time))),
      h('td', null, l.session ? h('a', { href: route('s', l.session), class: 'key' }, l.session) : h('code', null, String(l.subject ?? ''))),
      h('td', { class: 'wrap-cell' }, clip(l.error ?? '', 300)),
      h('td', { class: 'num' }, num(l.size)),
      h('td', { class: 'actions' },
        button('Show', () => show(l.seq, detail, signal), { class: 'small', 'data-seq': l.seq, 'data-act': 'show' }),
        button('Replay', () => act('Replaying', () => call('POST', '/api/dead-letters/replay', { seqs: [l.seq] })), { class: 'small primary', 'data-seq': l.seq, 'data-act': 'replay' }),
        purge));
  });
  fill(box, h('h2', { id: 'dead-h' }, 'Dead letters'),
    letters.length ? h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', null, h('tr', null, ['Seq', 'Reason', 'When', 'Session', 'Error', 'Bytes', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, rows))) : h('p', { class: 'empty', id: 'no-dead' }, 'No dead letters.'),
    rep.more ? h('p', { class: 'muted' }, 'More dead letters follow; replay or purge these first.') : null,
    out, detail);
}

function describe(r) {
  if (r && Array.isArray(r.replayed)) {
    const parts = r.replayed.map((x) => 'dead letter ' + x.seq + ' replayed as run ' + x.run + ' of ' + x.session);
    for (const s of r.skipped || []) parts.push('dead letter ' + s.seq + ' skipped: ' + s.why);
    return parts.join('; ') || 'Nothing replayed.';
  }
  if (r && typeof r.purged === 'number') return 'Purged ' + r.purged + (r.purged === 1 ? ' dead letter.' : ' dead letters.');
  return 'Done.';
}

async function show(seq, el, signal) {
  fill(el, h('p', { class: 'muted' }, 'Loading dead letter ' + seq + '…'));
  try {
    const l = await get('/api/dead-letters/' + encodeURIComponent(seq), { signal });
    let data = '';
    try { data = new TextDecoder('utf-8', { fatal: false }).decode(Uint8Array.from(atob(l.data || ''), (c) => c.charCodeAt(0))); } catch { data = String(l.data ?? ''); }
    fill(el, h('h3', null, 'Dead letter ' + seq),
      h('dl', { class: 'kv' }, [['Reason', l.reason], ['Subject', l.subject], ['Session', l.session], ['Run', l.inboundSeq], ['Error', l.error], ['When', when(l.time)]]
        .filter(([, v]) => v !== undefined && v !== '').map(([k, v]) => [h('dt', null, k), h('dd', null, String(v))])),
      h('div', { class: 'label' }, 'Headers'), h('pre', null, JSON.stringify(l.headers || {}, null, 2)),
      h('div', { class: 'label' }, 'Data' + (l.truncated ? ' (cut short)' : '')), h('pre', { class: 'wrap', id: 'dead-data' }, clip(data, 100000)));
  } catch (e) {
    fill(el, h('p', { class: 'error' }, e.message));
  }
}

async function authProfiles(box, signal) {
  const out = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' });
  let rep;
  try {
    rep = await get('/api/auth-profiles', { signal });
  } catch (e) {
    fill(box, h('h2', { id: 'profiles-h' }, 'Auth profiles'),
      h('p', { class: e instanceof APIError && e.status === 404 ? 'muted' : 'error' }, e instanceof APIError && e.status === 404 ? 'This gateway does not list auth profiles.' : e.message));
    return;
  }
  const list = rep.authProfiles || rep.profiles || [];
  fill(box, h('h2', { id: 'profiles-h' }, 'Auth profiles'),
    list.length ? h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', null, h('tr', null, ['Profile', 'Provider', 'State', 'Cooling down until', 'Reason', 'Failures', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, list.map((p) => h('tr', { 'data-profile': p.id },
        h('th', { scope: 'row' }, h('code', null, String(p.id))),
        h('td', null, String(p.provider ?? '')),
        h('td', null, h('span', { class: 'chip state-' + String(p.state ?? '').replace(/[^a-z-]/g, '') }, String(p.state ?? ''))),
        h('td', null, p.cooldownUntil ? h('time', { title: when(p.cooldownUntil) }, ago(p.cooldownUntil)) : '—'),
        h('td', null, String(p.reason ?? '')),
        h('td', { class: 'num' }, num(p.failures)),
        h('td', null, button('Reset', async () => {
          out.textContent = 'Resetting ' + p.id + '…';
          try {
            await call('POST', '/api/auth-profiles/' + encodeURIComponent(p.id) + '/reset');
            await authProfiles(box, signal);
          } catch (e) { out.textContent = 'Reset refused: ' + e.message; }
        }, { class: 'small', 'data-profile': p.id }))))))) : h('p', { class: 'empty' }, 'No auth profiles.'),
    out);
}
