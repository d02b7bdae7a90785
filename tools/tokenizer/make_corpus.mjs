#!/usr/bin/env node
// Tokenizer conformance corpus and reference throughput, computed with HF tokenizers (npm binding,
// the same Rust library as Python `tokenizers`). Run from the repo root after `npm install`.
//
//   node tools/tokenizer/make_corpus.mjs inputs     # regenerate the corpus texts (deterministic)
//   node tools/tokenizer/make_corpus.mjs expected   # HF ids/decodes for the stored texts
//   node tools/tokenizer/make_corpus.mjs check      # recompute and compare with the stored expectations
//   node tools/tokenizer/make_corpus.mjs bench --file F [--tokenizer DIR] [--runs N] [--per-line]
//   node tools/tokenizer/make_corpus.mjs bench-text --out F [--mb N]   # deterministic benchmark text
//
// Options: --data-dir DIR (default ../shared/data/deepseek-v3 next to the repo).
// tools/tokenizer/make_corpus.py computes the same expectations with Python tokenizers.
process.env.RAYON_NUM_THREADS = '1';
process.env.TOKENIZERS_PARALLELISM = 'false';

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { CODE, EMOJI, MULTILINGUAL, NUMBERS, SPECIAL, WHITESPACE } from './corpus_samples.mjs';
import { syntheticTokenizers } from './synthetic_tokenizers.mjs';

const { Tokenizer } = createRequire(import.meta.url)('tokenizers');
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const DATA_OUT = path.join(REPO, 'tests', 'tokenizer', 'data');
const INPUTS_FILE = path.join(DATA_OUT, 'corpus_inputs.json');
const SYNTHETIC_FILE = path.join(DATA_OUT, 'synthetic_tokenizers.json');
const EXPECTED_FILE = path.join(DATA_OUT, 'corpus_expected.json');
const DEEPSEEK_TOKENIZERS = { r1: 'tokenizer.json', v3: 'hf-deepseek-v3/tokenizer.json' };
const MODEL_VOCAB_SIZE = 129280;

function option(name, fallback) {
  const index = process.argv.indexOf(name);
  return index >= 0 ? process.argv[index + 1] : fallback;
}
const dataDir = option('--data-dir', path.resolve(REPO, '..', 'shared', 'data', 'deepseek-v3'));

// Small deterministic PRNG (sfc32) so the corpus is identical on every run and machine.
function makeRandom(seed) {
  let a = 0x9e3779b9, b = 0x243f6a88, c = 0xb7e15162, d = seed >>> 0;
  return () => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t / 4294967296;
  };
}

const pick = (random, list) => list[Math.floor(random() * list.length)];
const randomInt = (random, low, high) => low + Math.floor(random() * (high - low + 1));

function randomCodePoint(random) {
  const ranges = [
    [0x20, 0x7e, 6], [0x00, 0x1f, 1], [0x80, 0x2ff, 2], [0x300, 0x36f, 2], [0x370, 0x1fff, 3],
    [0x2000, 0x206f, 2], [0x2070, 0x2fff, 2], [0x3000, 0x30ff, 2], [0x3400, 0x4dbf, 1], [0x4e00, 0x9fff, 3],
    [0xa000, 0xd7ff, 2], [0xe000, 0xffff, 2], [0x10000, 0x1ffff, 3], [0x20000, 0x3ffff, 1], [0xe0000, 0xe01ef, 1],
    [0xf0000, 0x10ffff, 1],
  ];
  const total = ranges.reduce((sum, r) => sum + r[2], 0);
  let roll = random() * total;
  for (const [low, high, weight] of ranges) {
    roll -= weight;
    if (roll < 0) return randomInt(random, low, high);
  }
  return 0x41;
}

const ATOMS = [
  ...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', ...'0123456789', ...'!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~',
  ' ', ' ', ' ', '  ', '\t', '\n', '\n\n', '\r\n', '\r', '\u00a0', '\u3000', '\u2028', '\u200b', '\u200d', '\ufe0f',
  'the', ' the', 'ing', ' and', 'tion', "'s", "'ll", 'é', 'ß', 'ñ', 'ø', '中', '文', '龥', '龦', '鿿', 'ぁ', 'ゟ', '゠', 'ヿ', 'ㇰ', '㐀',
  '한', '글', 'Ж', 'λ', 'א', 'ب', 'क', '\u0301', '\u0308', '\u093f', '٣', '５', '²', 'Ⅷ', '€', '—', '…', '·', '¿', '«', '»',
  '😀', '👍', '🏽', '👨‍👩‍👧', '🇯🇵', '𝔘', '𠀋', '\u{1F3F4}\u{E0067}', '<think>', '</think>', '<｜User｜>', '<｜Assistant｜>',
  '<｜end▁of▁sentence｜>', '<|EOT|>', '<｜', '｜>', '▁',
];

function randomAtomText(random, atomCount) {
  let text = '';
  for (let i = 0; i < atomCount; i++) text += pick(random, ATOMS);
  return text;
}

