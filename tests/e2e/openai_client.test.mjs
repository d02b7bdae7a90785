// End-to-end: `fathom serve` (tiny dummy DeepSeek-V3 model, real DeepSeek tokenizer) driven by the official
// `openai` npm client and plain fetch. Run: node --test --test-concurrency=1 tests/e2e/*.test.mjs
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import OpenAI from 'openai';

import { getJson, startServer, tokenizerDir, waitFor } from './server_process.mjs';

const MODEL = 'tiny-deepseek';
const API_KEY = 'sk-fathom-e2e';
const skip = tokenizerDir() ? false : 'the DeepSeek tokenizer directory is not available';
const messages = [{ role: 'user', content: 'Write a haiku about the sea.' }];

let server;
let client;

before(async () => {
  if (skip) return;
  const extraArgs = ['--max-request-body-bytes', '1048576', '--enable-metrics', '--max-queued-requests', '100'];
  server = await startServer({ servedModelName: MODEL, apiKey: API_KEY, extraArgs });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, `fathom serve did not exit cleanly:\n${server.output()}`);
});

const authorized = (init = {}) => ({ ...init, headers: { Authorization: `Bearer ${API_KEY}`, ...(init.headers ?? {}) } });

async function collectChat(stream) {
  let text = '';
  let usage = null;
  const finish = [];
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.delta?.content ?? '';
      if (choice.finish_reason) finish.push(choice.finish_reason);
    }
  }
  return { text, usage, finish };
}

async function serverInfo() {
  return (await getJson(`${server.url}/get_server_info`, authorized())).body;
}

test('models list names the served model', { skip }, async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, MODEL);
});

test('streaming and non-streaming chat produce the same text', { skip }, async () => {
  const params = { model: MODEL, messages, max_tokens: 12, temperature: 0, ignore_eos: true };
  const plain = await client.chat.completions.create(params);
  assert.equal(plain.object, 'chat.completion');
  assert.equal(plain.choices[0].finish_reason, 'length');
  assert.equal(plain.usage.completion_tokens, 12);
  assert.ok(plain.usage.prompt_tokens > 5);
  assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + 12);
  assert.equal(typeof plain.usage.prompt_tokens_details.cached_tokens, 'number');

  const streamed = await collectChat(
    await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }));
  assert.equal(streamed.text, plain.choices[0].message.content);
  assert.deepEqual(streamed.finish, ['length']);
  assert.equal(streamed.usage.completion_tokens, 12);
  assert.equal(streamed.usage.prompt_tokens, plain.usage.prompt_tokens);

  const completion = await client.completions.create({ model: MODEL, prompt: 'The sea is', max_tokens: 10, temperature: 0, ignore_eos: true });
  let streamedCompletion = '';
  for await (const chunk of await client.completions.create({ model: MODEL, prompt: 'The sea is', max_tokens: 10, temperature: 0, ignore_eos: true, stream: true })) {
    streamedCompletion += chunk.choices[0]?.text ?? '';
  }
  assert.equal(streamedCompletion, completion.choices[0].text);
});

test('the same seed gives the same text', { skip }, async () => {
  const params = { model: MODEL, messages, max_tokens: 10, temperature: 0.9, top_p: 0.95, seed: 1234, ignore_eos: true };
  const first = await client.chat.completions.create(params);
  const second = await client.chat.completions.create(params);
  assert.equal(second.choices[0].message.content, first.choices[0].message.content);
  const three = await client.chat.completions.create({ ...params, n: 3 });
  assert.deepEqual(three.choices.map((choice) => choice.index), [0, 1, 2]);
  assert.equal(three.usage.completion_tokens, 30);
});

