// transcript.js renders a session's history (pi session entries) and a
// turn as it streams: user and assistant messages, thinking folded in a
// <details>, tool calls folded with their arguments and, once known,
// their results; images as data: URLs of image types only.
import { h, add, fill, pretty, when, imageURL, clip } from './dom.js';

// shown is how many entries a transcript shows before "Show earlier".
const shown = 200;

// renderTranscript fills el with entries, the newest last.
export function renderTranscript(el, entries) {
  const calls = new Map(); // tool call id -> its <details>
  const list = entries.filter((e) => e && e.type !== 'session');
  let from = Math.max(0, list.length - shown);
  const draw = () => {
    const items = [];
    if (from > 0) {
      items.push(h('li', { class: 'earlier' }, h('button', { type: 'button', onclick: () => { from = Math.max(0, from - shown); draw(); } },
        'Show ' + Math.min(from, shown) + ' earlier of ' + from)));
    }
    calls.clear();
    for (const e of list.slice(from)) {
      const item = entry(e, calls);
      if (item) items.push(item);
    }
    fill(el, items.length ? items : h('li', { class: 'empty' }, 'No messages yet.'));
  };
  draw();
}

function entry(e, calls) {
  if (e.type === 'message' && e.message) return message(e.message, e.timestamp, calls);
  const f = e;
  switch (e.type) {
    case 'compaction':
      return h('li', { class: 'note' }, h('details', null, h('summary', null, 'Compacted the conversation', f.tokensBefore ? ' (' + f.tokensBefore + ' tokens before)' : ''),
        h('pre', { class: 'wrap' }, String(f.summary ?? ''))));
    case 'model_change':
      return h('li', { class: 'note' }, 'Model changed to ', h('code', null, [f.provider, f.modelId].filter(Boolean).join('/')));
    case 'thinking_level_change':
      return h('li', { class: 'note' }, 'Thinking level ', h('code', null, String(f.thinkingLevel ?? '')));
    default:
      return h('li', { class: 'note' }, h('details', null, h('summary', null, 'Entry ', h('code', null, String(e.type ?? '?'))), h('pre', null, clip(pretty(e), 20000))));
  }
}

function blocks(content) {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return Array.isArray(content) ? content : [];
}

function message(m, ts, calls) {
  const role = String(m.role ?? '');
  const stamp = h('time', { class: 'when' }, when(m.timestamp || ts));
  if (role === 'toolResult') {
    const body = toolResultBody(m.content, m.isError);
    const call = calls.get(m.toolCallId);
    if (call) {
      call.classList.add(m.isError ? 'failed' : 'done');
      add(call.querySelector('summary .state'), m.isError ? ' — failed' : ' — done');
      add(call, body);
      return null;
    }
    return h('li', { class: 'msg tool' }, h('details', { class: 'tool ' + (m.isError ? 'failed' : 'done') },
      h('summary', null, 'Result of ', h('code', null, String(m.toolName ?? '?')), m.isError ? ' (error)' : ''), body));
  }
  const li = h('li', { class: 'msg ' + (role === 'user' || role === 'assistant' ? role : 'other') },
    h('div', { class: 'meta' }, h('span', { class: 'who' }, role === 'assistant' ? 'Assistant' : role === 'user' ? 'User' : role), stamp,
      role === 'assistant' && m.model ? h('span', { class: 'muted' }, [m.provider, m.model].filter(Boolean).join('/')) : null));
  for (const b of blocks(m.content)) {
    switch (b?.type) {
      case 'text':
        li.append(h('div', { class: 'text' }, String(b.text ?? '')));
        break;
      case 'thinking':
        li.append(h('details', { class: 'thinking' }, h('summary', null, 'Thinking'), h('div', { class: 'text' }, String(b.thinking ?? ''))));
        break;
      case 'image': {
        const src = imageURL(b.mimeType, b.data);
        if (src) li.append(h('img', { src, alt: 'image (' + String(b.mimeType) + ')', class: 'image' }));
        break;
      }
      case 'toolCall': {
        const d = toolCall(b.name, b.arguments);
        calls.set(b.id, d);
        li.append(d);
        break;
      }
      default:
        li.append(h('pre', { class: 'wrap' }, clip(pretty(b), 20000)));
    }
  }
  if (m.errorMessage) li.append(h('p', { class: 'error' }, String(m.errorMessage)));
  return li;
}

// toolCall is a folded tool call: its name, then its arguments.
export function toolCall(name, args) {
  return h('details', { class: 'tool' },
    h('summary', null, 'Tool call ', h('code', null, String(name ?? '?')), h('span', { class: 'state' })),
    h('div', { class: 'label' }, 'Arguments'), h('pre', { class: 'args' }, clip(pretty(args ?? {}), 50000)));
}