function randomUnicodeText(random, count) {
  let text = '';
  for (let i = 0; i < count; i++) {
    const cp = randomCodePoint(random);
    if (cp >= 0xd800 && cp <= 0xdfff) continue;  // lone surrogates are not text
    text += String.fromCodePoint(cp);
  }
  return text;
}

async function makeInputs() {
  const random = makeRandom(20250517);
  const reference = Tokenizer.fromFile(path.join(dataDir, DEEPSEEK_TOKENIZERS.r1));
  const samples = [...MULTILINGUAL, ...CODE, ...EMOJI, ...NUMBERS, ...WHITESPACE, ...SPECIAL];
  const texts = [...samples];
  const separators = ['', ' ', '  ', '\n', '\n\n', '\r\n', '\t', ' \n'];
  for (let i = 0; i < 250; i++) texts.push(pick(random, samples) + pick(random, separators) + pick(random, samples));
  // Real subwords: concatenations of decoded vocabulary tokens exercise many merges.
  for (let i = 0; i < 400; i++) {
    const ids = [];
    for (let j = randomInt(random, 1, 8); j > 0; j--) ids.push(randomInt(random, 3, 127999));
    texts.push(await reference.decode(ids, false));
  }
  const naturalTextCount = texts.length;  // the texts above read like real text; bench-text uses them
  for (let i = 0; i < 900; i++) texts.push(randomAtomText(random, randomInt(random, 1, 40)));
  for (let i = 0; i < 250; i++) texts.push(randomUnicodeText(random, randomInt(random, 1, 24)));
  // Long inputs.
  texts.push(samples.join('\n'));
  texts.push(' '.repeat(3000), '\n'.repeat(1000), ' \n'.repeat(500), 'a'.repeat(5000), '1234567890'.repeat(300));
  texts.push('中'.repeat(1500), '😀'.repeat(400), '<think>'.repeat(100), '\u00a0 '.repeat(400), 'ab'.repeat(2000));
  texts.push(randomAtomText(random, 12000), randomUnicodeText(random, 3000));

  const decodeIds = [];
  const specials = [0, 1, 2, 128000, 128797, 128798, 128799, 128800, 128803, 128804, 128805, 128814];
  for (let i = 0; i < 300; i++) {
    const ids = [];
    for (let j = randomInt(random, 1, 24); j > 0; j--) {
      const roll = random();
      if (roll < 0.35) ids.push(randomInt(random, 3, 258));  // mostly single-byte tokens: split characters
      else if (roll < 0.8) ids.push(randomInt(random, 0, 127999));
      else if (roll < 0.95) ids.push(pick(random, specials));
      else ids.push(randomInt(random, 128815, MODEL_VOCAB_SIZE - 1));  // embedding padding rows
    }
    decodeIds.push(ids);
  }
  writeJson(INPUTS_FILE, {
    description: 'Tokenizer conformance corpus texts, generated by tools/tokenizer/make_corpus.mjs inputs; do not edit.',
    natural_text_count: naturalTextCount,
    texts,
    decode_ids: decodeIds,
  });
  writeJson(SYNTHETIC_FILE, {
    description: 'Small tokenizer.json configurations per component, generated by tools/tokenizer/make_corpus.mjs inputs; do not edit.',
    tokenizers: syntheticTokenizers(random),
  });
  console.log(`wrote ${texts.length} texts, ${decodeIds.length} decode cases`);
}

async function encodeAll(tokenizer, texts, addSpecialTokens) {
  const out = [];
  for (const text of texts) out.push((await tokenizer.encode(text, null, { addSpecialTokens })).getIds());
  return out;
}

async function decodeAll(tokenizer, idLists, skipSpecialTokens) {
  const out = [];
  for (const ids of idLists) out.push(await tokenizer.decode(ids, skipSpecialTokens));
  return out;
}

async function computeExpected() {
  const inputs = JSON.parse(fs.readFileSync(INPUTS_FILE, 'utf8'));
  const synthetic = JSON.parse(fs.readFileSync(SYNTHETIC_FILE, 'utf8'));
  const result = { reference: 'HF tokenizers 0.23.2 (npm binding)', deepseek: {}, synthetic: {} };
  for (const [name, file] of Object.entries(DEEPSEEK_TOKENIZERS)) {
    const tokenizer = Tokenizer.fromFile(path.join(dataDir, file));
    const encode = await encodeAll(tokenizer, inputs.texts, false);
    const roundtripMismatches = [];
    for (let i = 0; i < encode.length; i++) {
      if ((await tokenizer.decode(encode[i], false)) !== inputs.texts[i]) roundtripMismatches.push(i);
    }
    result.deepseek[name] = {
      encode,
      roundtrip_mismatches: roundtripMismatches,
      decode: await decodeAll(tokenizer, inputs.decode_ids, false),
      decode_skip_special: await decodeAll(tokenizer, inputs.decode_ids, true),
    };
  }
  for (const entry of synthetic.tokenizers) {
    const tokenizer = Tokenizer.fromString(JSON.stringify(entry.tokenizer));
    result.synthetic[entry.name] = {
      encode: await encodeAll(tokenizer, entry.texts, false),
      encode_special: await encodeAll(tokenizer, entry.texts, true),
      decode: await decodeAll(tokenizer, entry.decode_ids, false),
      decode_skip_special: await decodeAll(tokenizer, entry.decode_ids, true),
    };
  }
  return compactDeepseek(result);
}