test('greedy output is identical alone and with 64 concurrent requests', { skip }, async () => {
  const prompts = Array.from({ length: 8 }, (_, i) => `Request ${i}: list some prime numbers.`);
  const params = (prompt) => ({ model: MODEL, prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
  const alone = [];
  for (const prompt of prompts) alone.push((await client.completions.create(params(prompt))).choices[0].text);
  const concurrent = await Promise.all(Array.from({ length: 64 }, (_, i) => client.completions.create(params(prompts[i % 8]))));
  concurrent.forEach((response, i) => assert.equal(response.choices[0].text, alone[i % 8], `request ${i}`));
  // Again beside requests that score their prompts (echo with logprobs) or change their logits, which take other
  // scheduling paths (scored rows per step, the host sampler): neither they nor the greedy ones change.
  const scoring = (prompt) => ({ model: MODEL, prompt, max_tokens: 1, temperature: 0, logprobs: 1, echo: true });
  const biased = (prompt) => ({ ...params(prompt), logit_bias: { 1000: 5 }, min_tokens: 4, repetition_penalty: 1.3 });
  const scoredAlone = (await client.completions.create(scoring(prompts[0]))).choices[0].logprobs.token_logprobs;
  const biasedAlone = (await client.completions.create(biased(prompts[1]))).choices[0].text;
  const mixed = await Promise.all(Array.from({ length: 48 }, (_, i) => {
    if (i % 3 === 0) return client.completions.create(scoring(prompts[0]));
    if (i % 3 === 1) return client.completions.create(biased(prompts[1]));
    return client.completions.create(params(prompts[i % 8]));
  }));
  mixed.forEach((response, i) => {
    if (i % 3 === 0) assert.deepEqual(response.choices[0].logprobs.token_logprobs, scoredAlone, `scoring ${i}`);
    else if (i % 3 === 1) assert.equal(response.choices[0].text, biasedAlone, `biased ${i}`);
    else assert.equal(response.choices[0].text, alone[i % 8], `greedy ${i}`);
  });
});

test('stop strings end the text before the match', { skip }, async () => {
  const params = { model: MODEL, messages, max_tokens: 16, temperature: 0, ignore_eos: true };
  const full = (await client.chat.completions.create(params)).choices[0].message.content;
  const chars = [...full];
  if (chars.length < 6) return;  // the dummy model's text is too short to cut
  const stop = chars.slice(Math.floor(chars.length / 2), Math.floor(chars.length / 2) + 2).join('');
  const cut = await client.chat.completions.create({ ...params, stop: [stop] });
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.equal(cut.choices[0].message.content, full.slice(0, full.indexOf(stop)));
});

test('chat logprobs with top alternatives', { skip }, async () => {
  const response = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, temperature: 0, ignore_eos: true,
                                                          logprobs: true, top_logprobs: 3 });
  const content = response.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const entry of content) {
    assert.equal(typeof entry.token, 'string');
    assert.ok(entry.logprob <= 0);
    assert.ok(Array.isArray(entry.bytes));
    assert.equal(entry.top_logprobs.length, 3);
    assert.ok(entry.top_logprobs[0].logprob >= entry.top_logprobs[2].logprob);
  }
});

test('aborting a stream mid-way frees its KV cache', { skip }, async () => {
  const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 200, temperature: 0, ignore_eos: true, stream: true });
  let chunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content !== undefined && ++chunks >= 3) break;  // leaving the loop aborts the HTTP request
  }
  await waitFor(async () => {
    const { engine } = await serverInfo();
    return engine.running_requests === 0 && engine.waiting_requests === 0;
  }, { what: 'the aborted request to leave the engine' });
  const flushed = await fetch(`${server.url}/flush_cache`, authorized({ method: 'POST' }));
  assert.equal(flushed.status, 200);
  const info = await serverInfo();
  assert.equal(info.engine.kv_used_tokens, 0);
  assert.equal(info.http.active_generations, 0);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /fathom:num_requests_total\{finish_reason="abort"\} [1-9]/);
});