// toolResultBody is a tool result's text and images.
function toolResultBody(content, isError) {
  const out = [h('div', { class: 'label' }, isError ? 'Error' : 'Result')];
  const text = [];
  for (const b of blocks(content)) {
    if (b?.type === 'text') text.push(String(b.text ?? ''));
    else if (b?.type === 'image') {
      const src = imageURL(b.mimeType, b.data);
      if (src) out.push(h('img', { src, alt: 'tool image', class: 'image' }));
    } else text.push(pretty(b));
  }
  out.splice(1, 0, h('pre', { class: 'result' + (isError ? ' error' : '') }, clip(text.join('\n'), 50000)));
  return out;
}

// LiveTurn shows one run as its events arrive: the user's message (when
// this tab sent it), then the reply streaming in, tool calls as they
// start and end, and the run's state.
export class LiveTurn {
  constructor(list, { text, images } = {}) {
    this.li = h('li', { class: 'msg assistant live', 'data-live': '' });
    if (text || images?.length) {
      const u = h('li', { class: 'msg user live' }, h('div', { class: 'meta' }, h('span', { class: 'who' }, 'User'), h('time', { class: 'when' }, when(Date.now()))),
        text ? h('div', { class: 'text' }, text) : null);
      list.querySelector(':scope > .empty')?.remove();
      list.append(u);
      this.user = u;
    }
    this.status = h('span', { class: 'run-state', 'data-state': 'sending' }, 'sending…');
    this.meta = h('div', { class: 'meta' }, h('span', { class: 'who' }, 'Assistant'), this.status);
    this.thinking = null;
    this.text = h('div', { class: 'text streamed' });
    this.li.append(this.meta, this.text);
    this.calls = new Map();
    list.querySelector(':scope > .empty')?.remove();
    list.append(this.li);
  }

  // run names the run being shown.
  run(id, href) {
    if (!id) return;
    this.runId = id;
    this.meta.append(h('a', { href, class: 'runlink' }, 'run ' + id));
    this.setState('running', 'running…');
  }

  setState(state, label) {
    this.status.dataset.state = state;
    this.status.textContent = label;
  }

  // add takes one event of the run.
  add(ev) {
    const e = ev.data || {};
    const d = e.data || {};
    switch (ev.event) {
      case 'assistant':
        // Text is the attempt's whole reply so far: a retried attempt's
        // text replaces what an aborted one showed.
        this.text.textContent = typeof d.text === 'string' ? d.text : this.text.textContent + (d.delta || '');
        break;
      case 'thinking':
        if (!this.thinking) {
          this.thinking = h('div', { class: 'text' });
          this.li.insertBefore(h('details', { class: 'thinking' }, h('summary', null, 'Thinking'), this.thinking), this.text);
        }
        this.thinking.textContent = typeof d.text === 'string' ? d.text : this.thinking.textContent + (d.delta || '');
        break;
      case 'tool': {
        let c = this.calls.get(d.toolCallId);
        if (!c) {
          c = toolCall(d.name, d.args);
          this.calls.set(d.toolCallId, c);
          this.li.append(c);
        }
        if (d.phase === 'result') {
          c.classList.add(d.isError ? 'failed' : 'done');
          c.querySelector('summary .state').textContent = d.isError ? ' — failed' : ' — done';
          add(c, toolResultBody(d.payload?.content ?? d.payload, d.isError));
        } else if (d.phase === 'start') {
          c.querySelector('summary .state').textContent = ' — running';
        }
        break;
      }
      case 'lifecycle':
        if (d.phase === 'retrying') this.setState('retrying', 'retrying in ' + Math.round((d.delayMs || 0) / 1000) + ' s: ' + (d.error || ''));
        else if (d.phase === 'aborted') this.setState('running', 'attempt ' + (d.attempt || '') + ' aborted, trying again');
        else if (d.phase === 'start' || d.phase === 'restart' || d.phase === 'retry') this.setState('running', 'running…');
        else if (d.phase === 'merged') this.setState('done', 'answered by another run');
        break;
      case 'compaction':
        this.setState('running', d.phase === 'start' ? 'compacting…' : 'running…');
        break;
      case 'final': {
        const res = d.result || {};
        const err = res.meta?.error;
        if (err) {
          this.setState('error', 'failed');
          this.li.append(h('p', { class: 'error', role: 'alert' }, String(err.kind || 'error') + ': ' + String(err.message || '')));
        } else if (res.meta?.heartbeatOk) {
          // A heartbeat the model acknowledged (HEARTBEAT_OK): not a message.
          this.text.textContent = '';
          this.setState('done', 'heartbeat: nothing to report');
        } else if (res.meta?.pendingToolCalls?.length) {
          this.setState('done', 'waiting for a tool call');
        } else {
          this.setState('done', 'done');
        }
        if (!this.text.textContent && res.payloads?.length) this.text.textContent = res.payloads.map((p) => p.text || '').join('\n');
        break;
      }
    }
  }

  // fail shows a refusal of the send or the stream.
  fail(err) {
    this.setState('error', 'failed');
    this.li.append(h('p', { class: 'error', role: 'alert' }, err.message || String(err)));
  }
}
