// dom.js builds elements with DOM calls only. Text from data goes in as
// text nodes (never innerHTML: the page's CSP requires Trusted Types, so
// a string assigned to an HTML sink throws), links only ever point inside
// the console, and images only ever show data: URLs of image types.

// h returns a new element: props set its attributes (on* adds
// listeners), children are elements or text.
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'href') el.setAttribute('href', safeHref(v));
      else if (k === 'src') el.setAttribute('src', safeImage(v));
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'value') el.value = v;
      else if (k === 'checked' || k === 'disabled' || k === 'open' || k === 'selected') el[k] = Boolean(v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  add(el, children);
  return el;
}

// add appends children (nested arrays, elements, text; null skipped).
export function add(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// clear empties el and fills it with children.
export function fill(el, ...children) {
  el.replaceChildren();
  return add(el, children);
}

// safeHref lets through the console's own routes only ("#/…"): a link
// built from data can never become javascript:, data: or another site.
function safeHref(v) {
  return typeof v === 'string' && v.startsWith('#/') ? v : '#/';
}

const imageTypes = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

// imageURL is a data: URL for base64 image data of a known image type,
// or '' (nothing is shown).
export function imageURL(mimeType, data) {
  if (!imageTypes.has(String(mimeType).toLowerCase()) || typeof data !== 'string' || !/^[A-Za-z0-9+/=\s]*$/.test(data)) return '';
  return 'data:' + String(mimeType).toLowerCase() + ';base64,' + data.replace(/\s/g, '');
}

function safeImage(v) {
  return typeof v === 'string' && /^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=]*$/.test(v) ? v : '';
}

// route is the console's address of a page: each part is encoded, so a
// session key is always one opaque segment.
export function route(...parts) {
  return '#/' + parts.map((p) => encodeURIComponent(String(p))).join('/');
}

// pretty is a value as indented JSON text (a string that holds JSON is
// parsed first), for a <pre>.
export function pretty(v) {
  if (typeof v === 'string') {
    try { v = JSON.parse(v); } catch { return v; }
  }
  try { return JSON.stringify(v, null, 2) ?? ''; } catch { return String(v); }
}

// clip shortens s to n characters.
export function clip(s, n) {
  s = String(s ?? '');
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

// when is a time (Unix ms, or a date string) as a short local date and time.
export function when(t) {
  const d = toDate(t);
  if (!d) return '';
  return d.toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

// ago is a time relative to now ("12 s ago", "in 3 min").
export function ago(t) {
  const d = toDate(t);
  if (!d) return '';
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  const a = Math.abs(s);
  const v = a < 60 ? a + ' s' : a < 3600 ? Math.round(a / 60) + ' min' : a < 86400 ? Math.round(a / 3600) + ' h' : Math.round(a / 86400) + ' d';
  return s >= 0 ? v + ' ago' : 'in ' + v;
}

function toDate(t) {
  if (t === undefined || t === null || t === '' || t === 0) return null;
  const d = typeof t === 'number' ? new Date(t) : new Date(String(t));
  return isNaN(d.getTime()) ? null : d;
}

// num is a number with grouping; usd a cost in dollars.
export function num(n, digits = 0) {
  return typeof n === 'number' && isFinite(n) ? n.toLocaleString(undefined, { maximumFractionDigits: digits }) : '—';
}

export function usd(n) {
  if (typeof n !== 'number' || !isFinite(n)) return '—';
  return '$' + (n === 0 ? '0' : n < 0.01 ? n.toFixed(4) : n.toFixed(2));
}

// ms is a duration in milliseconds, short.
export function ms(n) {
  if (typeof n !== 'number' || !isFinite(n)) return '';
  return n < 1000 ? Math.round(n) + ' ms' : (n / 1000).toFixed(n < 10000 ? 2 : 1) + ' s';
}

// button is a real <button type="button">.
export function button(label, onclick, props = {}) {
  return h('button', { type: 'button', ...props, onclick }, label);
}

// field is a labelled control.
export function field(label, control, hint) {
  const id = control.id || (control.id = 'f' + Math.random().toString(36).slice(2));
  return h('div', { class: 'field' }, h('label', { for: id }, label), control, hint ? h('small', null, hint) : null);
}

// select is a <select> of [value, label] options.
export function select(id, options, value) {
  return h('select', { id }, options.map(([v, l]) => h('option', { value: v, selected: v === value }, l)));
}
