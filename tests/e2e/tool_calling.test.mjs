// End-to-end function calling and reasoning output with the official `openai` npm client.
//
// 1. A two-turn tool-calling conversation against models/fathom-nano (a small DeepSeek-V3-architecture model
//    trained to emit DeepSeek-V3 tool calls; FATHOM_NANO_DIR overrides the path, FATHOM_NANO_TOOL_CALL_PARSER the
//    parser): the model chooses to call a tool, streamed and non-streamed results agree, and the tool result is
//    answered in a second turn. Skipped, saying why, while that checkpoint is absent.
// 2. The same API surface on the tiny random-weight model (always available): forced calls (tool_choice naming a
//    function, "required"), "none", request validation, a history with tool calls and tool results, and
//    reasoning_content from a template that opens a <think> block in the prompt. Random weights make the text
//    noise, so these check structure and streaming/non-streaming agreement, not wording.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import OpenAI from 'openai';

import { repoRoot, startServer, tokenizerDir } from './server_process.mjs';

const MARKERS = ['<｜tool▁calls▁begin｜>', '<｜tool▁call▁begin｜>', '<｜tool▁sep｜>', '<｜tool▁call▁end｜>', '<｜tool▁calls▁end｜>',
                 '<think>', '</think>'];

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const timeTool = {
  type: 'function',
  function: { name: 'get_time', description: 'Current local time for a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};

function assertNoMarkers(text, where) {
  for (const marker of MARKERS) assert.ok(!(text ?? '').includes(marker), `${where} contains ${marker}: ${JSON.stringify(text)}`);
}

// Streams with the client's own accumulator (ChatCompletionStream), which checks the delta protocol (an index,
// then id/type/name before argument fragments) while rebuilding the message.
async function streamedCompletion(client, params) {
  const stream = client.chat.completions.stream({ ...params, stream: true });
  return stream.finalChatCompletion();
}

// Name, arguments and content of a choice, for comparing streamed and non-streamed results (ids differ).
function summary(choice) {
  return {
    finish_reason: choice.finish_reason,
    content: choice.message.content ?? '',
    tool_calls: (choice.message.tool_calls ?? []).map((call) => ({ type: call.type, name: call.function.name, arguments: call.function.arguments })),
  };
}

function checkToolCalls(message, toolNames) {
  assert.ok(Array.isArray(message.tool_calls) && message.tool_calls.length >= 1, `no tool calls: ${JSON.stringify(message)}`);
  const ids = new Set();
  for (const call of message.tool_calls) {
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    ids.add(call.id);
    assert.ok(toolNames.includes(call.function.name), `unknown tool ${call.function.name}`);
    assert.equal(typeof JSON.parse(call.function.arguments), 'object', `arguments are not a JSON object: ${call.function.arguments}`);
    assertNoMarkers(call.function.arguments, 'arguments');
  }
  assert.equal(ids.size, message.tool_calls.length, 'tool call ids must be unique');
  assertNoMarkers(message.content, 'content');
}

const nanoDir = process.env.FATHOM_NANO_DIR ?? path.join(repoRoot, 'models', 'fathom-nano');
const nanoHasWeights = ['config.json', 'tokenizer.json'].every((file) => existsSync(path.join(nanoDir, file))) &&
                       (existsSync(path.join(nanoDir, 'model.safetensors')) || existsSync(path.join(nanoDir, 'model.safetensors.index.json')));
const nanoSkip = nanoHasWeights ? false
                                : `no trained checkpoint in ${nanoDir} (config.json, tokenizer.json and model.safetensors): ` +
                                  'the fathom-nano two-turn tool-calling test runs once that model is there';

describe('two-turn tool calling with fathom-nano', { skip: nanoSkip }, () => {
  const MODEL = 'fathom-nano';
  let server;
  let client;

  before(async () => {
    server = await startServer({
      checkpointDir: nanoDir, servedModelName: MODEL,
      extraArgs: ['--tool-call-parser', process.env.FATHOM_NANO_TOOL_CALL_PARSER ?? 'deepseekv3'],
    });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600_000 });
  });

  after(async () => {
    if (!server) return;
    const { code } = await server.stop();
    assert.equal(code, 0, `fathom serve did not exit cleanly:\n${server.output()}`);
  });

  test('the model calls a tool, then answers from its result', async () => {
    const tools = [weatherTool, timeTool];
    const toolNames = tools.map((tool) => tool.function.name);
    const messages = [{ role: 'user', content: 'What is the weather in Paris right now?' }];
    const params = { model: MODEL, messages, tools, temperature: 0, max_tokens: 256 };

    // Turn 1: the model decides to call a tool (tool_choice defaults to auto).
    const first = await client.chat.completions.create(params);
    const firstChoice = first.choices[0];
    assert.equal(firstChoice.finish_reason, 'tool_calls', `expected a tool call, got ${JSON.stringify(firstChoice.message)}`);
    checkToolCalls(firstChoice.message, toolNames);

    const streamedFirst = await streamedCompletion(client, params);
    checkToolCalls(streamedFirst.choices[0].message, toolNames);
    assert.deepEqual(summary(streamedFirst.choices[0]), summary(firstChoice), 'streaming and non-streaming turn 1 differ');

    // Turn 2: the assistant message with its tool calls and one tool result per call.
    const history = [
      ...messages,
      { role: 'assistant', content: firstChoice.message.content, tool_calls: firstChoice.message.tool_calls },
      ...firstChoice.message.tool_calls.map((call) => ({
        role: 'tool', tool_call_id: call.id,
        content: JSON.stringify(call.function.name === 'get_weather' ? { city: 'Paris', temperature_c: 18, condition: 'light rain' }
                                                                     : { city: 'Paris', time: '14:05' }),
      })),
    ];
    const second = await client.chat.completions.create({ ...params, messages: history });
    const secondChoice = second.choices[0];
    assert.equal(typeof secondChoice.message.content, 'string');
    assert.ok(secondChoice.message.content.trim().length > 0, 'the second turn has no answer text');
    assertNoMarkers(secondChoice.message.content, 'turn 2 content');
    assert.ok(['stop', 'length', 'tool_calls'].includes(secondChoice.finish_reason));

    const streamedSecond = await streamedCompletion(client, { ...params, messages: history });
    assert.deepEqual(summary(streamedSecond.choices[0]), summary(secondChoice), 'streaming and non-streaming turn 2 differ');
  });
});

