// Chat completions through the official SDK: stream and not, usage,
// reasoning, conversation continuity, the transcript check, tool calls.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ maxRetries: 0 });
const out = {};
const script = (s) => '#script ' + JSON.stringify(s);

// Not streamed, an alias, a stable user.
{
  const { data, response } = await client.chat.completions
    .create({ model: 'fast', user: 'alice', messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }] })
    .withResponse();
  assert.equal(data.object, 'chat.completion');
  assert.match(data.id, /^chatcmpl-/);
  assert.equal(data.model, 'fast');
  assert.equal(data.choices[0].message.role, 'assistant');
  assert.equal(data.choices[0].message.content, 'echo: hi');
  assert.equal(data.choices[0].finish_reason, 'stop');
  assert.ok(data.usage.prompt_tokens > 0 && data.usage.completion_tokens > 0);
  assert.equal(data.usage.total_tokens, data.usage.prompt_tokens + data.usage.completion_tokens);
  out.aliceSession = response.headers.get('lanefleet-session');
}

// Streamed with include_usage, repeating the whole conversation.
{
  const stream = await client.chat.completions.create({
    model: 'fast', user: 'alice', stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'echo: hi' }, { role: 'user', content: 'again' }],
  });
  let text = '', chunks = 0, usage = null, finish = null, role = null, ids = new Set();
  for await (const chunk of stream) {
    chunks++;
    ids.add(chunk.id);
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) {
      assert.deepEqual(chunk.choices, []);
      usage = chunk.usage;
      continue;
    }
    const c = chunk.choices[0];
    if (c.delta.role) role = c.delta.role;
    if (c.delta.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(ids.size, 1);
  assert.equal(role, 'assistant');
  assert.equal(text, 'echo: again');
  assert.equal(finish, 'stop');
  assert.ok(usage && usage.total_tokens > 0, 'a usage chunk');
  assert.ok(chunks >= 4, `${chunks} chunks`);
}

// Only the new message, through the other gateway: the session remembers.
{
  const other = new OpenAI({ maxRetries: 0, baseURL: process.env.OTHER_GATEWAY_URL });
  const r = await other.chat.completions.create({ model: 'fast', user: 'alice', messages: [{ role: 'user', content: 'third' }] });
  assert.equal(r.choices[0].message.content, 'echo: third');
}

// A conversation that is not the session's is refused.
{
  await assert.rejects(
    client.chat.completions.create({
      model: 'fast', user: 'alice',
      messages: [{ role: 'user', content: 'third' }, { role: 'assistant', content: 'something else' }, { role: 'user', content: 'x' }],
    }),
    (err) => err instanceof OpenAI.ConflictError && err.status === 409 && err.code === 'conversation_mismatch',
  );
}

// No user, a whole history: a fresh session that imports it.
{
  const { data, response } = await client.chat.completions
    .create({
      model: 'fast',
      messages: [{ role: 'system', content: 's' }, { role: 'user', content: 'one' }, { role: 'assistant', content: 'echo: one' }, { role: 'user', content: 'two' }],
    })
    .withResponse();
  assert.equal(data.choices[0].message.content, 'echo: two');
  out.freshSession = response.headers.get('lanefleet-session');
}

// Reasoning, through the SDK's stream helper.
{
  const stream = client.chat.completions.stream({
    model: 'scripted', user: 'carol',
    messages: [{ role: 'user', content: script({ replies: [{ thinking: 'let me think', text: 'the answer' }] }) }],
  });
  let reasoning = '';
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta;
    if (d && d.reasoning_content) reasoning += d.reasoning_content;
  }
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, 'the answer');
  assert.equal(reasoning, 'let me think');
}

// A client tool call and its result.
{
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const user = script({ replies: [{ toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: { city: 'Paris' } }] }, { text: 'It is sunny in Paris' }] });
  const stream = await client.chat.completions.create({ model: 'scripted', user: 'bob', stream: true, tools, messages: [{ role: 'user', content: user }] });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    for (const tc of c.delta.tool_calls ?? []) {
      calls[tc.index] ??= { id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: '' } };
      calls[tc.index].function.arguments += tc.function.arguments ?? '';
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].id, 'call_1');
  assert.equal(calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'Paris' });
  const r = await client.chat.completions.create({
    model: 'scripted', user: 'bob', tools,
    messages: [{ role: 'user', content: user }, { role: 'assistant', content: null, tool_calls: calls }, { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 24C' }],
  });
  assert.equal(r.choices[0].message.content, 'It is sunny in Paris');
  assert.equal(r.choices[0].finish_reason, 'stop');
  // Not streamed, the calls come in the message.
  const r2 = await client.chat.completions.create({ model: 'scripted', user: 'dave', tools, messages: [{ role: 'user', content: user }] });
  assert.equal(r2.choices[0].finish_reason, 'tool_calls');
  assert.equal(r2.choices[0].message.tool_calls[0].function.name, 'get_weather');
}

// An image as a data: URL.
{
  const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
  const r = await client.chat.completions.create({
    model: 'fast', user: 'ivy',
    messages: [{ role: 'user', content: [{ type: 'text', text: 'what is this' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } }] }],
  });
  assert.equal(r.choices[0].message.content, 'echo: what is this');
}

// The wire itself: unnamed data lines, [DONE] last.
{
  const res = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
    method: 'POST', headers: { Authorization: `Bearer ${process.env.OPENAI_API_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'fast', stream: true, messages: [{ role: 'user', content: 'wire' }] }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const frames = (await res.text()).split('\n\n').filter((f) => f !== '' && !f.startsWith(':'));
  assert.ok(frames.every((f) => f.startsWith('data: ') && !f.includes('\n')), frames.join('|'));
  assert.equal(frames.at(-1), 'data: [DONE]');
  const first = JSON.parse(frames[0].slice(6));
  assert.deepEqual(first.choices, [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]);
}

console.log(JSON.stringify(out));
