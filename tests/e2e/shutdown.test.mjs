// End-to-end: SIGTERM while a stream is in flight: the stream still completes, new connections are refused,
// and `fathom serve` exits 0; a signal during the model load ends the process at once.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import OpenAI from 'openai';

import { fathomBinary, startServer, tinyConfig, tokenizerDir } from './server_process.mjs';

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

test('SIGINT while the model loads ends the process at once, before it listens', async () => {
  // Dummy weights of a config that takes seconds to generate: the signal lands during the load.
  const modelDir = mkdtempSync(path.join(tmpdir(), 'fathom-e2e-load-'));
  const slowConfig = { ...tinyConfig, num_hidden_layers: 32, hidden_size: 1024, n_routed_experts: 64,
                       moe_intermediate_size: 512, intermediate_size: 2048 };
  writeFileSync(path.join(modelDir, 'config.json'), JSON.stringify(slowConfig));
  const child = spawn(fathomBinary(), ['serve', '--model', modelDir, '--load-format', 'dummy', '--skip-tokenizer-init',
                                       '--port', '0', '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (data) => { output += data.toString(); });
  child.stderr.on('data', (data) => { output += data.toString(); });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  await new Promise((resolve) => setTimeout(resolve, 300));
  const signalledAt = Date.now();
  child.kill('SIGINT');
  const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);  // a broken watcher must not load the whole model
  const { signal } = await exited;
  clearTimeout(killer);
  rmSync(modelDir, { recursive: true, force: true });
  assert.ok(Date.now() - signalledAt < 3000, `took ${Date.now() - signalledAt} ms:\n${output}`);
  assert.equal(signal, 'SIGINT', output);  // died by the signal, as a shell or systemd expects
  assert.match(output, /SIGINT received while loading: exiting/);  // the load's watcher took it, not the default
  assert.doesNotMatch(output, /listening on/);
});
