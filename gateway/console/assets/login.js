// login.js asks for a gateway token and checks it with GET /api/me. The
// field has no name and the form no action: the token is never submitted
// as a form (the CSP's form-action 'none' refuses that too), so it never
// lands in a URL.
import { h, fill } from './dom.js';
import { get, token, APIError } from './api.js';

export async function loginPage({ main, signedIn }) {
  // A gateway without a token file answers loopback callers without one.
  if (!token.get()) {
    try {
      const me = await get('/api/me');
      if (me?.local) { signedIn(me); return; }
    } catch { /* a token is needed */ }
  }
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, 'aria-describedby': 'token-help' });
  const msg = h('p', { class: 'error', role: 'alert', id: 'login-error' });
  const form = h('form', { class: 'login card', novalidate: true, onsubmit: async (e) => {
    e.preventDefault();
    const t = input.value.trim();
    if (!t) { msg.textContent = 'Enter a gateway token.'; return; }
    token.set(t);
    try {
      const me = await get('/api/me');
      input.value = '';
      signedIn(me);
    } catch (err) {
      token.clear();
      msg.textContent = err instanceof APIError && err.status === 401 ? 'The gateway does not know this token.' : 'Log-in failed: ' + err.message;
      input.focus();
    }
  } },
  h('h1', null, 'Log in'),
  h('div', { class: 'field' },
    h('label', { for: 'token' }, 'Gateway token'),
    input,
    h('small', { id: 'token-help' }, 'The bearer token your operator gave you (bin/gateway token new). It stays in this tab only.')),
  h('button', { type: 'submit', class: 'primary' }, 'Log in'),
  msg);
  fill(main, form);
  input.focus();
}