// The V3 file differs from R1 only in two added tokens: store only the V3 encodings that differ.
function compactDeepseek(result) {
  const { r1, v3 } = result.deepseek;
  const differing = {};
  v3.encode.forEach((ids, i) => {
    if (JSON.stringify(ids) !== JSON.stringify(r1.encode[i])) differing[i] = ids;
  });
  delete v3.encode;
  v3.encode_where_different_from_r1 = differing;
  return result;
}

// One id list or string per line keeps the files reviewable; make_corpus.py writes the same layout.
function formatJson(value, indent = '') {
  const inner = indent + ' ';
  if (Array.isArray(value)) {
    if (value.every((v) => typeof v === 'number')) return JSON.stringify(value);
    if (value.length === 0) return '[]';
    return '[\n' + value.map((v) => inner + formatJson(v, inner)).join(',\n') + '\n' + indent + ']';
  }
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value);
    if (keys.length === 0) return '{}';
    return '{\n' + keys.map((k) => inner + JSON.stringify(k) + ': ' + formatJson(value[k], inner)).join(',\n') + '\n' + indent + '}';
  }
  return JSON.stringify(value);
}

function writeJson(file, value) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, formatJson(value) + '\n');
}

async function check() {
  const stored = JSON.parse(fs.readFileSync(EXPECTED_FILE, 'utf8'));
  const fresh = await computeExpected();
  const a = JSON.stringify({ ...stored, reference: '' });
  const b = JSON.stringify({ ...fresh, reference: '' });
  if (a !== b) {
    console.error('MISMATCH between stored expectations and this HF tokenizers build');
    process.exit(1);
  }
  console.log('OK: stored expectations reproduced');
}

function median(values) {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor(sorted.length / 2)];
}

async function bench() {
  const file = option('--file');
  if (!file) throw new Error('bench needs --file F');
  const tokenizer = Tokenizer.fromFile(path.join(option('--tokenizer', dataDir), 'tokenizer.json'));
  const runs = Number(option('--runs', '5'));
  const perLine = process.argv.includes('--per-line');
  const text = fs.readFileSync(file, 'utf8');
  const bytes = Buffer.byteLength(text, 'utf8');
  const pieces = perLine ? text.split('\n') : [text];
  let tokenCount = 0;
  const wallSeconds = [];
  const cpuSeconds = [];  // whole process: encode runs on one worker thread, the main thread waits
  await tokenizer.encode('warm up', null, { addSpecialTokens: false });
  for (let run = 0; run < runs; run++) {
    const start = process.hrtime.bigint();
    const cpuStart = process.cpuUsage();
    tokenCount = 0;
    if (perLine) {
      // One batch call: with TOKENIZERS_PARALLELISM=false HF encodes the lines sequentially on one
      // thread, so this measures HF's per-line work without the binding's per-call async overhead.
      for (const encoding of await tokenizer.encodeBatch(pieces, { addSpecialTokens: false })) tokenCount += encoding.getIds().length;
    } else {
      tokenCount += (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds().length;
    }
    const cpu = process.cpuUsage(cpuStart);
    cpuSeconds.push((cpu.user + cpu.system) / 1e6);
    wallSeconds.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  const megabytes = bytes / 1e6;
  console.log(`hf-tokenizers-node: ${(megabytes / median(wallSeconds)).toFixed(2)} MB/s wall, ` +
    `${(megabytes / median(cpuSeconds)).toFixed(2)} MB/s cpu (median of ${runs}, ${bytes} bytes, ${tokenCount} tokens, ` +
    `${perLine ? 'per line' : 'whole file'})`);
}

function benchText() {
  const out = option('--out');
  if (!out) throw new Error('bench-text needs --out F');
  const megabytes = Number(option('--mb', '4'));
  const inputs = JSON.parse(fs.readFileSync(INPUTS_FILE, 'utf8'));
  const random = makeRandom(7);
  const sources = inputs.texts.slice(0, inputs.natural_text_count);
  const parts = [];
  let size = 0;
  while (size < megabytes * 1e6) {
    const piece = pick(random, sources) + pick(random, [' ', '\n', '\n\n', ' ']);
    parts.push(piece);
    size += Buffer.byteLength(piece, 'utf8');
  }
  fs.writeFileSync(out, parts.join(''));
  console.log(`wrote ${size} bytes to ${out}`);
}

const command = process.argv[2];
if (command === 'inputs') await makeInputs();
else if (command === 'expected') writeJson(EXPECTED_FILE, await computeExpected());
else if (command === 'check') await check();
else if (command === 'bench') await bench();
else if (command === 'bench-text') benchText();
else {
  console.error('usage: make_corpus.mjs inputs|expected|check|bench|bench-text [options]');
  process.exit(2);
}