const tinySkip = tokenizerDir() ? false : 'the DeepSeek tokenizer directory is not available';

describe('tool and reasoning API surface on the tiny random model', { skip: tinySkip }, () => {
  const MODEL = 'tiny-deepseek';
  let server;
  let client;
  const tools = [weatherTool, timeTool];

  before(async () => {
    // The V3.1-layout template renders tools into the system prompt and opens <think> when thinking is on.
    server = await startServer({
      servedModelName: MODEL,
      extraArgs: ['--tool-call-parser', 'deepseekv31', '--reasoning-parser', 'deepseek-r1',
                  '--chat-template', path.join(repoRoot, 'tests', 'chat', 'data', 'fathom_v31_style.jinja')],
    });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
  });

  after(async () => {
    if (!server) return;
    const { code } = await server.stop();
    assert.equal(code, 0, `fathom serve did not exit cleanly:\n${server.output()}`);
  });

  const base = { model: MODEL, temperature: 0, max_tokens: 8, ignore_eos: true };
  const ask = [{ role: 'user', content: 'Weather in Oslo?' }];

  test('a named tool_choice yields that call, streamed and not alike', async () => {
    const params = { ...base, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
    const plain = await client.chat.completions.create(params);
    const choice = plain.choices[0];
    assert.equal(choice.message.tool_calls.length >= 1, true);
    const call = choice.message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    // Random weights never close the call within 8 tokens: the call is kept with the arguments so far.
    assert.equal(choice.finish_reason, 'length');
    assertNoMarkers(call.function.arguments, 'arguments');
    assertNoMarkers(choice.message.content, 'content');

    const streamed = await streamedCompletion(client, params);
    assert.deepEqual(summary(streamed.choices[0]), summary(choice));
  });

  test('tool_choice required and none agree streamed and not, and never leak markers', async () => {
    for (const tool_choice of ['required', 'none', 'auto']) {
      const params = { ...base, messages: ask, tools, tool_choice };
      const plain = (await client.chat.completions.create(params)).choices[0];
      assertNoMarkers(plain.message.content, `${tool_choice} content`);
      if (tool_choice === 'none') assert.equal(plain.message.tool_calls, undefined);
      for (const call of plain.message.tool_calls ?? []) assert.ok(['get_weather', 'get_time'].includes(call.function.name));
      const streamed = await streamedCompletion(client, params);
      assert.deepEqual(summary(streamed.choices[0]), summary(plain), `tool_choice ${tool_choice}`);
    }
  });

  test('invalid tools and tool_choice are 400s', async () => {
    await assert.rejects(
      client.chat.completions.create({ ...base, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'send_email' } } }),
      (error) => error instanceof OpenAI.BadRequestError && error.param === 'tool_choice' && /send_email/.test(error.message));
    await assert.rejects(
      client.chat.completions.create({ ...base, messages: ask, tools: [{ type: 'function', function: { name: 'bad name' } }] }),
      (error) => error instanceof OpenAI.BadRequestError && error.param === 'tools[0].function.name');
    await assert.rejects(
      client.chat.completions.create({ ...base, messages: [...ask, { role: 'tool', content: '18C' }] }),
      (error) => error instanceof OpenAI.BadRequestError && error.param === 'messages[1].tool_call_id');
  });

  test('a history with tool calls and tool results is accepted', async () => {
    const history = [
      ...ask,
      { role: 'assistant', content: null,
        tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_abc', content: '{"temperature_c": 3}' },
    ];
    const plain = (await client.chat.completions.create({ ...base, messages: history, tools })).choices[0];
    assert.equal(plain.finish_reason === 'length' || plain.finish_reason === 'tool_calls', true);
    const streamed = await streamedCompletion(client, { ...base, messages: history, tools });
    assert.deepEqual(summary(streamed.choices[0]), summary(plain));
  });

  test('a prompt that opens <think> puts the output in reasoning_content', async () => {
    const params = { ...base, messages: ask, chat_template_kwargs: { thinking: true } };
    const plain = (await client.chat.completions.create(params)).choices[0];
    // The random model never writes </think> in 8 tokens: everything is reasoning.
    assert.equal(typeof plain.message.reasoning_content, 'string');
    assert.ok(plain.message.reasoning_content.length > 0);
    assert.equal(plain.message.content, null);  // only reasoning: no answer yet
    assertNoMarkers(plain.message.reasoning_content, 'reasoning_content');

    let reasoning = '';
    let content = '';
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
      for (const choice of chunk.choices) {
        reasoning += choice.delta?.reasoning_content ?? '';
        content += choice.delta?.content ?? '';
      }
    }
    assert.equal(reasoning, plain.message.reasoning_content);
    assert.equal(content, '');

    const unseparated = (await client.chat.completions.create({ ...params, separate_reasoning: false })).choices[0];
    assert.equal(unseparated.message.reasoning_content, undefined);
    assert.equal(unseparated.message.content, plain.message.reasoning_content.length > 0 ? unseparated.message.content : '');
    assert.ok(unseparated.message.content.includes(plain.message.reasoning_content.trim()));
  });
});
