// End-to-end: SIGTERM while a stream is in flight: the stream still completes, new connections are refused,
// and `fathom serve` exits 0.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import OpenAI from 'openai';

import { startServer, tokenizerDir } from './server_process.mjs';

const skip = tokenizerDir() ? false : 'the DeepSeek tokenizer directory is not available';

test('SIGTERM drains the requests in flight, then exits 0', { skip }, async () => {
  const server = await startServer({ servedModelName: 'tiny' });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
  const stream = await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: 120, temperature: 0,
    ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  let signalled = false;
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (!signalled && chunk.choices[0]?.delta?.content) {
      signalled = true;
      server.process.kill('SIGTERM');
      await new Promise((resolve) => setTimeout(resolve, 200));
      await assert.rejects(fetch(`${server.url}/health`), 'new connections must be refused while draining');
    }
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(signalled);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 120);
  const { code } = await server.stop();
  assert.equal(code, 0, server.output());
  assert.match(server.output(), /SIGTERM received/);
});