test('bad requests get OpenAI-style errors and the server keeps serving', { skip }, async () => {
  const expectError = async (promise, status, check = () => {}) => {
    await assert.rejects(promise, (error) => {
      assert.ok(error instanceof OpenAI.APIError, String(error));
      assert.equal(error.status, status, error.message);
      check(error);
      return true;
    });
  };
  await expectError(client.chat.completions.create({ model: 'gpt-4o', messages }), 404,
                    (error) => { assert.ok(error instanceof OpenAI.NotFoundError); assert.equal(error.code, 'model_not_found'); });
  await expectError(client.chat.completions.create({ model: MODEL, messages, max_tokens: 0 }), 400,
                    (error) => { assert.ok(error instanceof OpenAI.BadRequestError); assert.equal(error.param, 'max_tokens'); });
  await expectError(client.chat.completions.create({ model: MODEL }), 400, (error) => assert.equal(error.param, 'messages'));
  // More choices than --max-queued-requests lets wait would be refused as a full queue on every retry: a 400.
  await expectError(client.chat.completions.create({ model: MODEL, messages, n: 101, max_tokens: 1 }), 400,
                    (error) => { assert.equal(error.param, 'n'); assert.match(error.message, /between 1 and 100/); });
  await expectError(client.chat.completions.create({ model: MODEL, messages, temperature: 'hot' }), 400,
                    (error) => assert.equal(error.code, 'invalid_type'));
  const longPrompt = 'word '.repeat(400);
  await expectError(client.completions.create({ model: MODEL, prompt: longPrompt, max_tokens: 4 }), 400,
                    (error) => assert.match(error.message, /context|long|exceed/i));
  await expectError(client.completions.create({ model: MODEL, prompt: longPrompt, max_tokens: 4, stream: true }), 400);
  const wrongKey = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
  await expectError(wrongKey.models.list(), 401, (error) => {
    assert.ok(error instanceof OpenAI.AuthenticationError);
    assert.equal(error.code, 'invalid_api_key');
  });

  const malformed = await getJson(`${server.url}/v1/chat/completions`,
                                  authorized({ method: 'POST', body: '{"model": ', headers: { 'Content-Type': 'application/json' } }));
  assert.equal(malformed.status, 400);
  assert.equal(malformed.body.error.code, 'invalid_json');
  const wrongMethod = await getJson(`${server.url}/v1/chat/completions`, authorized());
  assert.equal(wrongMethod.status, 405);
  const unknownPath = await getJson(`${server.url}/v2/nothing`, authorized());
  assert.equal(unknownPath.status, 404);
  const tooLarge = await fetch(`${server.url}/v1/completions`,
                               authorized({ method: 'POST', body: JSON.stringify({ prompt: 'x'.repeat(2 << 20) }) }));
  assert.equal(tooLarge.status, 413);
  assert.equal((await tooLarge.json()).error.type, 'invalid_request_error');
  // fetch() sends a string body as text/plain, which a page could do cross-origin without a preflight: refused.
  const plainText = await getJson(`${server.url}/generate`, authorized({ method: 'POST', body: JSON.stringify({ text: 'Hi' }) }));
  assert.equal(plainText.status, 415);
  assert.equal(plainText.body.error.code, 'unsupported_media_type');

  assert.equal((await fetch(`${server.url}/health`)).status, 200);
  const ok = await client.completions.create({ model: MODEL, prompt: 'still alive', max_tokens: 2, ignore_eos: true });
  assert.equal(ok.usage.completion_tokens, 2);
});

