// Small tokenizer.json configurations, each exercising one component (split behaviors, regex
// semantics, digits, ByteLevel, added-token options, normalizers, post-processors, decoders,
// unknown handling). HF tokenizers computes their expected outputs; the C++ tests replay them.

// GPT-2's byte -> printable character map (ByteLevel alphabet).
export function byteLevelAlphabet() {
  const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const chars = [];
  let extra = 256;
  for (let b = 0; b < 256; b++) chars.push(String.fromCodePoint(printable(b) ? b : extra++));
  return chars;
}

const ALPHABET = byteLevelAlphabet();

// Byte-level vocab: the 256 byte characters (ids 0..255), then every merge result in order.
function byteLevelModel(merges, { arrayForm = false, extraTokens = [], ignoreMerges = undefined } = {}) {
  const vocab = {};
  ALPHABET.forEach((c, i) => { vocab[c] = i; });
  let next = 256;
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = next++;
  for (const token of extraTokens) if (!(token in vocab)) vocab[token] = next++;
  const model = {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, vocab,
    merges: arrayForm ? merges.map(([a, b]) => [a, b]) : merges.map(([a, b]) => `${a} ${b}`),
  };
  if (ignoreMerges !== undefined) model.ignore_merges = ignoreMerges;
  return model;
}

const WORD_MERGES = [
  ['Ġ', 't'], ['h', 'e'], ['Ġt', 'he'], ['l', 'l'], ['e', 'll'], ['h', 'ell'], ['hell', 'o'], ['Ġ', 'hello'],
  ['o', 'r'], ['w', 'or'], ['wor', 'l'], ['worl', 'd'], ['Ġ', 'world'], ['o', ','], [',', 'Ġ'], ['Ġ', 'w'],
  ['d', '.'], ['.', 'Ġ'], ['s', 'Ġ'], ['Ġ', 'Ġ'], ['ĠĠ', 'ĠĠ'], ['ĠĠ', 'x'], ['Ġ', 'a'], ['a', 'b'], ['ab', 'c'],
  ['c', 'd'], ['Ġ', 'cd'], ['1', '2'], ['12', '3'], ['Ċ', 'Ċ'], ['Ġ', 'Ċ'], ['Ã', '¤'], ['Ã¤', 'Ã¤'], ['?', '!'],
  ['A', 'B'], ['AB', 'C'], ['x', 'x'], ['Ġ', 'A'], ['ĉ', 'ĉ'], ['Ġ', '1'], ['<', 'm'], ['<m', '>'], ['Ġ', '<m>'],
];

const byteLevelPre = (addPrefixSpace = false, useRegex = false) =>
  ({ type: 'ByteLevel', add_prefix_space: addPrefixSpace, trim_offsets: true, use_regex: useRegex });
const byteLevelDecoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
const split = (pattern, behavior, invert = false) => ({ type: 'Split', pattern, behavior, invert });
const addedToken = (id, content, options = {}) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true, ...options,
});

function tokenizerJson({ model, pre = null, normalizer = null, post = null, decoder = byteLevelDecoder, added = [] }) {
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer,
    pre_tokenizer: pre, post_processor: post, decoder, model,
  };
}

const COMMON_TEXTS = [
  '', 'Hello, world! How are you?', 'hello world. the end', 'the the  the\tthe\nthe', '  leading and trailing  ',
  'ABC def GhI jKL', 'abc abcab ab cd cdd acd', 'a\nb\na\nab', 'xxAxxBxxCx', 'a12b345c٣4٥x６７', '1234567 12 3',
  'hello<m>world <m> x  <m>  y', 'a[w]b [w] [w]x [w]', 'Q and Q<n>Q', '<s>hi</s> <s> </s>', 'ää äää ä',
  'emoji 😀👍🏽 ok', 'tabs\t\tand\r\nCRLF\n\n', "it's we'll they've I'm", '?!?! ,,, ...', 'ab\u00a0cd\u3000ef',
  'abc<m>x<m>', '<m>x and <m>', 'é<m> _[w] 1[w] -[w]', 'ĠĠ literal Ġ', 'unknown: zyxw VUT ÿ',
];

