// The Responses API through the official SDK: streaming (the SDK's stream
// helper), previous_response_id, function tools and their outputs,
// background with polling, resuming a stream by sequence number, cancel.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ maxRetries: 0 });
const out = {};
const script = (s) => '#script ' + JSON.stringify(s);
const collect = async (stream, until) => {
  const evs = [];
  for await (const ev of stream) {
    evs.push(ev);
    if (until && until(ev)) break;
  }
  return evs;
};
const contiguous = (evs, from = 0) => evs.forEach((ev, i) => assert.equal(ev.sequence_number, from + i, `event ${i} (${ev.type})`));

// Streamed, through the SDK's helper (which checks every event against
// the response it accumulates).
let first;
{
  const stream = client.responses.stream({ model: 'fast', user: 'erin', input: 'hello' });
  const evs = await collect(stream);
  const final = await stream.finalResponse();
  assert.equal(final.output_text, 'echo: hello');
  assert.equal(final.status, 'completed');
  assert.equal(final.model, 'fast');
  assert.ok(final.usage.input_tokens > 0 && final.usage.output_tokens > 0);
  contiguous(evs);
  const types = evs.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.completed');
  for (const t of ['response.output_item.added', 'response.content_part.added', 'response.output_text.delta', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done']) {
    assert.ok(types.includes(t), t);
  }
  first = final.id;
  out.first = first;
}

// previous_response_id continues the session; not streamed.
{
  const r = await client.responses.create({ model: 'fast', input: 'more', previous_response_id: first });
  assert.equal(r.output_text, 'echo: more');
  assert.notEqual(r.id, first);
  assert.equal(r.object, 'response');
}

// A function tool, its call and its output.
{
  const tools = [{ type: 'function', name: 'get_weather', description: 'weather of a city', strict: true, parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false } }];
  const r1 = await client.responses.create({
    model: 'scripted', user: 'frank', tools,
    input: script({ replies: [{ toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: { city: 'Paris' } }] }, { text: 'It is sunny in Paris' }] }),
  });
  const fc = r1.output.find((o) => o.type === 'function_call');
  assert.ok(fc, JSON.stringify(r1.output));
  assert.equal(fc.call_id, 'call_1');
  assert.equal(fc.name, 'get_weather');
  assert.deepEqual(JSON.parse(fc.arguments), { city: 'Paris' });
  const r2 = await client.responses.create({
    model: 'scripted', tools, previous_response_id: r1.id,
    input: [{ type: 'function_call_output', call_id: 'call_1', output: 'sunny, 24C' }],
  });
  assert.equal(r2.output_text, 'It is sunny in Paris');
}

const slow = (chunks, delayMs) => script({ replies: [{ text: 'abcdefghijklmnopqrstuvwxyz0123456789'.slice(0, chunks), chunks, delayMs }] });

// Background: returns at once, then polled to the end.
{
  const r = await client.responses.create({ model: 'scripted', background: true, input: slow(8, 20) });
  assert.ok(['queued', 'in_progress'].includes(r.status), r.status);
  assert.equal(r.background, true);
  // Polled through another gateway: the id is all it needs.
  const other = new OpenAI({ maxRetries: 0, baseURL: process.env.OTHER_GATEWAY_URL });
  let polled = r;
  const seen = new Set();
  while (polled.status === 'queued' || polled.status === 'in_progress') {
    seen.add(polled.status);
    polled = await other.responses.retrieve(r.id);
  }
  assert.equal(polled.status, 'completed');
  assert.equal(polled.output_text, 'abcdefgh');
  out.polledStates = [...seen];
}

// Resume by sequence number: a stream cut mid-run and resumed after the
// last event seen gives the rest, nothing repeated, numbered as a full
// replay numbers it.
{
  const r = await client.responses.create({ model: 'scripted', background: true, input: slow(12, 40) });
  const head = await collect(await client.responses.retrieve(r.id, { stream: true }), (ev) => ev.type === 'response.output_text.delta' && ev.delta.length > 0 && ev.sequence_number >= 6);
  const last = head.at(-1).sequence_number;
  const other = new OpenAI({ maxRetries: 0, baseURL: process.env.OTHER_GATEWAY_URL });
  const tail = await collect(await other.responses.retrieve(r.id, { stream: true, starting_after: last }));
  contiguous(head);
  contiguous(tail, last + 1);
  assert.equal(tail.at(-1).type, 'response.completed');
  const full = await collect(await client.responses.retrieve(r.id, { stream: true }));
  assert.deepEqual([...head, ...tail], full);
  const text = [...head, ...tail].filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(text, 'abcdefghijkl');
  // The SDK's helper resumes too.
  const resumed = client.responses.stream({ response_id: r.id, starting_after: last });
  const evs = await collect(resumed);
  assert.deepEqual(evs, tail);
  assert.equal((await resumed.finalResponse()).output_text, 'abcdefghijkl');
  out.resumedAfter = last;
}

// Cancel a background response mid-run.
{
  const r = await client.responses.create({ model: 'scripted', background: true, input: slow(30, 200) });
  await collect(await client.responses.retrieve(r.id, { stream: true }), (ev) => ev.type === 'response.output_text.delta');
  const c = await client.responses.cancel(r.id);
  assert.equal(c.status, 'cancelled');
  assert.equal(c.output_text, undefined, 'output_text is the SDK\'s, not the wire\'s (cancel does not add it)');
  const said = c.output.filter((o) => o.type === 'message').flatMap((o) => o.content).map((p) => p.text).join('');
  assert.ok(said.length > 0 && said.length < 30, said);
  const again = await client.responses.retrieve(r.id);
  assert.equal(again.status, 'cancelled');
}

// The wire itself: named events, one data line each, keep-alive comments
// on a quiet stream (the SDK skips them), no [DONE] after a response.
{
  const r = await client.responses.create({ model: 'scripted', background: true, input: slow(3, 300) });
  const res = await fetch(`${process.env.OPENAI_BASE_URL}/responses/${r.id}?stream=true`, { headers: { Authorization: `Bearer ${process.env.OPENAI_API_KEY}` } });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const body = await res.text();
  assert.ok(body.startsWith('event: response.created\ndata: {"'), body.slice(0, 80));
  assert.ok(body.includes('\n\n: keep-alive\n\n'), 'a keep-alive comment');
  assert.ok(body.trimEnd().split('\n\n').at(-1).startsWith('event: response.completed\ndata: '));
  assert.ok(!body.includes('[DONE]'));
}

console.log(JSON.stringify(out));