test('logit_bias, min_tokens and repetition_penalty reach the sampler', { skip }, async () => {
  const generate = async (sampling_params) => {
    const response = await getJson(`${server.url}/generate`, authorized({
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ text: 'Hello', sampling_params }) }));
    assert.equal(response.status, 200, JSON.stringify(response.body));
    return response.body;
  };
  const forced = await generate({ max_new_tokens: 3, temperature: 0, ignore_eos: true, logit_bias: { 1000: 100 } });
  assert.deepEqual(forced.output_ids, [1000, 1000, 1000]);
  const viaClient = await client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 3, temperature: 0,
                                                      ignore_eos: true, logit_bias: { 1000: 100 } });
  assert.equal(viaClient.choices[0].text, forced.text);
  // The forced token as a stop token: banned for the first two tokens, then it ends the generation.
  const delayed = await generate({ max_new_tokens: 6, temperature: 0, logit_bias: { 1000: 100 }, stop_token_ids: [1000],
                                   min_new_tokens: 2 });
  assert.equal(delayed.output_ids.length, 3);
  assert.ok(!delayed.output_ids.slice(0, 2).includes(1000), JSON.stringify(delayed.output_ids));
  assert.equal(delayed.meta_info.finish_reason.type, 'stop');
  const chat = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0,
                                                      logit_bias: { 1000: 100 }, stop_token_ids: [1000], min_tokens: 2 });
  assert.equal(chat.usage.completion_tokens, 3);
  assert.equal(chat.choices[0].finish_reason, 'stop');
  // The penalty's effect is checked against a reference in tests/scheduler; here that the server takes it and
  // bounds it.
  const penalized = await generate({ max_new_tokens: 4, temperature: 0, ignore_eos: true, repetition_penalty: 1.5 });
  assert.equal(penalized.output_ids.length, 4);
  await assert.rejects(client.completions.create({ model: MODEL, prompt: 'Hello', repetition_penalty: 2.5 }),
                       (error) => error.status === 400 && error.param === 'repetition_penalty');
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages, logit_bias: { 129280: 1 } }),
                       (error) => error.status === 400 && error.param === 'logit_bias' && /outside the vocabulary/.test(error.message));
});

test('prompt logprobs (echo with logprobs, logprob_start_len) agree with the generated tokens\' logprobs', { skip }, async () => {
  const generate = async (body) => {
    const response = await getJson(`${server.url}/generate`, authorized({
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) }));
    assert.equal(response.status, 200, JSON.stringify(response.body));
    return response.body;
  };
  const prompt = [0, 1500, 2500, 3500, 4500, 5500];
  const generated = await generate({ input_ids: prompt, return_logprob: true, top_logprobs_num: 2,
                                     sampling_params: { max_new_tokens: 2, temperature: 0, ignore_eos: true } });
  const [first, second] = generated.output_ids;
  const scoredBody = { input_ids: [...prompt, first, second], return_logprob: true, top_logprobs_num: 2,
                       logprob_start_len: prompt.length, sampling_params: { max_new_tokens: 1, temperature: 0 } };
  const scored = await generate(scoredBody);
  const input = scored.meta_info.input_token_logprobs;
  assert.deepEqual(input.map((entry) => entry[1]), [first, second]);
  for (let i = 0; i < 2; ++i) {
    assert.ok(Math.abs(input[i][0] - generated.meta_info.output_token_logprobs[i][0]) < 2e-3,
              `${JSON.stringify(input)} against ${JSON.stringify(generated.meta_info.output_token_logprobs)}`);
  }
  assert.equal(scored.meta_info.input_top_logprobs[0][0][1], first);  // the greedy token tops its row
  // Again, now with the prompt and its scores in the prefix cache: the same results.
  assert.deepEqual((await generate(scoredBody)).meta_info.input_token_logprobs, input);

  // lm-evaluation-harness's loglikelihood request: token-id prompts, echo, logprobs 1, max_tokens 1.
  const completion = await client.completions.create({ model: MODEL, prompt: [[...prompt, first], [...prompt, 7]],
                                                      max_tokens: 1, logprobs: 1, echo: true, temperature: 0 });
  for (const choice of completion.choices) {
    const { token_logprobs: tokenLogprobs, top_logprobs: top, tokens } = choice.logprobs;
    assert.equal(tokens.length, prompt.length + 2);
    assert.equal(tokenLogprobs[0], null);
    assert.equal(top[0], null);
    assert.ok(tokenLogprobs.slice(1).every((value) => typeof value === 'number' && value <= 0));
  }
  // Echo without generation (max_tokens 0) and /generate's max_new_tokens 0: the prompt's logprobs only.
  const echoOnly = await client.completions.create({ model: MODEL, prompt: [[...prompt, first]], max_tokens: 0,
                                                    logprobs: 1, echo: true });
  assert.equal(echoOnly.choices[0].logprobs.tokens.length, prompt.length + 1);
  assert.equal(echoOnly.usage.completion_tokens, 0);
  assert.equal(echoOnly.choices[0].finish_reason, 'length');
  const scoredOnly = await generate({ ...scoredBody, sampling_params: { max_new_tokens: 0 } });
  assert.deepEqual(scoredOnly.output_ids, []);
  assert.deepEqual(scoredOnly.meta_info.input_token_logprobs, input);
  // vLLM's prompt_logprobs on a chat: one dict per prompt token (null first), holding the token with its rank.
  const chatIds = (await getJson(`${server.url}/tokenize`, authorized({
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ messages }) }))).body.tokens;
  const scoredChat = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1, prompt_logprobs: 2 });
  assert.equal(scoredChat.prompt_logprobs.length, chatIds.length);
  assert.equal(scoredChat.prompt_logprobs[0], null);
  scoredChat.prompt_logprobs.slice(1).forEach((entry, i) => {
    const own = entry[String(chatIds[i + 1])];
    assert.ok(own && own.rank >= 1 && own.logprob <= 0, JSON.stringify(entry));
    assert.ok(Object.keys(entry).length >= 2 && Object.keys(entry).length <= 3);
  });
  const greedy = completion.choices.find((choice) => choice.index === 0).logprobs;
  assert.ok(Math.abs(greedy.token_logprobs[prompt.length] - generated.meta_info.output_token_logprobs[0][0]) < 2e-3);
  assert.equal(Math.max(...Object.values(greedy.top_logprobs[prompt.length])), greedy.token_logprobs[prompt.length]);
});