const RANDOM_ALPHABET = ['a', 'b', 'c', 'd', 'h', 'e', 'l', 'o', 'x', 'Q', 'A', 'B', ' ', ' ', '  ', '\n', '\t', '\r\n',
  ',', '.', '!', '?', '1', '2', '3', '٣', 'ä', 'é', '😀', '中', '<m>', '[w]', '<s>', '<n>', "'", '\u00a0', '\u0301'];

export function syntheticTokenizers(random) {
  const randomTexts = [];
  for (let i = 0; i < 40; i++) {
    const length = 1 + Math.floor(random() * 14);
    let text = '';
    for (let j = 0; j < length; j++) text += RANDOM_ALPHABET[Math.floor(random() * RANDOM_ALPHABET.length)];
    randomTexts.push(text);
  }
  const texts = [...COMMON_TEXTS, ...randomTexts];
  const model = byteLevelModel(WORD_MERGES);
  const list = [];
  const add = (name, tokenizer, extraTexts = []) => list.push({ name, tokenizer, texts: [...texts, ...extraTexts] });

  for (const behavior of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']) {
    for (const invert of [false, true]) {
      add(`split_${behavior}${invert ? '_invert' : ''}`, tokenizerJson({
        model, pre: { type: 'Sequence', pretokenizers: [split({ Regex: '\\s+|[,.!?]' }, behavior, invert), byteLevelPre()] },
      }));
    }
  }
  add('split_string_pattern', tokenizerJson({
    model, pre: { type: 'Sequence', pretokenizers: [split({ String: ', ' }, 'Removed'), split({ String: '.' }, 'MergedWithNext'), byteLevelPre()] },
  }));
  add('regex_semantics', tokenizerJson({
    model, pre: { type: 'Sequence', pretokenizers: [split({ Regex: '^a|b$|(?<=c)d|\\s+(?!\\S)|\\p{Lu}+|\\p{Mn}' }, 'Isolated'), byteLevelPre()] },
  }), ['a\naab\nb', 'cdcd dcd', 'x   y  \n', 'ÀÉ àé']);
  add('empty_matches', tokenizerJson({
    model, pre: { type: 'Sequence', pretokenizers: [split({ Regex: 'x*' }, 'Isolated'), split({ Regex: '(?=[A-Z])' }, 'MergedWithNext'), byteLevelPre()] },
  }));
  add('digits_individual', tokenizerJson({
    model, pre: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, byteLevelPre()] },
  }));
  add('digits_contiguous', tokenizerJson({
    model, pre: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: false }, byteLevelPre()] },
  }));
  add('gpt2_byte_level', tokenizerJson({
    model: byteLevelModel(WORD_MERGES, { arrayForm: true }), pre: byteLevelPre(true, true),
    post: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  }));
  add('byte_level_regex_no_prefix', tokenizerJson({ model, pre: byteLevelPre(false, true) }));
  add('byte_level_prefix_after_split', tokenizerJson({
    model, pre: { type: 'Sequence', pretokenizers: [split({ String: '|' }, 'Removed'), byteLevelPre(true, false)] },
  }), ['the|the| the|', '|||', 'a| b|  c']);

  const addedModel = byteLevelModel(WORD_MERGES, { extraTokens: ['<s>', '</s>', '[w]', '<n>', 'abcd', '<m>x'] });
  const v = addedModel.vocab;
  add('added_tokens', tokenizerJson({
    model: addedModel,
    pre: byteLevelPre(false, true),
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Replace', pattern: { String: 'Q' }, content: '<n>' }] },
    added: [
      addedToken(v['<s>'], '<s>'),
      addedToken(v['</s>'], '</s>'),
      addedToken(v['<m>'], '<m>', { lstrip: true, rstrip: true }),
      addedToken(v['[w]'], '[w]', { single_word: true, special: false }),
      addedToken(v['<n>'], '<n>', { normalized: true, special: false }),
      addedToken(v['abcd'], 'abcd', { normalized: true, special: false }),
      addedToken(v['<m>x'], '<m>x', { special: false }),
    ],
    post: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: {
        '<s>': { id: '<s>', ids: [v['<s>']], tokens: ['<s>'] },
        '</s>': { id: '</s>', ids: [v['</s>']], tokens: ['</s>'] },
      },
    },
  }), ['abcd abcdd xabcd', '<m>xx <m>x', 'a  <m>  b<m>  <m>']);
  add('normalizers', tokenizerJson({
    model,
    pre: byteLevelPre(false, false),
    normalizer: {
      type: 'Sequence',
      normalizers: [
        { type: 'Strip', strip_left: true, strip_right: true },
        { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' },
        { type: 'Prepend', prepend: '▁' },
      ],
    },
  }));
  add('decoder_replace_then_byte_level', tokenizerJson({
    model, pre: byteLevelPre(false, true),
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: 'l' }, content: 'L' }, byteLevelDecoder] },
  }));
  add('decoder_byte_level_then_replace', tokenizerJson({
    model, pre: byteLevelPre(false, true),
    decoder: { type: 'Sequence', decoders: [byteLevelDecoder, { type: 'Replace', pattern: { String: ' ' }, content: '_' }] },
  }));
  add('decoder_fuse', tokenizerJson({
    model, pre: byteLevelPre(false, true), decoder: { type: 'Sequence', decoders: [byteLevelDecoder, { type: 'Fuse' }] },
  }));
  add('decoder_none', tokenizerJson({ model, pre: byteLevelPre(false, true), decoder: null }));
  add('decoder_empty_sequence', tokenizerJson({ model, pre: byteLevelPre(false, true), decoder: { type: 'Sequence', decoders: [] } }));
  add('ignore_merges', tokenizerJson({
    model: byteLevelModel(WORD_MERGES.slice(0, 4), { extraTokens: ['Ġworld', 'ĠĠĠ'], ignoreMerges: true }),
    pre: byteLevelPre(false, true),
  }));
  const bertModel = byteLevelModel(WORD_MERGES, { extraTokens: ['[CLS]', '[SEP]'] });
  add('bert_processing', tokenizerJson({
    model: bertModel,
    pre: byteLevelPre(false, true),
    post: { type: 'BertProcessing', sep: ['[SEP]', bertModel.vocab['[SEP]']], cls: ['[CLS]', bertModel.vocab['[CLS]']] },
  }));

  // Character-level BPE (no ByteLevel): unknown characters, fused or not, and byte fallback.
  const charVocab = {};
  let nextId = 0;
  for (const token of ['<unk>', ...'abcdehlowrxQ ,.!?'.split(''), 'he', 'll', 'hell', 'hello', 'ab', 'abc']) charVocab[token] = nextId++;
  const charMerges = ['h e', 'l l', 'he ll', 'hell o', 'a b', 'ab c'];
  const charModel = (options) => ({
    type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, vocab: charVocab, merges: charMerges, ...options,
  });
  const charPre = split({ Regex: '\\s+' }, 'Removed');
  add('char_bpe_unknown', tokenizerJson({ model: charModel({}), pre: charPre, decoder: null }));
  add('char_bpe_fused_unknown', tokenizerJson({ model: charModel({ fuse_unk: true }), pre: charPre, decoder: null }));
  const fallbackVocab = { ...charVocab };
  for (let b = 0; b < 256; b++) fallbackVocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = nextId + b;
  add('char_bpe_byte_fallback', tokenizerJson({
    model: charModel({ vocab: fallbackVocab, byte_fallback: true }), pre: charPre, decoder: null,
  }));

  for (const entry of list) {
    const vocabSize = Object.keys(entry.tokenizer.model.vocab).length;
    entry.decode_ids = [];
    for (let i = 0; i < 12; i++) {
      const ids = [];
      const length = 1 + Math.floor(random() * 10);
      for (let j = 0; j < length; j++) ids.push(Math.floor(random() * vocabSize));
      entry.decode_ids.push(ids);
    }
  }
  return list;
}
