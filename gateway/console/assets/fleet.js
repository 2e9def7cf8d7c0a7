// fleet.js is the admin's view of the fleet: workers and their slots,
// lanes and turns per second, the backlog, dead letters and auth
// profiles cooling down; GET /api/fleet, then the numbers move with
// GET /api/fleet/events (event: fleet, a new snapshot each).
import { h, fill, num, ago, when } from './dom.js';
import { get, stream, APIError } from './api.js';

export async function fleetPage({ main, signal }) {
  let snap;
  try {
    snap = await get('/api/fleet', { signal });
  } catch (e) {
    if (e instanceof APIError && e.status === 404) {
      fill(main, h('h1', null, 'Fleet'), h('p', { class: 'muted' }, 'This gateway does not serve the fleet’s state (GET /api/fleet).'));
      return;
    }
    throw e;
  }
  const cards = h('div', { class: 'cards', id: 'fleet-cards' });
  const workers = h('div', { class: 'scroll', id: 'workers' });
  const profiles = h('div', { id: 'cooldowns' });
  const live = h('p', { class: 'muted live-note', role: 'status', id: 'fleet-live' }, 'Connecting…');
  fill(main, h('div', { class: 'head' }, h('h1', null, 'Fleet'), live), cards,
    h('section', { class: 'card', 'aria-labelledby': 'workers-h' }, h('h2', { id: 'workers-h' }, 'Workers'), workers),
    h('section', { class: 'card', 'aria-labelledby': 'cool-h' }, h('h2', { id: 'cool-h' }, 'Auth profiles'), profiles));
  const draw = (s) => {
    const ws = s.workers || [];
    const aps = s.authProfiles || [];
    const cooling = aps.filter((p) => p.state === 'cooldown');
    const slots = ws.reduce((a, w) => [a[0] + (w.slotsUsed || 0), a[1] + (w.slotsTotal || 0)], [0, 0]);
    const tps = ws.reduce((a, w) => a + (w.turnsPerSec || 0), 0);
    fill(cards,
      card('workers', 'Workers', num(ws.length)),
      card('slots', 'Slots in use', num(slots[0]) + ' / ' + num(slots[1])),
      card('tps', 'Turns per second', num(tps, 1)),
      card('backlog', 'Backlog', num(s.backlog)),
      card('dead', 'Dead letters', num(s.deadLetters)),
      card('cooling', 'Profiles cooling down', num(cooling.length)));
    fill(workers, ws.length ? h('table', { class: 'list' },
      h('thead', null, h('tr', null, ['Worker', 'Version', 'Slots', 'Lanes held', 'Lanes waiting', 'Turns/s', 'Turns', 'Last seen'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, ws.map((w) => h('tr', { 'data-worker': w.id },
        h('th', { scope: 'row' }, h('code', null, String(w.id))),
        h('td', null, String(w.version ?? '')),
        h('td', null, h('meter', { min: 0, max: w.slotsTotal || 1, value: w.slotsUsed || 0, 'aria-label': 'slots used' }), ' ', num(w.slotsUsed) + ' / ' + num(w.slotsTotal)),
        h('td', { class: 'num' }, num(w.lanesHeld)),
        h('td', { class: 'num' }, num(w.lanesWaiting)),
        h('td', { class: 'num' }, num(w.turnsPerSec, 1)),
        h('td', { class: 'num' }, num(w.turnsTotal)),
        h('td', null, h('time', { title: when(w.lastSeen) }, ago(w.lastSeen))))))) : h('p', { class: 'empty' }, 'No worker answers.'));
    fill(profiles, aps.length ? h('table', { class: 'list' },
      h('thead', null, h('tr', null, ['Profile', 'Provider', 'State', 'Cooling down until', 'Reason', 'Failures'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, aps.map((p) => h('tr', null,
        h('th', { scope: 'row' }, h('code', null, String(p.id))),
        h('td', null, String(p.provider ?? '')),
        h('td', null, h('span', { class: 'chip state-' + String(p.state ?? '').replace(/[^a-z-]/g, '') }, String(p.state ?? ''))),
        h('td', null, p.cooldownUntil ? h('time', { title: when(p.cooldownUntil) }, ago(p.cooldownUntil)) : '—'),
        h('td', null, String(p.reason ?? '')),
        h('td', { class: 'num' }, num(p.failures)))))) : h('p', { class: 'empty' }, 'No auth profiles.'));
    live.textContent = 'Live · updated ' + (s.at ? new Date(s.at).toLocaleTimeString() : new Date().toLocaleTimeString());
    main.dataset.fleetAt = String(s.at ?? '');
  };
  draw(snap);
  stream('/api/fleet/events', {
    signal,
    onEvent: (ev) => { if (ev.event === 'fleet' && ev.data && typeof ev.data === 'object') draw(ev.data); },
  }).catch((e) => { if (!signal.aborted) live.textContent = 'Not live: ' + e.message; });
}

function card(k, label, value) {
  return h('div', { class: 'stat', 'data-k': k }, h('div', { class: 'value' }, value), h('div', { class: 'label' }, label));
}