test('SGLang-style endpoints', { skip }, async () => {
  const json = { 'Content-Type': 'application/json' };
  const generated = await getJson(`${server.url}/generate`, authorized({
    method: 'POST', headers: json, body: JSON.stringify({ text: 'Hello', sampling_params: { max_new_tokens: 5, temperature: 0, ignore_eos: true } }) }));
  assert.equal(generated.status, 200);
  assert.equal(generated.body.meta_info.completion_tokens, 5);
  assert.equal(generated.body.output_ids.length, 5);
  assert.equal(generated.body.meta_info.finish_reason.type, 'length');

  const byIds = await getJson(`${server.url}/generate`, authorized({
    method: 'POST', headers: json, body: JSON.stringify({ input_ids: [[0, 100, 200], [0, 300]], sampling_params: { max_new_tokens: 2, ignore_eos: true } }) }));
  assert.equal(byIds.status, 200);
  assert.equal(byIds.body.length, 2);

  // vLLM's /tokenize and /detokenize with the real tokenizer: a round trip, and a chat's ids as the chat runs them.
  const tokenized = await getJson(`${server.url}/tokenize`, authorized({
    method: 'POST', headers: json,
    body: JSON.stringify({ prompt: 'Hello world', add_special_tokens: false, return_token_strs: true }) }));
  assert.equal(tokenized.status, 200);
  assert.equal(tokenized.body.count, tokenized.body.tokens.length);
  assert.deepEqual(tokenized.body.token_strs, ['Hello', '\u0120world']);  // the vocabulary's strings, as vLLM's
  const detokenized = await getJson(`${server.url}/detokenize`, authorized({
    method: 'POST', headers: json, body: JSON.stringify({ tokens: tokenized.body.tokens }) }));
  assert.equal(detokenized.body.prompt, 'Hello world');
  const chatTokens = await getJson(`${server.url}/tokenize`, authorized({
    method: 'POST', headers: json, body: JSON.stringify({ messages }) }));
  const chat = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 1 });
  assert.equal(chatTokens.body.count, chat.usage.prompt_tokens);

  assert.equal((await fetch(`${server.url}/health_generate`)).status, 200);
  const modelInfo = await getJson(`${server.url}/get_model_info`, authorized());
  assert.equal(modelInfo.body.is_generation, true);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  for (const name of ['fathom:num_running_reqs', 'fathom:num_queue_reqs', 'fathom:token_usage', 'fathom:cache_hit_rate',
                      'fathom:time_to_first_token_seconds_bucket', 'fathom:inter_token_latency_seconds_bucket',
                      'fathom:generation_tokens_total']) {
    assert.ok(metrics.includes(name), `metrics lack ${name}`);
  }
});
