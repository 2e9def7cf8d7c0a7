// api.js calls the gateway's JSON API and reads its event streams. The
// token lives in this tab's sessionStorage and travels only in the
// Authorization header: never in a URL, so never in a log or a Referer.

const tokenKey = 'lanefleet.token';

export const token = {
  get() { return sessionStorage.getItem(tokenKey) || ''; },
  set(t) { sessionStorage.setItem(tokenKey, t); },
  clear() { sessionStorage.removeItem(tokenKey); },
};

// APIError is a refused request: status and the problem's detail.
export class APIError extends Error {
  constructor(status, problem) {
    const p = problem && typeof problem === 'object' ? problem : {};
    super(p.detail || p.title || (typeof problem === 'string' && problem.trim()) || 'HTTP ' + status);
    this.status = status;
    this.code = p.code || '';
  }
}

function headers(extra) {
  const hd = { Accept: 'application/json', ...extra };
  const t = token.get();
  if (t) hd.Authorization = 'Bearer ' + t;
  return hd;
}

// onUnauthorized is called when the gateway refuses the token (401).
let unauthorized = () => {};
export function onUnauthorized(f) { unauthorized = f; }

// call sends a request and returns the decoded JSON answer; a refusal
// throws APIError.
export async function call(method, path, body, { signal } = {}) {
  const init = { method, headers: headers(), signal, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  let data = text;
  if ((r.headers.get('Content-Type') || '').includes('json') && text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!r.ok) {
    if (r.status === 401) unauthorized();
    throw new APIError(r.status, data);
  }
  return data;
}

// get is call('GET', …).
export const get = (path, opts) => call('GET', path, undefined, opts);

// session is the API path of a session (its key is one escaped segment).
export function sessionPath(key, ...rest) {
  return '/api/sessions/' + encodeURIComponent(key) + rest.map((p) => '/' + encodeURIComponent(p)).join('');
}

// stream reads server-sent events from path with fetch (EventSource
// cannot send the token) and calls onEvent({id, event, data}) for each,
// data parsed as JSON. It resumes after the last id it saw when the
// connection drops (Last-Event-ID), until done(ev) says an event was the
// last, signal aborts, or the gateway refuses. With send = {body,
// follow} it first POSTs body to path (a send that streams its run:
// onRun sees the run's id) and resumes on follow(runId), that run's
// events. It resolves when the stream is over.
export async function stream(path, { onEvent, done = () => false, signal, send, onRun } = {}) {
  let last = 0;
  let posting = Boolean(send);
  let wait = 500;
  while (!signal?.aborted) {
    const hd = headers({ Accept: 'text/event-stream' });
    const init = { method: 'GET', headers: hd, signal, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' };
    if (posting) {
      init.method = 'POST';
      hd['Content-Type'] = 'application/json';
      init.body = JSON.stringify(send.body);
    } else if (last > 0) {
      hd['Last-Event-ID'] = String(last);
    }
    let r;
    try {
      r = await fetch(path, init);
    } catch (e) {
      if (signal?.aborted) return;
      if (posting) throw e; // the send itself failed: say so, never send twice
      await sleep(wait, signal);
      wait = Math.min(wait * 2, 10000);
      continue;
    }
    if (!r.ok) {
      const text = await r.text();
      let p = text;
      try { p = JSON.parse(text); } catch { /* text */ }
      if (r.status === 401) unauthorized();
      throw new APIError(r.status, p);
    }
    if (posting) {
      const run = r.headers.get('Lanefleet-Run') || '';
      if (onRun) onRun(run);
      if (run && send.follow) path = send.follow(run);
      posting = false;
    }
    wait = 500;
    let ended = false;
    try {
      ended = await readEvents(r.body, (ev) => {
        if (ev.id) last = Number(ev.id) || last;
        if (ev.event === 'error') throw new APIError(ev.data?.status || 502, ev.data);
        onEvent(ev);
        return done(ev);
      });
    } catch (e) {
      if (e instanceof APIError || !(e instanceof TypeError || e?.name === 'AbortError')) throw e;
      if (signal?.aborted) return;
    }
    if (ended) return;
    await sleep(wait, signal);
  }
}

// readEvents parses an event stream's body; handle returns true to end.
// It returns whether handle ended it.
async function readEvents(body, handle) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let cur = { id: '', event: '', data: '' };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return false;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (cur.data !== '' || cur.event !== '') {
            let data = cur.data;
            try { data = JSON.parse(cur.data); } catch { /* not JSON */ }
            if (handle({ id: cur.id, event: cur.event || 'message', data })) return true;
          }
          cur = { id: '', event: '', data: '' };
        } else if (line.startsWith(':')) {
          // a comment: the keep-alive
        } else {
          const i = line.indexOf(':');
          const name = i < 0 ? line : line.slice(0, i);
          let v = i < 0 ? '' : line.slice(i + 1);
          if (v.startsWith(' ')) v = v.slice(1);
          if (name === 'id') cur.id = v;
          else if (name === 'event') cur.event = v;
          else if (name === 'data') cur.data += (cur.data ? '\n' : '') + v;
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}
