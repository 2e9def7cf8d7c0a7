// Models, refusals and errors through the official SDK: every refusal is
// OpenAI's error shape with the status the SDK maps to its error class.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const base = process.env.OPENAI_BASE_URL;
const token = (name) => process.env[`TOKEN_${name.toUpperCase()}`];
const acme = new OpenAI({ maxRetries: 0, apiKey: token('acme') });
const beta = new OpenAI({ maxRetries: 0, apiKey: token('beta') });
const viewer = new OpenAI({ maxRetries: 0, apiKey: token('viewer') });
const limited = new OpenAI({ maxRetries: 0, apiKey: token('limited') });
const nobody = new OpenAI({ maxRetries: 0, apiKey: 'nobody' });
const out = {};

const is = (cls, status, check) => (err) => {
  assert.ok(err instanceof cls, `${err?.constructor?.name}: ${err?.message}`);
  assert.equal(err.status, status);
  assert.equal(typeof err.error?.message, 'string');
  assert.equal(typeof err.error?.type, 'string');
  if (check) check(err);
  return true;
};

// Models: every alias and listed model, or only what a token may name.
{
  const all = [];
  for await (const m of acme.models.list()) all.push(m.id);
  assert.deepEqual(all, ['fast', 'scripted', 'scripted/echo', 'scripted/script']);
  const some = [];
  for await (const m of limited.models.list()) some.push(m.id);
  assert.deepEqual(some, ['fast']);
  assert.deepEqual(await acme.models.retrieve('scripted/echo'), { id: 'scripted/echo', object: 'model', created: 0, owned_by: 'lanefleet' });
  assert.equal((await limited.models.retrieve('fast')).id, 'fast');
  await assert.rejects(limited.models.retrieve('scripted/echo'), is(OpenAI.NotFoundError, 404, (e) => assert.equal(e.code, 'model_not_found')));
  await assert.rejects(acme.models.retrieve('nope'), is(OpenAI.NotFoundError, 404));
  await assert.rejects(limited.chat.completions.create({ model: 'scripted/echo', messages: [{ role: 'user', content: 'x' }] }),
    is(OpenAI.NotFoundError, 404, (e) => assert.equal(e.code, 'model_not_found')));
  const ok = await limited.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: 'x' }] });
  assert.equal(ok.choices[0].message.content, 'echo: x');
}

// Another tenant's response and session are not found.
{
  const r = await acme.responses.create({ model: 'fast', user: 'gina', input: 'mine' });
  out.acmeResponse = r.id;
  await assert.rejects(beta.responses.retrieve(r.id), is(OpenAI.NotFoundError, 404));
  await assert.rejects(beta.responses.retrieve(r.id, { stream: true }), is(OpenAI.NotFoundError, 404));
  await assert.rejects(beta.responses.cancel(r.id), is(OpenAI.NotFoundError, 404));
  await assert.rejects(beta.responses.create({ model: 'fast', input: 'theirs', previous_response_id: r.id }),
    is(OpenAI.NotFoundError, 404, (e) => assert.equal(e.param, 'previous_response_id')));
  await assert.rejects(beta.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: 'theirs' }] }, { headers: { 'Lanefleet-Session': 'acme:openai-user:gina' } }),
    is(OpenAI.NotFoundError, 404));
  await assert.rejects(acme.responses.retrieve('resp_garbage'), is(OpenAI.NotFoundError, 404));
  // The same user name in another tenant is another session.
  const b = await beta.responses.create({ model: 'fast', user: 'gina', input: 'theirs' });
  assert.equal(b.output_text, 'echo: theirs');
  // The owner reads it, with the header naming its session.
  const mine = await acme.responses.retrieve(r.id);
  assert.equal(mine.output_text, 'echo: mine');
  const viaHeader = await acme.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: 'again' }] }, { headers: { 'Lanefleet-Session': 'acme:openai-user:gina' } });
  assert.equal(viaHeader.choices[0].message.content, 'echo: again');
  // A viewer reads but may not send.
  assert.equal((await viewer.responses.retrieve(r.id)).status, 'completed');
  await assert.rejects(viewer.responses.create({ model: 'fast', input: 'x' }), is(OpenAI.PermissionDeniedError, 403));
  await assert.rejects(nobody.models.list(), is(OpenAI.AuthenticationError, 401));
}

// A model the fleet refuses: a 400 before any output, streamed or not.
{
  const refused = (e) => assert.match(e.message, /nope\/model/);
  await assert.rejects(acme.chat.completions.create({ model: 'nope/model', messages: [{ role: 'user', content: 'x' }] }), is(OpenAI.BadRequestError, 400, refused));
  await assert.rejects(async () => {
    for await (const _ of await acme.chat.completions.create({ model: 'nope/model', stream: true, messages: [{ role: 'user', content: 'x' }] }));
  }, is(OpenAI.BadRequestError, 400, refused));
  await assert.rejects(async () => {
    for await (const _ of await acme.responses.create({ model: 'nope/model', stream: true, input: 'x' }));
  }, is(OpenAI.BadRequestError, 400, refused));
  // A response that failed reads as failed.
  const bg = await acme.responses.create({ model: 'nope/model', background: true, input: 'x' });
  let r = bg;
  while (r.status === 'queued' || r.status === 'in_progress') r = await acme.responses.retrieve(bg.id);
  assert.equal(r.status, 'failed');
  assert.equal(r.error.code, 'invalid_prompt');
}

// Requests the gateway refuses.
{
  await assert.rejects(acme.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: 'y' }] }),
    is(OpenAI.BadRequestError, 400));
  await assert.rejects(acme.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://example.com/cat.png' } }] }] }),
    is(OpenAI.BadRequestError, 400, (e) => assert.equal(e.param, 'messages[0].content[0].image_url')));
  await assert.rejects(acme.chat.completions.create({ model: 'fast', n: 2, messages: [{ role: 'user', content: 'x' }] }),
    is(OpenAI.BadRequestError, 400, (e) => assert.equal(e.param, 'n')));
  for (const [path, body, type] of [
    ['/chat/completions', '{"model": "fast", "messages": [', 'application/json'],
    ['/responses', 'not json', 'application/json'],
    ['/chat/completions', '{"model":"fast","messages":[{"role":"user","content":"x"}]}', 'text/plain'],
    ['/responses', '{"model":"fast","input":7}', 'application/json'],
  ]) {
    const res = await fetch(base + path, { method: 'POST', headers: { Authorization: `Bearer ${token('acme')}`, 'Content-Type': type }, body });
    assert.ok(res.status === 400 || res.status === 415, `${path} ${body}: ${res.status}`);
    const j = await res.json();
    assert.deepEqual(Object.keys(j.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(j.error.type, 'invalid_request_error');
  }
  // The SDK surfaces the same error for bad JSON as a BadRequestError.
  const raw = await fetch(base + '/chat/completions', { method: 'POST', headers: { Authorization: `Bearer ${token('acme')}`, 'Content-Type': 'application/json' }, body: '{' });
  assert.equal(raw.status, 400);
}

console.log(JSON.stringify(out));
